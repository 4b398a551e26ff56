"""The kubernetes gate's expected allocatable, counted from the node's facts (preflight.expected_allocatable).

The counts follow module_utils/gpu/device_counts.py (the field-truth rule): GPUs x time-slicing replicas, or the MIG
devices per profile (mixed: nvidia.com/mig-<profile>; single: all as nvidia.com/gpu).  The MIG state below is the
A100-SXM4-80GB capture of tests/fixtures/nvidia/01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt: 4 MIG devices,
GPU instances 3-6, each one compute instance (14 SMs, 19968 MiB: 1g.20gb).
"""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter.preflight import preflight_kubernetes_gate
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.preflight import FAIL, PASS, PreflightError

H100_GPUS = [{"index": i, "mig_enabled": False, "mig_devices": 0} for i in range(8)]
A100_MIG_GPUS = [{"index": 0, "mig_enabled": True, "mig_devices": 4}]


def _instance(gi, start, profile="1g.20gb", profile_id=15, computes=((0, 0),)):
    return {"profile": profile, "profile_id": profile_id, "gpu_instance_id": gi, "start": start, "size": 2,
            "compute_instances": [{"instance_id": ci, "profile_id": pid} for ci, pid in computes]}


A100_MIG_STATE = {"changed": False, "in_sync": True, "actual": {"0": {
    "mig_mode": "Enabled", "mig_mode_pending": "Enabled",
    "instances": [_instance(3, 0), _instance(4, 2), _instance(5, 4), _instance(6, 6)]}}}


def test_plain_gpus_count_one_each():
    result = preflight.expected_allocatable(H100_GPUS, 8)
    assert result["expected"] == {"nvidia.com/gpu": 8}
    assert result["unknown"] == {} and result["strategy"] == "none"
    assert result["basis"] == "counted from 8 GPU(s), migStrategy none, the plugin's defaults"


def test_gpu_count_pads_gpus_nvidia_smi_counts_but_does_not_describe():
    assert preflight.expected_allocatable(H100_GPUS[:6], 8)["expected"] == {"nvidia.com/gpu": 8}


def test_a_gpu_named_only_by_the_kernel_log_is_not_counted():
    gpus = H100_GPUS + [{"index": None, "pci_bus_id": "0000:c1:00.0"}]
    assert preflight.expected_allocatable(gpus, None)["expected"] == {"nvidia.com/gpu": 8}


def test_time_slicing_multiplies_by_the_replicas():
    settings = {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    result = preflight.expected_allocatable(H100_GPUS, 8, settings)
    assert result["expected"] == {"nvidia.com/gpu": 32}
    assert "time-slicing" in result["basis"]


def test_time_slicing_with_rename_by_default_moves_the_count_to_shared():
    settings = {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 2}],
                "time_slicing_rename_by_default": True}
    assert preflight.expected_allocatable(H100_GPUS, 8, settings)["expected"] == {"nvidia.com/gpu.shared": 16}


def test_the_node_label_picks_the_device_plugin_class():
    settings = {"mig_strategy": "none", "classes": {"t4-shared": {"time_slicing_resources": [
        {"name": "nvidia.com/gpu", "replicas": 8}]}}, "node_classes": {"gpu-1": "default"}}
    labelled = preflight.expected_allocatable(H100_GPUS, 8, settings, None, "gpu-1",
                                              {"nvidia.com/device-plugin.config": "t4-shared"})
    assert labelled["expected"] == {"nvidia.com/gpu": 64} and labelled["config"] == "t4-shared"
    by_inventory = preflight.expected_allocatable(H100_GPUS, 8, dict(settings, node_classes={"gpu-1": "t4-shared"}),
                                                  None, "gpu-1", {})
    assert by_inventory["expected"] == {"nvidia.com/gpu": 64}
    assert preflight.expected_allocatable(H100_GPUS, 8, settings, None, "gpu-1", {})["expected"] == {
        "nvidia.com/gpu": 8}


def test_mig_mixed_counts_the_devices_per_profile():
    result = preflight.expected_allocatable(A100_MIG_GPUS, 1, {"mig_strategy": "mixed"}, A100_MIG_STATE)
    assert result["expected"] == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.20gb": 4}
    assert result["unknown"] == {} and result["notes"] == []
    assert result["basis"] == ("counted from 1 GPU(s), 4 MIG device(s) (4x 1g.20gb), migStrategy mixed, "
                               "device plugin config default")


def test_mig_mixed_with_two_profiles_and_a_whole_gpu():
    state = {"actual": {"0": {"mig_mode": "Enabled", "instances": [
        _instance(1, 4, "3g.40gb", 9, ((0, 2),)), _instance(3, 0, "1g.10gb", 19), _instance(4, 2, "1g.10gb", 19)]},
        "1": {"mig_mode": "Disabled", "instances": []}}}
    gpus = [{"index": 0, "mig_enabled": True, "mig_devices": 3}, {"index": 1, "mig_enabled": False}]
    result = preflight.expected_allocatable(gpus, 2, {"mig_strategy": "mixed"}, state)
    assert result["expected"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1}


