# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubernetes gate's GFD labels follow the same counting rule as the allocatable (issue 28, item 1).

Expected values are NVIDIA's own: k8s-device-plugin v0.20.0 internal/lm/resource_test.go (TestSanitise, the
time-slicing/MPS cases), docs/gpu-feature-discovery/README.md (migStrategy single: 8 A100-SXM4-40GB in 7x 1g.5gb
give gpu.count 56 and gpu.product A100-SXM4-40GB-MIG-1g.5gb), and the labels a real 8x H100 node carries
(NVIDIA/k8s-device-plugin#1501: nvidia.com/gpu.count=8, nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,
nvidia.com/gpu.replicas=1).
"""
import pytest

from ansible_collections.gpu_native.fleet.plugins.filter.preflight import preflight_kubernetes_gate
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.preflight import FAIL, PASS

READY_POD = {"metadata": {"name": "nvidia-device-plugin-x"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def _node(labels, allocatable):
    return {"metadata": {"name": "gpu-1", "labels": labels}, "status": {"allocatable": allocatable}}


def _gate(labels, allocatable, product, gpus, device_plugin, mig_state=None):
    facts = {"gpu_product": product, "gpu_count": len(gpus), "mig_capable": None, "driver_version": None}
    return preflight_kubernetes_gate(_node(labels, allocatable), [READY_POD], {}, facts, counting={
        "gpus": gpus, "gpu_count": len(gpus), "device_plugin": device_plugin, "mig_state": mig_state})


def _mig_state(gpus, per_gpu, profile, profile_id, size):
    """mig_config's compare result: ``per_gpu`` GPU instances of ``profile`` on each GPU, one full compute instance."""
    return {"actual": dict((str(index), {"mig_mode": "Enabled", "instances": [
        {"profile": profile, "profile_id": profile_id, "gpu_instance_id": 7 + n, "start": n * size, "size": size,
         "compute_instances": [{"instance_id": 0, "profile_id": 0}]} for n in range(per_gpu)]})
        for index in range(gpus))}


@pytest.mark.parametrize("raw, sanitised", [
    # internal/lm/resource_test.go TestSanitise, v0.20.0, verbatim
    ("a space separated string", "a-space-separated-string"),
    ("some(thing)else", "somethingelse"),
    ("some ( thing )else", "some-thing-else"),
    ("NVIDIA-TITAN-X-(Pascal)", "NVIDIA-TITAN-X-Pascal"),
    (" input  with multiple   spaces   ", "input-with-multiple-spaces"),
    ("some [ / thing / ]else", "some-thing-else"),
    ("some / thing /else", "some-thing-else"),
    ("some-thing.else_new", "some-thing.else_new"),
])
def test_gfd_sanitiser_is_gfds(raw, sanitised):
    assert preflight.gfd_sanitise(raw) == sanitised


def test_a_product_name_with_parentheses_is_compared_sanitised():
    gpus = [{"index": 0, "mig_enabled": False, "mig_devices": 0}]
    gate = _gate({"nvidia.com/gpu.count": "1", "nvidia.com/gpu.product": "NVIDIA-TITAN-X-Pascal"},
                 {"nvidia.com/gpu": "1"}, "NVIDIA TITAN X (Pascal)", gpus, {"mig_strategy": "none"})
    assert gate["status"] == PASS, gate["reasons"]


