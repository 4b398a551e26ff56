"""tools/fleet_report.py: per-host progress lines, the table, --html, and its exit status."""
import importlib.util
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_SPEC = importlib.util.spec_from_file_location("fleet_bench", os.path.join(REPO, "benchmarks", "fleet_compliance.py"))
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _tool(*args):
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tools", "fleet_report.py")] + list(args),
                          env=bench.ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    return proc.returncode, proc.stdout.decode()


def test_drift_and_unreachable_exit_1_compliant_limit_exits_0(tmp_path):
    inventory, drifting = bench.build_fleet(str(tmp_path / "fleet"), 2, 2, unreachable=1)
    assert list(drifting) == ["node002"]
    html = tmp_path / "report.html"
    rc, out = _tool("-i", inventory, "--forks", "3", "--html", str(html))
    assert rc == 1, out
    lines = out.splitlines()
    assert any(line.startswith("node001") and "compliant" in line for line in lines), out
    assert any(line.startswith("node002") and "DRIFT" in line and "spec=fail" in line for line in lines), out
    assert any(line.startswith("gone01") and "UNREACHABLE" in line for line in lines), out
    assert any(line.split()[:1] == ["host"] and "gpu_health" in line for line in lines), out
    assert "failed: node002, unreachable: gone01" in out
    assert "<svg" in html.read_text()

    rc, out = _tool("-i", inventory, "--limit", "node001")
    assert rc == 0, out
    assert "1 host(s): 1 compliant, failed: none, unreachable: none" in out


def test_missing_inventory_is_a_usage_error(tmp_path):
    rc, out = _tool("-i", str(tmp_path / "nope.yml"))
    assert rc == 2 and "does not exist" in out