def test_mig_single_counts_every_mig_device_as_a_gpu():
    result = preflight.expected_allocatable(A100_MIG_GPUS, 1, {"mig_strategy": "single"}, A100_MIG_STATE)
    assert result["expected"] == {"nvidia.com/gpu": 4}


def test_mig_single_with_a_mig_off_gpu_expects_no_total_and_says_the_plugin_refuses():
    # k8s-device-plugin v0.20.0 internal/rm/device_map.go: "all devices on the node must be configured with the
    # same migEnabled value" (constructed facts: the A100 capture's MIG GPU next to a GPU with MIG off)
    gpus = A100_MIG_GPUS + [{"index": 1, "mig_enabled": False, "mig_devices": 0}]
    result = preflight.expected_allocatable(gpus, 2, {"mig_strategy": "single"}, A100_MIG_STATE)
    assert result["expected"] == {} and result["unknown"] == {}
    assert "same migEnabled value" in result["refused"]
    gate = preflight_kubernetes_gate(_node({"nvidia.com/gpu": "5"}), [READY_POD], {}, {},
                                     counting={"gpus": gpus, "gpu_count": 2, "device_plugin": {"mig_strategy": "single"},
                                               "mig_state": A100_MIG_STATE})
    assert gate["status"] == FAIL
    assert gate["reasons"][0].startswith("migStrategy single with 1 GPU(s) in MIG mode and 1 not: the NVIDIA device "
                                         "plugin refuses to start")
    assert "Fix: enable MIG on every GPU of the node or on none, or use migStrategy mixed" in gate["reasons"][0]
    assert not any("expected" in reason and "allocatable nvidia.com/gpu" in reason for reason in gate["reasons"])
    assert gate["details"]["counting"]["refused"] == result["refused"]


def test_mig_mixed_without_an_assigned_layout_counts_the_total():
    result = preflight.expected_allocatable(A100_MIG_GPUS, 1, {"mig_strategy": "mixed"}, None)
    assert result["expected"] == {"nvidia.com/gpu": 0, "nvidia.com/mig-*": 4}
    assert any("no MIG layout is assigned" in note for note in result["notes"])


def test_a_split_gpu_instance_is_not_named_but_the_total_still_counts():
    state = {"actual": {"0": {"mig_mode": "Enabled", "instances": [
        _instance(3, 0, computes=((0, 0),)), _instance(4, 2, "2g.20gb", 14, ((0, 0), (1, 0)))]}}}
    gpus = [{"index": 0, "mig_enabled": True, "mig_devices": 3}]
    result = preflight.expected_allocatable(gpus, 1, {"mig_strategy": "mixed"}, state)
    assert result["expected"] == {"nvidia.com/gpu": 0, "nvidia.com/mig-*": 3}
    assert any("split into smaller compute instances" in note for note in result["notes"])


def test_an_unreadable_mig_state_is_said_and_the_total_counts():
    failed = {"failed": True, "msg": "nvidia-smi mig -lgi timed out"}
    result = preflight.expected_allocatable(A100_MIG_GPUS, 1, {"mig_strategy": "mixed"}, failed)
    assert result["expected"] == {"nvidia.com/gpu": 0, "nvidia.com/mig-*": 4}
    assert "nvidia-smi mig -lgi timed out" in result["notes"][0]


def test_no_gpu_facts_compares_nothing_and_says_so():
    result = preflight.expected_allocatable([], None)
    assert result["expected"] == {} and "hardware gate did not run" in result["notes"][0]


@pytest.mark.parametrize("settings,fragment", [
    ({"mig_stratgy": "mixed"}, "preflight_device_plugin.mig_stratgy is not a known key"),
    ({"mig_strategy": "both"}, "migStrategy both must be none, single or mixed"),
    ({"classes": {"a": {}}, "node_classes": {"gpu-1": "missing"}}, "config missing is not one of"),
    ({"time_slicing_resources": [{"name": "nvidia.com/gpu"}]}, "needs replicas >= 1"),
    ("mixed", "preflight_device_plugin is not a mapping"),
])
def test_bad_device_plugin_settings_are_refused_with_the_fix(settings, fragment):
    with pytest.raises(PreflightError) as info:
        preflight.expected_allocatable(H100_GPUS, 8, settings, None, "gpu-1", {})
    assert fragment in str(info.value) and "Fix:" in str(info.value)


def _node(allocatable, name="gpu-a100-mig"):
    return {"metadata": {"name": name, "labels": {}}, "status": {"allocatable": allocatable}}