def test_plain_h100_node_passes_with_its_real_labels():
    gpus = [{"index": i, "mig_enabled": False, "mig_devices": 0} for i in range(8)]
    labels = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
              "nvidia.com/gpu.replicas": "1"}
    gate = _gate(labels, {"nvidia.com/gpu": "8"}, "NVIDIA H100 80GB HBM3", gpus, {"mig_strategy": "none"})
    assert gate["status"] == PASS, gate["reasons"]
    # a product label with another suffix is no longer taken as a prefix match
    gate = _gate(dict(labels, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"}), {"nvidia.com/gpu": "8"},
                 "NVIDIA H100 80GB HBM3", gpus, {"mig_strategy": "none"})
    assert gate["status"] == FAIL
    assert gate["reasons"][0].startswith("label nvidia.com/gpu.product is NVIDIA-H100-80GB-HBM3-SHARED, expected "
                                         "NVIDIA-H100-80GB-HBM3 (counted from 8 GPU(s)")


def test_mig_single_node_passes_with_the_mig_count_and_product():
    # GFD README: 8 A100-SXM4-40GB, each 7x 1g.5gb -> gpu.count 56, gpu.product A100-SXM4-40GB-MIG-1g.5gb
    gpus = [{"index": i, "mig_enabled": True, "mig_devices": 7} for i in range(8)]
    labels = {"nvidia.com/gpu.count": "56", "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
              "nvidia.com/mig.strategy": "single"}
    state = _mig_state(8, 7, "1g.5gb", 19, 1)
    gate = _gate(labels, {"nvidia.com/gpu": "56"}, "A100-SXM4-40GB", gpus, {"mig_strategy": "single"}, state)
    assert gate["status"] == PASS, gate["reasons"]
    assert gate["details"]["gfd_labels"] == {"nvidia.com/gpu.count": "56",
                                             "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb"}
    # without the assigned layout the profile is unknown: the product is compared up to "-MIG-"
    gate = _gate(labels, {"nvidia.com/gpu": "56"}, "A100-SXM4-40GB", gpus, {"mig_strategy": "single"})
    assert gate["status"] == PASS, gate["reasons"]
    # the case: 4 A100s x 7 x 1g.10gb is 28, not "the node says 4"
    four = gpus[:4]
    gate = _gate({"nvidia.com/gpu.count": "28", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"},
                 {"nvidia.com/gpu": "28"}, "NVIDIA A100-SXM4-80GB", four, {"mig_strategy": "single"},
                 _mig_state(4, 7, "1g.10gb", 19, 1))
    assert gate["status"] == PASS, gate["reasons"]


def test_mig_single_with_a_mig_off_gpu_expects_gfds_invalid_labels():
    gpus = [{"index": 0, "mig_enabled": True, "mig_devices": 7}, {"index": 1, "mig_enabled": False, "mig_devices": 0}]
    labels, notes = preflight.gfd_expected_labels("A100-SXM4-40GB", gpus, {"flags": {"migStrategy": "single"}})
    assert labels["nvidia.com/gpu.product"] == ("A100-SXM4-40GB-MIG-INVALID", "exact")
    assert labels["nvidia.com/gpu.count"] == ("0", "exact")
    assert "refuses to start" in notes[0]


def test_mig_mixed_node_keeps_the_physical_count():
    gpus = [{"index": i, "mig_enabled": True, "mig_devices": 7} for i in range(8)]
    labels = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
              "nvidia.com/mig-1g.10gb.count": "56"}
    gate = _gate(labels, {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"}, "NVIDIA H100 80GB HBM3", gpus,
                 {"mig_strategy": "mixed"}, _mig_state(8, 7, "1g.10gb", 19, 1))
    assert gate["status"] == PASS, gate["reasons"]
    # a single-strategy product on a mixed node is a wrong label, not a suffix to accept
    single_like = dict(labels, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"})
    gate = _gate(single_like, {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"}, "NVIDIA H100 80GB HBM3", gpus,
                 {"mig_strategy": "mixed"}, _mig_state(8, 7, "1g.10gb", 19, 1))
    assert gate["status"] == FAIL and "nvidia.com/gpu.product" in gate["reasons"][0]


@pytest.mark.parametrize("rename, product", [(False, "NVIDIA-H100-80GB-HBM3-SHARED"), (True, "NVIDIA-H100-80GB-HBM3")])
def test_time_slicing_node_passes_with_shared_product_and_replicas(rename, product):
    # resource_test.go: "time-slicing appends suffix and doubles count" / "... renamed does not append suffix"
    gpus = [{"index": i, "mig_enabled": False, "mig_devices": 0} for i in range(8)]
    labels = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": product, "nvidia.com/gpu.replicas": "4"}
    resource = "nvidia.com/gpu.shared" if rename else "nvidia.com/gpu"
    settings = {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
                "time_slicing_rename_by_default": rename}
    gate = _gate(labels, {resource: "32"}, "NVIDIA H100 80GB HBM3", gpus, settings)
    assert gate["status"] == PASS, gate["reasons"]
    # GFD that has not picked up the sharing config still says replicas 1: the gate says so
    stale = dict(labels, **{"nvidia.com/gpu.replicas": "1"})
    gate = _gate(stale, {resource: "32"}, "NVIDIA H100 80GB HBM3", gpus, settings)
    assert gate["status"] == FAIL
    assert gate["reasons"][0].startswith("label nvidia.com/gpu.replicas is 1, expected 4")


def test_mps_sharing_labels_the_product_shared():
    # resource_test.go: "mps appends suffix and doubles count" (MPS has no collection setting: the config is given)
    gpus = [{"index": 0, "mig_enabled": False, "mig_devices": 0}]
    config = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
    labels, _notes = preflight.gfd_expected_labels("MOCKMODEL", gpus, config)
    assert labels == {"nvidia.com/gpu.product": ("MOCKMODEL-SHARED", "exact"),
                      "nvidia.com/gpu.count": ("1", "exact"), "nvidia.com/gpu.replicas": ("2", "exact")}
