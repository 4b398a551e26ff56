"""The serving gate under DRA (plugins/plugin_utils/preflight_serving.py): the node's free devices from its
ResourceSlices and the cluster's ResourceClaims, the pod's ResourceClaimTemplate (resource.k8s.io/v1) and the pod's
DRA form. The slices are the driver's, as tests/fixtures/dra has them."""
import copy
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter import preflight_serving as serving_filters
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight_serving as ps

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "dra")
NODE = "ipp1-0033"
GPU0 = "GPU-2fa81118-5a5f-aa66-7660-471eed407181"
GPU1 = "GPU-00000000-1111-2222-3333-444444444444"
LABELS = {"app.kubernetes.io/name": "gpu-native-preflight", "gpu-native.io/preflight-node-hash": "0123456789"}


def slices(gpus=2, node=NODE, generation=1):
    with open(os.path.join(FIXTURES, "resourceslice_a100_gpu.yaml"), encoding="utf-8") as handle:
        item = yaml.safe_load(handle)
    item["spec"]["nodeName"] = node
    item["spec"]["pool"].update(name=node, generation=generation)
    first = item["spec"]["devices"][0]
    devices = [first]
    if gpus > 1:
        second = copy.deepcopy(first)
        second["name"] = "gpu-1"
        second["attributes"]["uuid"] = {"string": GPU1}
        devices.append(second)
    item["spec"]["devices"] = devices[:gpus]
    return [item]


def claim(device, pool=NODE, name="train", namespace="team-a", labels=None, driver="gpu.nvidia.com"):
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": driver, "pool": pool, "device": device}]}}}}


def test_every_device_free_when_no_claim_holds_one():
    result = ps.dra_free_devices(NODE, slices(), [])
    assert result == {"status": "free", "devices": sorted([GPU0, GPU1]), "free": sorted([GPU0, GPU1]),
                      "allocated": [], "holders": [], "reason": None}


def test_a_claimed_device_is_not_free():
    result = ps.dra_free_devices(NODE, slices(), [claim("gpu-0")])
    assert (result["status"], result["free"], result["allocated"], result["holders"]) == (
        "free", [GPU1], [GPU0], ["team-a/train"])


def test_all_devices_claimed_is_busy_never_a_failure():
    result = ps.dra_free_devices(NODE, slices(), [claim("gpu-0"), claim("gpu-1", name="infer")])
    assert result["status"] == "busy" and result["free"] == []
    assert "all 2 are allocated to ResourceClaims (team-a/infer, team-a/train)" in result["reason"]


@pytest.mark.parametrize("other", [claim("gpu-1", pool="another-node"), claim("gpu-1", driver="gpu.example.com"),
                                   claim("gpu-1", labels=LABELS), {"status": {}}, None, "x"])
def test_claims_of_other_pools_drivers_our_own_or_unallocated_do_not_count(other):
    result = ps.dra_free_devices(NODE, slices(), [claim("gpu-0"), other], ignore_labels=LABELS)
    assert result["free"] == [GPU1], result


@pytest.mark.parametrize("unread_slices, unread_claims", [(None, []), ([], None), ("x", [])])
def test_unreadable_slices_or_claims_skip_with_a_reason(unread_slices, unread_claims):
    result = ps.dra_free_devices(NODE, unread_slices, unread_claims)
    assert result["status"] == "unknown" and "could not be read" in result["reason"]


def test_no_device_published_is_absent():
    assert ps.dra_free_devices(NODE, [], [])["status"] == "absent"
    assert ps.dra_free_devices("another-node", slices(), [])["status"] == "absent"
    # the gpu class never takes a MIG device
    assert ps.dra_free_devices(NODE, slices(), [], device_class="mig.nvidia.com")["status"] == "absent"


def test_only_the_current_generation_counts():
    stale = slices(gpus=2, generation=1)
    current = slices(gpus=1, generation=2)
    current[0]["metadata"]["name"] += "-g2"
    assert ps.dra_free_devices(NODE, stale + current, [])["devices"] == [GPU0]


def test_an_unsupported_device_class_is_refused():
    with pytest.raises(AnsibleFilterError, match="Fix: set preflight_serving_dra_device_class"):
        serving_filters.preflight_dra_free_devices(NODE, slices(), [], "vfio.gpu.nvidia.com")


def test_the_claim_template_asks_exactly_one_device_among_the_free_ones():
    template = ps.dra_claim_template("gpu-native-preflight-n-0123456789", "gnp", LABELS, "gpu.nvidia.com",
                                     [GPU1, GPU0])
    assert template == {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-native-preflight-n-0123456789", "namespace": "gnp", "labels": LABELS},
        "spec": {"metadata": {"labels": LABELS}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1,
            "selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].uuid in ["%s", "%s"]'
                                   % (GPU1, GPU0)}}]}}]}}}}


@pytest.mark.parametrize("uuids", [[], ['GPU-1"] || true || ["'], "GPU-1", [1], ["GPU-1"] * 600])
def test_nothing_but_device_uuids_goes_into_the_selector(uuids):
    with pytest.raises(AnsibleFilterError, match="preflight_dra_claim_template: the devices to claim"):
        serving_filters.preflight_dra_claim_template("name", "gnp", LABELS, "gpu.nvidia.com", uuids)


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
    "nodeName": NODE, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    "containers": [{"name": "server", "resources": {
        "requests": {"cpu": "2", "nvidia.com/gpu": 1}, "limits": {"cpu": "8", "nvidia.com/gpu": 1}}}]}}


def test_the_dra_pod_is_scheduled_onto_the_node_and_claims_through_the_template():
    pod = ps.dra_serving_pod(POD, NODE, "p")
    spec = pod["spec"]
    assert "nodeName" not in spec and POD["spec"]["nodeName"] == NODE, "the input is not changed"
    assert spec["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"},
                                   {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                    "effect": "NoSchedule"}]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "p"}]
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "2"}, "limits": {"cpu": "8"},
                                                  "claims": [{"name": "gpu"}]}


@pytest.mark.parametrize("pod, template", [({}, "p"), ({"spec": {"containers": []}}, "p"), (POD, "Not_A_Label")])
def test_a_pod_or_template_the_builder_cannot_use_is_refused(pod, template):
    with pytest.raises(AnsibleFilterError, match="preflight_dra_serving_pod: .*report this as a bug"):
        serving_filters.preflight_dra_serving_pod(pod, NODE, template)
