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


# --- the gate from its checks (the check-result contract), the outcome, the summary rows -----------------------

HEALTHY = {"status": "pass", "reasons": [], "gpu_ready": True}
DCGM_FAIL = {"status": "fail", "reasons": ["dcgmi diag failed: memory on GPU 3"], "passed": False}
NOT_ASKED = {"changed": False, "skipped": True, "false_condition": "preflight_dcgm | bool"}


def test_a_gate_passes_when_its_checks_pass_and_keeps_skips_as_notes():
    status, reasons = preflight.gate_from_checks("hardware", {
        "gpu_health": HEALTHY, "dcgm_diag": NOT_ASKED,
        "gpu_bandwidth": {"status": "skip", "reasons": ["nvbandwidth was not found"]}})
    assert (status, reasons) == ("pass", ["bandwidth check skipped: nvbandwidth was not found"])


def test_a_failed_or_errored_check_fails_the_gate_with_only_what_failed_in_order():
    status, reasons = preflight.gate_from_checks("hardware", {
        "gpu_health": {"status": "fail", "reasons": ["GPU 4 is unhealthy"]}, "dcgm_diag": DCGM_FAIL,
        "gpu_bandwidth": {"status": "error", "reasons": ["nvbandwidth did not answer within 600 s."]}})
    assert status == "fail"
    assert reasons == ["GPU 4 is unhealthy", "dcgmi diag failed: memory on GPU 3", "nvbandwidth did not answer within 600 s."]


def test_a_dcgm_that_is_missing_and_not_required_is_a_note_not_a_failure():
    status, reasons = preflight.gate_from_checks("hardware", {
        "gpu_health": HEALTHY, "dcgm_diag": {"status": "skip", "reasons": ["dcgmi was not found (not required)"]}})
    assert status == "pass" and reasons == ["dcgmi was not found (not required)"]


def test_a_gate_whose_checks_all_skipped_is_a_skip():
    assert preflight.gate_from_checks("cuda", {"cuda_smoke": {"status": "skip", "reasons": ["check mode: ..."]}}) == (
        "skip", ["check mode: ..."])


def test_a_check_without_the_contract_fails_the_gate_naming_it():
    status, reasons = preflight.gate_from_checks("cuda", {"cuda_smoke": {"passed": True}})
    assert status == "fail" and "cuda_smoke returned no status and reasons" in reasons[0]
    with pytest.raises(preflight.PreflightError):
        preflight.gate_from_checks("cuda", [])


@pytest.mark.parametrize("passed,owned,uncordon,expected", [
    (False, True, True, "cordoned"), (True, True, True, "joined"), (True, False, True, "left_cordoned"),
    (True, True, False, "left_cordoned"), (True, "false", True, "left_cordoned")])
def test_the_outcome(passed, owned, uncordon, expected):
    assert preflight.outcome({"passed": passed}, owned, uncordon) == expected


class FakeHostVars(dict):
    """hostvars as a filter sees it: a mapping whose values template on access (here: one that raises)."""


class Broken(dict):
    def get(self, key, default=None):
        raise RuntimeError("template error")


def test_summary_rows_cover_every_host_even_without_a_verdict():
    hostvars = FakeHostVars({
        "a": {"preflight_node_name": "gpu-a", "preflight_outcome": "joined",
              "preflight_verdict": {"gates": {"spec": "pass"}, "reasons": []}},
        "b": {"preflight_outcome": "cordoned", "preflight_verdict": {"gates": {"spec": "fail"}, "reasons": ["spec: x"]}},
        "c": {},
        "d": Broken()})
    rows = preflight.summary_rows(hostvars, ["a", "b", "c", "d", "gone"])
    assert [(r["node"], r["verdict"]) for r in rows] == [
        ("gpu-a", "joined"), ("b", "cordoned"), ("c", preflight.NO_VERDICT), ("d", preflight.NO_VERDICT),
        ("gone", preflight.NO_VERDICT)]
    assert rows[1]["reasons"] == ["spec: x"] and rows[2]["gates"] == {}
