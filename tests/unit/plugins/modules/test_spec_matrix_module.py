"""The spec_matrix module end to end through main(), on fake node roots."""
import json
import os
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeTools
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import NodeFacts
from ansible_collections.gpu_native.fleet.plugins.modules import spec_matrix as module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "module_utils", "spec"))
from spec_matrix_support import FakeTools, h100_matrix, h100_tools, make_root, node_facts  # noqa: E402


def run(monkeypatch, capsys, args, root, tools):
    monkeypatch.setattr(module, "NodeFacts", lambda: node_facts(root, tools))
    with patch_module_args(args):
        with pytest.raises(SystemExit) as info:
            module.main()
    result = json.loads(capsys.readouterr().out)
    return info.value.code, result


@pytest.fixture
def h100_root(tmp_path):
    return make_root(tmp_path, "root_h100")


@pytest.fixture
def nogpu_root(tmp_path):
    return make_root(tmp_path, "root_nogpu")


def test_compliant_node(monkeypatch, capsys, h100_root):
    code, result = run(monkeypatch, capsys, {"matrix": h100_matrix()}, h100_root, h100_tools())
    assert code == 0
    assert result["compliant"] is True and result["changed"] is False
    assert result["profile"] == "h100-serving" and result["profile_selected_by"] == "match"
    assert result["summary"] == {"pass": 35, "fail": 0, "unknown": 0, "total": 35}
    assert result["results"][0] == {"check": "os", "name": "id", "expected": "ubuntu", "actual": "ubuntu",
                                    "status": "pass", "note": None}
    assert result["facts"]["driver"]["version"] == "565.57.01"
    assert result["facts"]["commands"] == ["nvidia-smi -q -x", "nvidia-ctk --version", "containerd --version",
                                           "kubelet --version",
                                           "systemctl show --property=Id,LoadState,ActiveState,SubState,"
                                           "UnitFileState -- nvidia-fabricmanager.service "
                                           "nvidia-persistenced.service"]
    assert [row["kubernetes"] for row in result["compatibility"]] == ["1.35", "1.34", "1.33", "1.32", "1.31"]


def test_drift_fails_with_one_line_and_full_results(monkeypatch, capsys, h100_root):
    matrix = h100_matrix()
    profile = matrix["profiles"]["h100-serving"]
    profile["sysctl"]["vm.max_map_count"] = "1048576"
    profile["driver"]["version"] = "550.127.08"
    code, result = run(monkeypatch, capsys, {"matrix": matrix}, h100_root, h100_tools())
    assert code == 1 and result["failed"] is True
    assert result["msg"] == (
        "spec drift against profile h100-serving: 2 item(s) not compliant: "
        "driver.version: expected 550.127.08, got 565.57.01; "
        "sysctl.vm.max_map_count: expected 1048576, got 262144. "
        "Fix: bring these items to the profile, or correct gpu_native_spec_matrix if the profile is wrong")
    assert result["compliant"] is False
    assert result["summary"] == {"pass": 33, "fail": 2, "unknown": 0, "total": 35}
    assert len(result["results"]) == 35 and "facts" in result


def test_drift_without_failing(monkeypatch, capsys, h100_root):
    matrix = h100_matrix()
    matrix["profiles"]["h100-serving"]["gpu"]["count"] = 4
    code, result = run(monkeypatch, capsys, {"matrix": matrix, "fail_on_drift": False}, h100_root, h100_tools())
    assert code == 0 and "failed" not in result
    assert result["compliant"] is False
    assert [r for r in result["results"] if r["status"] != "pass"] == [
        {"check": "gpu", "name": "count", "expected": "4", "actual": 8, "status": "fail", "note": None}]


def test_node_without_gpu_never_tracebacks(monkeypatch, capsys, nogpu_root):
    code, result = run(monkeypatch, capsys, {"matrix": h100_matrix(match=None), "fail_on_drift": False},
                       nogpu_root, FakeTools({}))
    assert code == 0 and result["compliant"] is False
    keyed = dict(("%s.%s" % (r["check"], r["name"]), r) for r in result["results"])
    assert keyed["gpu.count"]["actual"] is None and keyed["gpu.count"]["status"] == "fail"
    assert keyed["gpu.count"]["note"] == "driver not loaded; 1 NVIDIA GPU(s) on the PCI bus"
    assert keyed["driver.version"]["note"] == "driver not loaded: no /proc/driver/nvidia/version"
    assert keyed["compatibility.row"]["note"] == "kubelet not installed; no row can be chosen"
    assert result["facts"]["commands"] == []


def test_check_mode_runs_in_full(monkeypatch, capsys, h100_root):
    code, result = run(monkeypatch, capsys, {"matrix": h100_matrix(), "_ansible_check_mode": True},
                       h100_root, h100_tools())
    assert code == 0 and result["compliant"] is True and result["summary"]["total"] == 35
    assert "skipped" not in result


def test_requested_profile(monkeypatch, capsys, h100_root):
    matrix = h100_matrix()
    matrix["profiles"]["minimal"] = {"os": {"id": "ubuntu"}}
    code, result = run(monkeypatch, capsys, {"matrix": matrix, "profile": "minimal"}, h100_root, h100_tools())
    assert code == 0 and result["profile"] == "minimal" and result["profile_selected_by"] == "requested"
    assert result["summary"]["total"] == 1
    assert result["facts"]["commands"] == []  # nothing the profile does not need


