"""The DRA kubernetes gate (plugins/plugin_utils/dra.py, filter dra_kubernetes_gate), on the driver's published
objects (tests/fixtures/dra: the slices and DeviceClasses of NVIDIA's DRA driver docs and chart)."""
import copy
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter.dra import dra_kubernetes_gate
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import dra

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "dra")
NODE = "gpu-node-1"
GPU_UUID = "GPU-2fa81118-5a5f-aa66-7660-471eed407181"
MIG_UUID = "MIG-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
DRIVER = "580.126.20"


def _load(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        text = handle.read()
    return text


def slice_for(name="resourceslice_a100_gpu.yaml", node=NODE):
    obj = yaml.safe_load(_load(name).replace("ipp1-0033", node))
    return obj


CLASSES = [yaml.safe_load(_load(name)) for name in ("deviceclass-gpu.yaml", "deviceclass-mig.yaml", "deviceclass-vfio-gpu.yaml")]
SMI_GPU = _load("nvidia_smi_L_a100_gpu.txt")
SMI_MIG = _load("nvidia_smi_L_a100_mig.txt")
READY_POD = {"metadata": {"name": "dra-driver-nvidia-gpu-kubelet-plugin-5qhc7"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
NODE_OBJ = {"metadata": {"name": NODE}, "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "0"}}}


def judge(slices=None, classes=None, pods=None, smi=SMI_GPU, node=None, driver=DRIVER, mig_enabled=None):
    return dra.judge(NODE, node or NODE_OBJ, [slice_for()] if slices is None else slices,
                     CLASSES if classes is None else classes, [READY_POD] if pods is None else pods,
                     dra.parse_smi_list(smi), driver, mig_enabled)


def test_parse_smi_list_keeps_mig_profiles_and_uuids():
    gpus = dra.parse_smi_list(SMI_MIG)
    assert gpus == [{"index": 0, "product": "NVIDIA A100-PCIE-40GB", "uuid": GPU_UUID,
                     "migs": [{"profile": "1g.5gb", "uuid": MIG_UUID}]}]


def test_parse_smi_list_real_h100_mig_capture():
    with open(os.path.join(FIXTURES, "..", "nvidia", "09_nvsmi_mig_tables_part.txt")) as handle:
        text = handle.read()
    block = text.split("[-L H100 x8")[1].split("# ----")[0]
    gpus = dra.parse_smi_list(block)
    assert [len(g["migs"]) for g in gpus] == [7, 7]
    assert gpus[1]["migs"][6] == {"profile": "1g.10gb", "uuid": "MIG-15f2fb26-60f2-57cd-a670-205da2ccddf5"}


def test_healthy_full_gpu_node_passes():
    status, reasons, details = judge()
    assert (status, reasons) == ("pass", [])
    assert details["pools"] == {NODE: {"generation": 1, "resourceSliceCount": 1, "slices": 1, "stale": 0}}


def test_healthy_mig_node_passes():
    status, reasons, details = judge([slice_for("resourceslice_a100_mig.yaml")], smi=SMI_MIG)
    assert (status, reasons) == ("pass", [])
    assert details["published"]["migs"] == {"1g.5gb": 1}


def test_no_slices_fails():
    status, reasons, _details = judge([])
    assert status == "fail"
    assert reasons[0].startswith("no ResourceSlice of driver gpu.nvidia.com for node gpu-node-1")


def test_slices_of_another_node_or_driver_do_not_count():
    other = slice_for(node="gpu-node-2")
    foreign = slice_for()
    foreign["spec"]["driver"] = "gpu.example.com"
    status, reasons, _details = judge([other, foreign])
    assert status == "fail" and "no ResourceSlice" in reasons[0]


def test_incomplete_pool_fails():
    item = slice_for()
    item["spec"]["pool"]["resourceSliceCount"] = 2
    status, reasons, _details = judge([item])
    assert status == "fail"
    assert any("is incomplete: 1 of 2 ResourceSlices at generation 1" in r for r in reasons)


def test_stale_slice_fails_and_its_devices_do_not_count():
    old = slice_for()
    old["metadata"]["name"] = "old"
    new = copy.deepcopy(old)
    new["metadata"]["name"] = "new"
    new["spec"]["pool"]["generation"] = 2
    new["spec"]["devices"] = []
    status, reasons, _details = judge([old, new])
    assert any("stale ResourceSlices from an older generation (old at 1; current 2)" in r for r in reasons)
    assert any("is not published" in r for r in reasons)  # gen-1 devices are ignored


def test_one_device_short_fails():
    two = SMI_GPU + "GPU 1: NVIDIA A100-PCIE-40GB (UUID: GPU-00000000-1111-2222-3333-444444444444)\n"
    status, reasons, _details = judge(smi=two)
    assert "the slices publish 1 full GPUs, nvidia-smi shows 2 (MIG off)" in reasons
    assert "GPU GPU-00000000-1111-2222-3333-444444444444 (NVIDIA A100-PCIE-40GB) is not published in a ResourceSlice" \
        in reasons


def test_unknown_uuid_fails():
    smi = SMI_GPU.replace(GPU_UUID, "GPU-99999999-5a5f-aa66-7660-471eed407181")
    status, reasons, _details = judge(smi=smi)
    assert any("publish GPU %s (device gpu-0) that nvidia-smi does not show" % GPU_UUID in r for r in reasons)


def test_product_and_driver_mismatch_fail():
    smi = SMI_GPU.replace("A100-PCIE-40GB", "A100-SXM4-40GB")
    status, reasons, _details = judge(smi=smi, driver="580.126.21")
    assert "GPU %s is published as NVIDIA A100-PCIE-40GB, nvidia-smi says NVIDIA A100-SXM4-40GB" % GPU_UUID in reasons
    assert any("driverVersion 580.126.20, the node's driver is 580.126.21" in r for r in reasons)


def test_driver_version_leading_zeros_are_the_same_version():
    item = slice_for()
    item["spec"]["devices"][0]["attributes"]["driverVersion"]["version"] = "570.124.6"
    assert judge([item], driver="570.124.06")[0] == "pass"


def test_mig_profile_mismatch_fails():
    smi = SMI_MIG.replace("1g.5gb ", "2g.10gb")
    status, reasons, _details = judge([slice_for("resourceslice_a100_mig.yaml")], smi=smi)
    assert "MIG 1g.5gb: the slices publish 1, nvidia-smi shows 0" in reasons
    assert "MIG 2g.10gb: the slices publish 0, nvidia-smi shows 1" in reasons
    assert "MIG device %s is published as profile 1g.5gb, nvidia-smi shows 2g.10gb" % MIG_UUID in reasons


def test_mig_enabled_gpu_published_as_full_gpu_fails():
    status, reasons, _details = judge([slice_for()], smi=SMI_MIG)
    assert any("that nvidia-smi does not show as a MIG-enabled GPU" in r for r in reasons)
    assert any("MIG device %s (1g.5gb on %s) is not published" % (MIG_UUID, GPU_UUID) in r for r in reasons)


def test_stranded_mig_gpu_is_named():
    status, reasons, _details = judge([], smi=SMI_GPU, mig_enabled={GPU_UUID: True})
    assert any("has MIG enabled and no MIG device" in r for r in reasons)


def test_double_exposure_fails():
    node = {"metadata": {"name": NODE}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}}
    status, reasons, details = judge(node=node)
    assert status == "fail"
    assert reasons == [r for r in reasons if r.startswith("double exposure: the node's allocatable offers "
                                                          "nvidia.com/gpu: 1 from the device plugin")]
    assert details["device_plugin_allocatable"] == {"nvidia.com/gpu": "1"}


def test_mig_double_exposure_fails():
    node = {"metadata": {"name": NODE}, "status": {"allocatable": {"nvidia.com/mig-1g.5gb": "1"}}}
    assert any("nvidia.com/mig-1g.5gb: 1" in r for r in judge(node=node)[1])


def test_plugin_pod_not_ready_fails():
    pod = copy.deepcopy(READY_POD)
    pod["status"]["conditions"][0]["status"] = "False"
    assert judge(pods=[pod])[1] == ["the DRA kubelet-plugin pod is not Running and Ready "
                                    "(dra-driver-nvidia-gpu-kubelet-plugin-5qhc7 Running)"]
    assert judge(pods=[])[1][0].startswith("no DRA kubelet-plugin pod runs on the node")


def test_missing_device_class_fails():
    classes = [c for c in CLASSES if c["metadata"]["name"] != "mig.nvidia.com"]
    assert judge(classes=classes)[0] == "pass"  # a full-GPU node needs gpu.nvidia.com only
    status, reasons, _details = judge([slice_for("resourceslice_a100_mig.yaml")], classes=classes, smi=SMI_MIG)
    assert reasons == ["DeviceClass mig.nvidia.com does not exist: claims cannot ask for the node's devices. Fix: "
                       "install the DRA driver's chart with resources.gpus.enabled=true"]


def test_dynamic_mig_devices_are_not_judged_silently():
    item = slice_for("resourceslice_a100_mig.yaml")
    del item["spec"]["devices"][0]["attributes"]["uuid"]
    reasons = judge([item], smi=SMI_MIG)[1]
    assert any("DynamicMIG partitions" in r for r in reasons)


def test_resolve_mode():
    assert dra.resolve_mode("auto", [slice_for()], NODE) == "dra"
    assert dra.resolve_mode("auto", [], NODE) == "device_plugin"
    with pytest.raises(dra.DraError):
        dra.resolve_mode("both", [], NODE)


# --- the filter ------------------------------------------------------------------------------------------------
DP_GATE = {"status": "fail", "reasons": ["allocatable nvidia.com/gpu is 0, expected 1"], "details": {}}
INPUTS = {"slices": [slice_for()], "device_classes": CLASSES, "plugin_pods": [READY_POD], "nvidia_smi_list": SMI_GPU,
          "driver_version": DRIVER}


def test_filter_device_plugin_mode_keeps_the_device_plugin_result():
    result = dra_kubernetes_gate(DP_GATE, "device_plugin", NODE_OBJ, INPUTS)
    assert result["reasons"] == DP_GATE["reasons"] and result["details"]["allocation_mode"] == "device_plugin"


def test_filter_dra_and_auto():
    assert dra_kubernetes_gate(DP_GATE, "dra", NODE_OBJ, INPUTS)["status"] == "pass"
    auto = dra_kubernetes_gate(DP_GATE, "auto", NODE_OBJ, INPUTS)
    assert auto["status"] == "pass" and auto["details"]["allocation_mode"] == "dra"
    none = dict(INPUTS, slices=[])
    assert dra_kubernetes_gate(DP_GATE, "auto", NODE_OBJ, none)["reasons"] == DP_GATE["reasons"]


def test_filter_read_error():
    err = {"read_error": "Failed to find exact match for resource.k8s.io/v1.ResourceSlice"}
    assert dra_kubernetes_gate(DP_GATE, "auto", NODE_OBJ, err)["reasons"] == DP_GATE["reasons"]
    result = dra_kubernetes_gate(DP_GATE, "dra", NODE_OBJ, err)
    assert result["status"] == "fail" and "resource.k8s.io/v1" in result["reasons"][0]


@pytest.mark.parametrize("mode, inputs", [
    ("both", INPUTS), ("dra", {"slices": "x"}), ("dra", {"unknown": 1}), ("dra", {"nvidia_smi_list": 5}),
    ("dra", dict(INPUTS, required_classes="gpu.nvidia.com")),
])
def test_filter_refuses_bad_input(mode, inputs):
    with pytest.raises(AnsibleFilterError):
        dra_kubernetes_gate(DP_GATE, mode, NODE_OBJ, inputs)


def test_filter_nvidia_smi_error_fails_the_gate():
    result = dra_kubernetes_gate(DP_GATE, "dra", NODE_OBJ, dict(INPUTS, nvidia_smi_error="NVIDIA-SMI has failed"))
    assert result["status"] == "fail" and result["reasons"][0].startswith("nvidia-smi -L failed on the node")


# --- the dra compliance check -----------------------------------------------------------------------------------
from ansible_collections.gpu_native.fleet.plugins.filter.dra import dra_compliance  # noqa: E402

SMI_OK = {"rc": 0, "stdout": SMI_GPU}
NODE_RESULT = {"resources": [NODE_OBJ]}


def test_compliance_pass_and_fail():
    row = dra_compliance({"resources": [slice_for()], "api_found": True}, "dra", NODE_RESULT, SMI_OK)
    assert (row["check"], row["status"]) == ("dra", "pass") and "1 GPU(s)" in row["actual"]
    exposed = {"resources": [{"metadata": {"name": NODE}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}}]}
    row = dra_compliance({"resources": [slice_for()]}, "dra", exposed, SMI_OK)
    assert row["status"] == "fail" and row["actual"].startswith("double exposure")
    row = dra_compliance({"resources": []}, "dra", NODE_RESULT, SMI_OK)
    assert row["status"] == "fail" and "no ResourceSlice" in row["actual"]
    incomplete = slice_for()
    incomplete["spec"]["pool"]["resourceSliceCount"] = 3
    assert "incomplete" in dra_compliance({"resources": [incomplete]}, "dra", NODE_RESULT, SMI_OK)["actual"]


def test_compliance_auto_without_slices_is_a_skip_and_errors_are_errors():
    assert dra_compliance({"resources": []}, "auto", NODE_RESULT, SMI_OK)["status"] == "skip"
    assert dra_compliance({"failed": True, "msg": "403"}, "dra", NODE_RESULT, SMI_OK)["status"] == "error"
    assert dra_compliance({"resources": [], "api_found": False}, "dra", NODE_RESULT, SMI_OK)["status"] == "error"
    assert dra_compliance({"resources": [slice_for()]}, "dra", NODE_RESULT, {"rc": 9})["status"] == "error"


def test_compliance_rows_carry_the_dra_row_and_a_dra_node_has_no_device_plugin_failure():
    from ansible_collections.gpu_native.fleet.plugins.filter.compliance_report import compliance_rows
    dra_row = dra_compliance({"resources": [slice_for()]}, "dra", NODE_RESULT, SMI_OK)
    no_gpu_node = {"resources": [{"metadata": {"name": NODE}, "status": {"allocatable": {"cpu": "8"}}}]}
    hostvars = {"h": {"__compliance_node_result": {"checks": []}, "__compliance_k8s_node": no_gpu_node,
                      "__compliance_dra": dra_row}}
    rows = dict((row["check"], row) for row in compliance_rows(hostvars, ["h"]))
    assert rows["dra"]["status"] == "pass"
    assert rows["kubernetes"]["status"] == "pass" and "published through DRA" in rows["kubernetes"]["actual"]
    del hostvars["h"]["__compliance_dra"]
    rows = dict((row["check"], row) for row in compliance_rows(hostvars, ["h"]))
    assert "dra" not in rows and rows["kubernetes"]["status"] == "fail"


# -- advertised_resources (filter dra_advertised_resources): what the mig role waits for on a DRA node ----------

def test_advertised_resources_counts_full_gpus_and_mig_devices_in_the_device_plugins_names():
    from ansible_collections.gpu_native.fleet.plugins.filter.dra import dra_advertised_resources
    assert dra.advertised_resources([slice_for()], NODE) == {"nvidia.com/gpu": "1"}
    assert dra.advertised_resources([slice_for("resourceslice_a100_mig.yaml")], NODE) == {"nvidia.com/mig-1g.5gb": "1"}
    both = [slice_for(), slice_for("resourceslice_a100_mig.yaml", node="other")]
    assert dra_advertised_resources(both, NODE) == {"nvidia.com/gpu": "1"}


def test_advertised_resources_is_none_while_the_driver_is_still_publishing():
    assert dra.advertised_resources([], NODE) is None
    assert dra.advertised_resources([slice_for(node="other")], NODE) is None
    incomplete = slice_for()
    incomplete["spec"]["pool"]["resourceSliceCount"] = 2
    assert dra.advertised_resources([incomplete], NODE) is None
    old, new = slice_for(), slice_for("resourceslice_a100_mig.yaml")
    new["metadata"]["name"] = "new"
    new["spec"]["pool"]["generation"] = 2
    assert dra.advertised_resources([old, new], NODE) is None  # the old generation's slice is still there
    assert dra.advertised_resources([new], NODE) == {"nvidia.com/mig-1g.5gb": "1"}


@pytest.mark.parametrize("bad", ["x", {"items": []}, [None], [1, {}]])
def test_advertised_resources_filter_refuses_what_is_not_a_list_of_slices(bad):
    from ansible_collections.gpu_native.fleet.plugins.filter.dra import dra_advertised_resources
    with pytest.raises(AnsibleFilterError, match="dra_advertised_resources: the input must be a list of ResourceSlices"):
        dra_advertised_resources(bad, NODE)