READY_POD = {"metadata": {"name": "nvidia-device-plugin-x"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
MIG_COUNTING = {"gpus": A100_MIG_GPUS, "gpu_count": 1, "device_plugin": {"mig_strategy": "mixed"},
                "mig_state": A100_MIG_STATE}


def test_the_gate_passes_a_mig_node_with_the_counted_instances():
    gate = preflight_kubernetes_gate(_node({"nvidia.com/mig-1g.20gb": "4", "cpu": "64"}), [READY_POD], {}, {},
                                     counting=MIG_COUNTING)
    assert (gate["status"], gate["reasons"]) == (PASS, [])
    assert gate["details"]["resources"]["nvidia.com/mig-1g.20gb"] == {"expected": 4, "actual": 4}


def test_a_count_mismatch_fails_the_gate_naming_resource_expected_and_allocatable():
    gate = preflight_kubernetes_gate(_node({"nvidia.com/mig-1g.20gb": "3"}), [READY_POD], {}, {},
                                     counting=MIG_COUNTING)
    assert gate["status"] == FAIL
    assert gate["reasons"] == ["allocatable nvidia.com/mig-1g.20gb is 3, expected 4 (counted from 1 GPU(s), 4 MIG "
                               "device(s) (4x 1g.20gb), migStrategy mixed, device plugin config default)"]


def test_a_mig_profile_the_layout_does_not_have_fails_the_gate():
    gate = preflight_kubernetes_gate(_node({"nvidia.com/mig-1g.20gb": "4", "nvidia.com/mig-2g.20gb": "1"}),
                                     [READY_POD], {}, {}, counting=MIG_COUNTING)
    assert gate["status"] == FAIL and gate["reasons"][0].startswith("allocatable nvidia.com/mig-2g.20gb is 1, expected 0")


def test_the_mig_total_is_compared_over_every_mig_resource():
    counting = dict(MIG_COUNTING, mig_state=None)
    passing = preflight_kubernetes_gate(_node({"nvidia.com/mig-1g.20gb": "2", "nvidia.com/mig-2g.20gb": "2"}),
                                        [READY_POD], {}, {}, counting=counting)
    assert passing["status"] == PASS
    failing = preflight_kubernetes_gate(_node({"nvidia.com/mig-1g.20gb": "3"}), [READY_POD], {}, {},
                                        counting=counting)
    assert failing["reasons"][0].startswith("allocatable nvidia.com/mig-* is 3, expected 4")


def test_time_slicing_mismatch_fails_the_gate():
    counting = {"gpus": H100_GPUS, "gpu_count": 8,
                "device_plugin": {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    gate = preflight_kubernetes_gate(_node({"nvidia.com/gpu": "8"}), [READY_POD], {}, {}, counting=counting)
    assert gate["status"] == FAIL and gate["reasons"][0].startswith("allocatable nvidia.com/gpu is 8, expected 32 (")


def test_the_override_wins_over_the_counting_rule():
    gate = preflight_kubernetes_gate(_node({"nvidia.com/gpu": "8"}), [READY_POD], {"nvidia.com/gpu": 8}, {},
                                     counting=dict(MIG_COUNTING))
    assert gate["status"] == PASS and gate["details"]["expected_from"] == "preflight_expected_resources"
    bad = preflight_kubernetes_gate(_node({"nvidia.com/gpu": "7"}), [READY_POD], {"nvidia.com/gpu": 8}, {})
    assert bad["reasons"] == ["allocatable nvidia.com/gpu is 7, expected 8 (preflight_expected_resources)"]


def test_an_unknown_count_fails_the_gate_and_names_the_override():
    counting = {"gpus": H100_GPUS, "gpu_count": 8, "device_plugin": {"time_slicing_resources": [
        {"name": "nvidia.com/gpu", "replicas": 2, "devices": [0, 1]}]}}
    gate = preflight_kubernetes_gate(_node({"nvidia.com/gpu": "10"}), [READY_POD], {}, {}, counting=counting)
    assert gate["status"] == FAIL
    assert "the expected allocatable nvidia.com/gpu is unknown" in gate["reasons"][0]
    assert "Fix: set preflight_expected_resources" in gate["reasons"][0]


def test_bad_settings_fail_the_gate_with_the_reason():
    counting = dict(MIG_COUNTING, device_plugin={"mig_strategy": "both"})
    gate = preflight_kubernetes_gate(_node({"nvidia.com/gpu": "1"}), [READY_POD], {}, {}, counting=counting)
    assert gate["status"] == FAIL
    assert gate["reasons"][0].startswith("the expected allocatable cannot be counted: Device plugin config default: "
                                         "migStrategy both must be none, single or mixed")


def test_unknown_counting_keys_are_refused():
    with pytest.raises(AnsibleFilterError, match="counting takes only the keys"):
        preflight_kubernetes_gate(_node({}), [READY_POD], {}, {}, counting={"gpu": []})


def test_gpu_health_reports_the_mig_devices_the_counting_reads():
    from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia",
                        "01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt")
    with open(path) as handle:
        text = handle.read().split("# ---- BEGIN VERBATIM ----\n", 1)[1]
    gpus = gpu_health.evaluate({"nvidia_smi_xml": text}, expected_gpus=1)["gpus"]
    assert [(g["index"], g["mig_enabled"], g["mig_devices"]) for g in gpus] == [(0, True, 4)]
    assert preflight.expected_allocatable(gpus, 1, {"mig_strategy": "single"})["expected"] == {"nvidia.com/gpu": 4}