def test_invalid_matrix_fails_before_collecting(monkeypatch, capsys, h100_root):
    matrix = h100_matrix()
    matrix["profiles"]["h100-serving"]["sysctl_typo"] = {"vm.max_map_count": 1}
    matrix["profiles"]["h100-serving"]["kernel"]["release"] = ">=5.15,<"
    tools = h100_tools()
    code, result = run(monkeypatch, capsys, {"matrix": matrix}, h100_root, tools)
    assert code == 1
    assert result["msg"].startswith("invalid gpu_native_spec_matrix: profiles.h100-serving.sysctl_typo: unknown key")
    assert "bad constraint '>=5.15,<' at profiles.h100-serving.kernel.release: operator '<' has no version" \
        in result["msg"]
    assert result["msg"].endswith("Fix: correct these keys or constraints (schema in docs/spec_matrix.md)")
    assert len(result["errors"]) == 2
    assert tools.calls == [] and "results" not in result


def test_unknown_profile(monkeypatch, capsys, h100_root):
    code, result = run(monkeypatch, capsys, {"matrix": h100_matrix(), "profile": "h200"}, h100_root, h100_tools())
    assert code == 1
    assert result["msg"] == ("cannot choose a spec profile: profile 'h200' is not in the matrix (profiles: "
                             "h100-serving). Fix: pass one of those names as profile")
    assert result["results"] == [] and result["compliant"] is None


def test_facts_only(monkeypatch, capsys, h100_root):
    code, result = run(monkeypatch, capsys, {"matrix": h100_matrix(), "facts_only": True}, h100_root, h100_tools())
    assert code == 0
    assert result["results"] == [] and result["compliant"] is None
    assert result["profile"] == "h100-serving"
    facts = result["facts"]
    assert facts["sysctl"]["vm.max_map_count"] == "262144"
    assert facts["packages"]["nvidia-fabricmanager-565"] == "565.57.01-1"
    assert facts["services"]["nvidia-persistenced.service"]["active_state"] == "active"
    assert facts["gpu"]["count"] == 8 and facts["kubernetes"]["kubelet_version"] == "1.33.2"


def test_facts_only_without_profiles(monkeypatch, capsys, nogpu_root):
    code, result = run(monkeypatch, capsys, {"matrix": {}, "facts_only": True}, nogpu_root, FakeTools({}))
    assert code == 0 and result["profile"] is None
    assert result["facts"]["os"]["id"] == "debian"


def test_matrix_is_required(monkeypatch, capsys, h100_root):
    code, result = run(monkeypatch, capsys, {}, h100_root, h100_tools())
    assert code == 1 and result["msg"] == "missing required arguments: matrix"


def test_real_nvidia_smi_standin_subprocess(monkeypatch, capsys, h100_root):
    """The default runner against the repository's nvidia-smi stand-in (real subprocess, real parser)."""
    from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import NodeFacts
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
    standin = os.path.join(repo, "tests", "standins", "nvidia-smi")
    capture = os.path.join(repo, "tests", "standins", "captures", "h100x8-healthy")
    if not (os.path.exists(standin) and os.path.isdir(capture)):
        pytest.skip("nvidia-smi stand-in not present")
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", capture)

    monkeypatch.setattr(module, "NodeFacts", lambda: NodeFacts(
        root=h100_root, tools=NodeTools(paths={"nvidia-smi": standin}, path_dirs=[])))
    matrix = {"profiles": {"h100": {"gpu": {"count": 8, "product": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"},
                                    "cuda": {"version": ">=12.4"}}}}
    with patch_module_args({"matrix": matrix}):
        with pytest.raises(SystemExit) as info:
            module.main()
    result = json.loads(capsys.readouterr().out)
    assert info.value.code == 0, result.get("msg")
    assert result["summary"] == {"pass": 4, "fail": 0, "unknown": 0, "total": 4}


RUNNER_FAILURES = [
    (None, "missing", "nvidia-smi not installed"),
    ("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9", "no_driver",
     "nvidia-smi failed: driver unreachable: NVIDIA-SMI has failed"),
    ("sleep 30", "timeout", "nvidia-smi failed: nvidia-smi did not answer within 1 s."),
    ("echo 'Failed to initialize NVML: Unknown Error' >&2; exit 255", "failed",
     "nvidia-smi failed: Failed to initialize NVML: Unknown Error"),
    ("printf 'GPU\\000\\377\\376'", "unreadable", "nvidia-smi output unreadable: it holds NUL bytes"),
    ("echo '<nvidia_smi_log><gpu>'", "ok", "nvidia-smi output unreadable: nvidia-smi -q -x output is not valid XML"),
]


RUNNER_FAILURE_IDS = [f[1] if f[1] != "ok" else "garbage_xml" for f in RUNNER_FAILURES]


@pytest.mark.parametrize("body, status, note", RUNNER_FAILURES, ids=RUNNER_FAILURE_IDS)
def test_each_runner_failure_through_spec_matrix(monkeypatch, capsys, h100_root, tmp_path, body, status, note):
    """A stand-in nvidia-smi script per runner failure: the GPU items are judged, never a hang or a crash."""
    binary = tmp_path / "nvidia-smi"
    if body:
        binary.write_text("#!/bin/sh\n%s\n" % body)
        binary.chmod(0o755)
    tools = NodeTools(paths={"nvidia-smi": str(binary)}, path_dirs=[], timeout=1)
    monkeypatch.setattr(module, "NodeFacts", lambda: NodeFacts(root=h100_root, tools=tools))
    matrix = {"profiles": {"h100": {"gpu": {"count": 8}}}}
    with patch_module_args({"matrix": matrix, "fail_on_drift": False}):
        with pytest.raises(SystemExit) as info:
            module.main()
    result = json.loads(capsys.readouterr().out)
    assert info.value.code == 0, result.get("msg")
    assert result["compliant"] is False
    assert [c.status for c in tools.calls if c.tool == "nvidia-smi"] == [status]
    assert result["facts"]["notes"]["gpu"].startswith(note), result["facts"]["notes"]
    assert result["results"][0]["status"] in ("fail", "unknown")
