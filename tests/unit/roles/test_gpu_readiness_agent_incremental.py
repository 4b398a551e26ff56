# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness agent with its incremental kernel-log reader (issue #15): the metrics of a steady-state run are
those of a run that reads the whole window; the state file never breaks a run.  The reader's own cases are in
tests/unit/plugins/module_utils/gpu/test_kernel_log_state.py; benchmarks/agent_footprint.py runs here as a smoke test."""
import importlib.util
import json
import os
import re
import shutil
import sys
import time

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import kernel_log_state

from test_gpu_readiness_agent import CAPTURES, STANDIN, agent, metrics

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
NOW = int(time.time())
_SPEC = importlib.util.spec_from_file_location("agent_footprint", os.path.join(REPO, "benchmarks", "agent_footprint.py"))
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def jline(epoch, message):
    return "%s gpu-h100-01 kernel: %s\n" % (bench.iso(epoch), message)


XID_119 = ("NVRM: Xid (PCI:0000:18:00): 119, pid=2710030, name=nvidia-smi, Timeout waiting for RPC from GSP! "
           "Expected function 10 (FREE) (0xa55a0050 0x0).")
XID_13 = "NVRM: Xid (PCI:0000:2a:00): 13, pid=11, name=python3, Graphics Exception: ESR 0x57c730=0xc04000b"
VOLATILE = ("gpu_native_readiness_agent_last_run_ts_seconds", "gpu_native_readiness_agent_duration_seconds",
            "gpu_native_node_validation_last_success_ts_seconds")


@pytest.fixture
def node(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(os.path.join(REPO, "tests", "standins", "journalctl"), str(bin_dir / "journalctl"))
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    journal = tmp_path / "journal.txt"
    monkeypatch.setenv("JOURNALCTL_STANDIN_LOG", str(journal))
    monkeypatch.setenv("JOURNALCTL_STANDIN_ARGS_LOG", str(tmp_path / "journalctl.args"))
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(CAPTURES, "h100x8-healthy"))
    boot = tmp_path / "boot_id"
    boot.write_text("0f0f0f0f-2222-3333-4444-555555555555\n")
    monkeypatch.setattr(kernel_log_state, "BOOT_ID_FILE", str(boot))
    config = {
        "node_name": "gpu-h100-01", "textfile_dir": str(tmp_path / "textfile"), "state_dir": str(tmp_path / "state"),
        "nvidia_smi": STANDIN, "lspci": str(tmp_path / "no-lspci"), "pci_sysfs_root": str(tmp_path / "no-sysfs"),
        "kernel_log": "auto", "xid_since": "24h", "toolkit_command": [sys.executable, "-c", "pass"],
        "cuda_library": "libcuda-does-not-exist.so.1",
        "kube": {"kubectl": str(tmp_path / "no-kubectl"), "kubeconfig": str(tmp_path / "no-kubeconfig")},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))

    class Node(object):
        config_path = str(path)
        output = str(tmp_path / "textfile" / "gpu_native_readiness.prom")
        state_file = os.path.join(config["state_dir"], kernel_log_state.STATE_FILE)

        def __init__(self):
            self.journal = journal

        def append(self, text):
            with open(str(journal), "a") as handle:
                handle.write(text)

        def run(self):
            assert agent.main(["--config", self.config_path]) == 0
            with open(self.output) as handle:
                return "".join(line for line in handle if not line.startswith(VOLATILE))

        def calls(self):
            return [json.loads(line) for line in (tmp_path / "journalctl.args").read_text().splitlines()]

    return Node()


def test_steady_state_metrics_equal_a_full_read(node):
    node.journal.write_text(jline(NOW - 30 * 3600, XID_13)  # outside the 24 h window
                            + "".join(jline(NOW - 20 * 3600 + i, "eth0: link up %d" % i) for i in range(50))
                            + jline(NOW - 5 * 3600, XID_119))
    first = node.run()
    assert 'xid="119"' in first and 'xid="13"' not in first
    node.append(jline(NOW - 120, XID_13) + jline(NOW - 60, XID_119))
    steady = node.run()
    assert "--after-cursor" in node.calls()[-1]
    os.unlink(node.state_file)
    fresh = node.run()
    assert "--since" in node.calls()[-1]
    assert steady == fresh
    found = dict((labels["xid"], (labels, value)) for labels, value in metrics(node.output)[
        "gpu_native_xid_events_in_window"])
    assert found["119"][1] == 2.0 and found["119"][0]["gpu"] == "0" and found["119"][0]["cleared"] == "false"
    assert found["13"][1] == 1.0
    unhealthy = [labels["gpu"] for labels, value in metrics(node.output)["gpu_native_gpu_healthy"] if value == 0]
    assert unhealthy == ["0"]


def test_a_corrupt_state_file_is_a_note_not_an_error(node, capsys):
    node.journal.write_text(jline(NOW - 600, XID_119))
    os.makedirs(os.path.dirname(node.state_file))
    with open(node.state_file, "w") as handle:
        handle.write('{"format": "gpu_native.fleet/kernel_log_state/1", "sources": ')
    text = node.run()
    assert "gpu_native_readiness_agent_error{node=\"gpu-h100-01\"} 0" in text
    assert 'xid="119"' in text
    assert re.search(r"state file .* not valid JSON .*starting over", capsys.readouterr().err)


def test_an_unwritable_state_dir_still_writes_the_metrics(node, tmp_path, capsys):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    config = json.loads(open(node.config_path).read())
    config["state_dir"] = str(blocker / "state")
    with open(node.config_path, "w") as handle:
        json.dump(config, handle)
    node.journal.write_text(jline(NOW - 600, XID_119))  # GPU 0 not ready: no last_success write either
    text = node.run()
    assert 'xid="119"' in text and "gpu_native_readiness_agent_error{node=\"gpu-h100-01\"} 0" in text
    assert "cannot write the kernel-log state" in capsys.readouterr().err


def test_footprint_benchmark_runs_with_a_small_journal(tmp_path):
    """Keeps benchmarks/agent_footprint.py working (issue #15); never asserts timings."""
    report = bench.run(2000, 1, str(tmp_path))
    assert [result["source"] for result in report["results"]] == ["journal", "file"]
    for result in report["results"]:
        assert result["steady_equals_fresh"] and result["expired_xid79_absent"]
        assert result["xid_series_first"] > 0
        for phase in ("first", "steady", "no_kernel_log"):
            assert result[phase]["agent_cpu_ms"] > 0 and result[phase]["agent_rss_mb"] > 0


def test_footprint_benchmark_compares_a_baseline_and_refuses_a_broken_agent(tmp_path):
    """--baseline runs another checkout's agent on the same journal (here this one, so the verdicts must agree);
    an agent that reports an internal error (here: a module left out of the role's closure) stops the benchmark
    instead of being timed as a fast run (issue #32)."""
    report = bench.run(2000, 1, str(tmp_path / "same"), sources=("journal",), baseline=REPO)
    other = report["results"][0]["others"]["baseline"]
    assert other["steady_xids_equal"] is True
    assert other["steady"]["agent_cpu_ms"] > 0 and other["steady"]["agent_per_python_start"] > 0
    broken = tmp_path / "broken"
    shutil.copytree(os.path.join(REPO, "roles", "gpu_readiness"), str(broken / "roles" / "gpu_readiness"))
    shutil.copytree(os.path.join(REPO, "plugins", "module_utils"), str(broken / "plugins" / "module_utils"))
    listing = broken / "roles" / "gpu_readiness" / "vars" / "main.yml"
    listing.write_text(listing.read_text().replace("  - gpu/xid.py\n", ""))
    with pytest.raises(RuntimeError, match="reported an internal error"):
        bench.run(2000, 1, str(tmp_path / "broken-run"), sources=("journal",), baseline=str(broken))
