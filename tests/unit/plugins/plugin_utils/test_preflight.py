"""The preflight verdict, the kubernetes gate, metrics and the summary."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.preflight import FAIL, PASS, SKIP, gate_result

ALL_PASS = [gate_result(gate, PASS) for gate in preflight.GATES]


def test_all_gates_pass():
    decision = preflight.verdict(ALL_PASS)
    assert decision["passed"] is True and decision["reasons"] == []
    assert preflight.annotation(decision) == "passed"


def test_one_failed_gate_fails_the_node_with_its_reason():
    results = ALL_PASS[:1] + [gate_result("hardware", FAIL, ["dcgmi diag failed: memory on GPU 3"])] + ALL_PASS[2:]
    decision = preflight.verdict(results)
    assert decision["passed"] is False and decision["failed_gates"] == ["hardware"]
    assert preflight.annotation(decision) == "hardware: dcgmi diag failed: memory on GPU 3"


def test_skipped_gate_is_reported_as_skipped_never_as_passed():
    results = [gate_result(g, PASS) for g in ("spec", "hardware", "kubernetes")] + [
        gate_result("cuda", SKIP, ["preflight_skip_gates names it"]), gate_result("serving", SKIP, ["demo"])]
    decision = preflight.verdict(results, required=("spec", "hardware", "kubernetes"))
    assert decision["passed"] is True
    assert decision["skipped_gates"] == ["cuda", "serving"]
    assert decision["gates"] == {"spec": "pass", "hardware": "pass", "kubernetes": "pass", "cuda": "skip",
                                 "serving": "skip"}
    text = preflight.metrics(results, decision, "gpu-1", 1700000000)
    assert 'gpu_native_preflight_gate_passed{node="gpu-1",gate="cuda"}' not in text
    assert 'gpu_native_preflight_gate_skipped{node="gpu-1",gate="cuda"} 1' in text


def test_a_required_gate_that_did_not_run_fails_the_node():
    decision = preflight.verdict([gate_result("spec", PASS)], required=("spec", "hardware"))
    assert decision["passed"] is False and decision["missing_gates"] == ["hardware"]
    assert decision["reasons"] == ["hardware: the gate did not run"]


def test_a_failure_needs_a_reason():
    assert gate_result("spec", FAIL)["reasons"] == ["failed without a reason (report this as a bug)"]


@pytest.mark.parametrize("gate,status", [("burn", PASS), ("spec", "passed"), ("spec", None)])
def test_bad_gate_results_are_refused(gate, status):
    with pytest.raises(preflight.PreflightError):
        gate_result(gate, status)


def test_metrics_are_valid_exposition_text():
    results = [gate_result("spec", PASS, duration_s=0.5), gate_result("hardware", FAIL, ["x"], 120)]
    decision = preflight.verdict(results, required=("spec", "hardware"))
    text = preflight.metrics(results, decision, 'node"1', 1700000000.7)
    assert 'gpu_native_preflight_gate_passed{node="node\\"1",gate="hardware"} 0' in text
    assert 'gpu_native_preflight_passed{node="node\\"1"} 0' in text
    assert 'gpu_native_preflight_last_run_ts_seconds{node="node\\"1"} 1700000000' in text
    assert 'gpu_native_preflight_gate_duration_seconds{node="node\\"1",gate="hardware"} 120.0' in text
    assert text.endswith("\n")


def _node(allocatable=None, labels=None):
    return {"metadata": {"name": "gpu-1", "labels": labels if labels is not None else {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
        "nvidia.com/mig.capable": "true", "nvidia.com/cuda.driver-version.full": "550.127.08"}},
        "status": {"allocatable": allocatable if allocatable is not None else {"nvidia.com/gpu": "8", "cpu": "96"}}}


READY_POD = {"metadata": {"name": "nvidia-device-plugin-abcde"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
FACTS = {"gpu_product": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "mig_capable": True, "driver_version": "550.127.08"}


def test_kubernetes_gate_passes_a_consistent_node():
    status, reasons, details = preflight.kubernetes_gate(_node(), [READY_POD], {"nvidia.com/gpu": 8}, FACTS)
    assert (status, reasons) == (PASS, [])
    assert details["resources"] == {"nvidia.com/gpu": {"expected": 8, "actual": 8}}


@pytest.mark.parametrize("node,pods,reason", [
    (_node({"nvidia.com/gpu": "7"}), [READY_POD], "allocatable nvidia.com/gpu is 7, expected 8"),
    (_node({}), [READY_POD], "allocatable nvidia.com/gpu is 0, expected 8"),
    (_node(labels={"nvidia.com/gpu.count": "8", "nvidia.com/mig.capable": "true",
                   "nvidia.com/cuda.driver-version.full": "550.127.08"}), [READY_POD],
     "GPU feature discovery label nvidia.com/gpu.product is missing"),
    (_node(labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
                   "nvidia.com/mig.capable": "true", "nvidia.com/cuda.driver-version.full": "535.54.03"}),
     [READY_POD], "label nvidia.com/cuda.driver-version.full is 535.54.03, the driver is 550.127.08"),
    (_node(), [], "no device plugin pod runs on the node"),
    (_node(), [{"metadata": {"name": "nvidia-device-plugin-x"}, "status": {"phase": "Pending"}}],
     "the device plugin pod is not Running and Ready (nvidia-device-plugin-x Pending)"),
    (None, [], "the node object could not be read from the API"),
])
def test_kubernetes_gate_faults(node, pods, reason):
    status, reasons, _details = preflight.kubernetes_gate(node, pods, {"nvidia.com/gpu": 8}, FACTS)
    assert status == FAIL and reason in reasons


def test_kubernetes_gate_reads_the_older_driver_label_trio():
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.count": "8",
              "nvidia.com/mig.capable": "true", "nvidia.com/cuda.driver.major": "550",
              "nvidia.com/cuda.driver.minor": "127", "nvidia.com/cuda.driver.rev": "08"}
    status, reasons, _details = preflight.kubernetes_gate(_node(labels=labels), [READY_POD], {"nvidia.com/gpu": 8},
                                                          FACTS)
    assert (status, reasons) == (PASS, [])


def test_summary_table():
    text = preflight.summary_table([
        {"node": "h100-a", "gates": {"spec": "pass", "hardware": "pass"}, "verdict": "joined", "reasons": []},
        {"node": "h100-err", "gates": {"spec": "pass", "hardware": "fail"}, "verdict": "cordoned",
         "reasons": ["hardware: GPU 4 (00000000:83:00.0) shows ERR!"]}])
    lines = text.splitlines()
    assert lines[0].split() == ["node", "spec", "hardware", "kubernetes", "cuda", "serving", "verdict", "why"]
    assert lines[3].split()[:8] == ["h100-err", "pass", "fail", "-", "-", "-", "cordoned", "hardware:"]
