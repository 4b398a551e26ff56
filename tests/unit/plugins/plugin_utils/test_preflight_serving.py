"""The serving gate's pod: preflight.serving_pod_problem (why it is not Ready, in one line, from what the kubelet
reports), and plugin_utils/preflight_serving.py (its name, a DNS label unique per node; the node's free GPUs)."""
import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter import preflight_serving as serving_filters
from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import dns_label_problem
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight_serving as ps


def pod(status, node="gpu-1"):
    spec = {"containers": [{"name": "server", "image": "vllm:1"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "gpu-native-preflight-gpu-1", "namespace": "default"}, "spec": spec,
            "status": status}


UNREADY = [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
            "message": "containers with unready status: [server]"}]


@pytest.mark.parametrize("status,expected", [
    ({"phase": "Pending", "conditions": UNREADY, "containerStatuses": [
        {"name": "server", "ready": False,
         "state": {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "vllm:1"'}}}]},
     'phase Pending; container server waiting: ImagePullBackOff (Back-off pulling image "vllm:1")'),
    ({"phase": "Pending", "conditions": UNREADY, "containerStatuses": [
        {"name": "server", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]},
     "phase Pending; container server waiting: ContainerCreating"),
    ({"phase": "Failed", "containerStatuses": [
        {"name": "server", "state": {"terminated": {"reason": "Error", "exitCode": 1}}}]},
     "phase Failed; container server terminated: Error exit code 1"),
    ({"phase": "Running", "conditions": UNREADY, "containerStatuses": [
        {"name": "server", "ready": False, "state": {"running": {}}}]},
     "phase Running; Ready: containers with unready status: [server]"),
    ({"phase": "Pending"}, "phase Pending; no kubelet reported on it (is the node's kubelet running?)"),
])
def test_the_reason_names_the_phase_and_the_waiting_container(status, expected):
    assert preflight.serving_pod_problem(pod(status), 900) == \
        "serving pod gpu-native-preflight-gpu-1 did not become Ready within 900 s: " + expected


def test_an_unbound_pod_says_so():
    assert preflight.serving_pod_problem(pod({"phase": "Pending"}, node=None)).endswith(
        "did not become Ready: phase Pending; not bound to a node")


@pytest.mark.parametrize("value", [{}, None, "text", {"status": {}}])
def test_no_pod_means_it_was_not_created(value):
    assert preflight.serving_pod_problem(value) == "the serving pod was not created"


def test_the_reason_is_bounded():
    status = {"phase": "Pending", "containerStatuses": [
        {"name": "server", "state": {"waiting": {"reason": "ErrImagePull", "message": "x" * 5000}}}]}
    assert len(preflight.serving_pod_problem(pod(status))) <= preflight.MAX_REASON_CHARS


# ---- the serving pod's name ------------------------------------------------------------------------------------
LONG_A = "gpu-h100-sxm5-80gb-rack-17-row-c-datacenter-eu-west-1-node-0001.cluster.internal"
LONG_B = "gpu-h100-sxm5-80gb-rack-17-row-c-datacenter-eu-west-1-node-0002.cluster.internal"


def test_two_long_node_names_with_a_shared_prefix_get_different_valid_names():
    # the old name, the node name truncated to 30 characters, was the same for both: one node's cleanup
    # deleted the other's pod
    a, b = ps.serving_pod_identity(LONG_A), ps.serving_pod_identity(LONG_B)
    assert LONG_A[:30] == LONG_B[:30]
    assert a["name"] != b["name"] and a["node_hash"] != b["node_hash"]
    for identity in (a, b):
        assert dns_label_problem(identity["name"]) is None and len(identity["name"]) <= 63
        assert identity["name"].startswith("gpu-native-preflight-gpu-h100-sxm5")
        assert identity["name"].endswith("-" + identity["node_hash"])
        assert re.match(r"^[0-9a-f]{10}$", identity["node_hash"])


@pytest.mark.parametrize("node", [
    "gpu-node-1234567890-",                       # trailing '-' (the old name kept it: an invalid name)
    "gpu-node-123456789-x" + "-" * 40,           # a cut that lands on '-'
    "a" * 25 + "-" * 20 + "b",
    "GPU_Node.Example.COM",                       # upper case, '_' and '.'
    "ip-10-0-1-2.eu-west-1.compute.internal",
    "-",
    "x" * 253,
])
def test_the_name_is_a_dns_label_whatever_the_node_name(node):
    identity = ps.serving_pod_identity(node)
    assert dns_label_problem(identity["name"]) is None, identity
    assert not identity["name"].endswith("-") and "--" not in identity["name"].replace(ps.DEFAULT_PREFIX, "")


def test_the_name_is_stable_and_readable():
    identity = ps.serving_pod_identity("gpu-h100-01")
    assert identity == ps.serving_pod_identity("gpu-h100-01")
    assert identity["name"] == "gpu-native-preflight-gpu-h100-01-" + identity["node_hash"]
    assert identity["node_hash"] == "%s" % __import__("hashlib").sha256(b"gpu-h100-01").hexdigest()[:10]
    assert ps.serving_pod_identity("gpu-h100-01", "pf")["name"] == "pf-gpu-h100-01-" + identity["node_hash"]


@pytest.mark.parametrize("node, prefix, message", [
    ("", ps.DEFAULT_PREFIX, "not a non-empty string. Fix: set preflight_node_name"),
    (None, ps.DEFAULT_PREFIX, "not a non-empty string"),
    ("x" * 254, ps.DEFAULT_PREFIX, "254 characters long"),
    ("gpu-1", "Bad_Prefix", "must be a lowercase DNS label of at most 43 characters"),
    ("gpu-1", "p" * 44, "at most 43 characters"),
    ("gpu-1", "", "Fix: set preflight_serving_pod_prefix"),
])
def test_bad_inputs_are_refused_with_the_fix(node, prefix, message):
    with pytest.raises(ps.ServingPodError, match=re.escape(message)):
        ps.serving_pod_identity(node, prefix)
    with pytest.raises(AnsibleFilterError, match="^preflight_serving_pod: "):
        serving_filters.preflight_serving_pod(node, prefix)


# ---- free GPUs on the node -------------------------------------------------------------------------------------
def gpu_node(allocatable="8"):
    return {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": allocatable}}}


def tenant(name, gpus=None, phase="Running", init=None, limits_only=False, labels=None):
    container = {"name": "c", "resources": {}}
    if gpus is not None:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
        if not limits_only:
            container["resources"]["requests"] = {"nvidia.com/gpu": str(gpus)}
    spec = {"nodeName": "gpu-1", "containers": [container]}
    if init is not None:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": str(init)}}}]
    return {"metadata": {"name": name, "namespace": "team-a", "labels": labels or {}}, "spec": spec,
            "status": {"phase": phase}}


def test_a_fully_allocated_node_is_busy_naming_the_holders():
    result = ps.free_gpus(gpu_node(), [tenant("train-0", 4), tenant("train-1", 4), tenant("web", None)],
                          "nvidia.com/gpu")
    assert result["status"] == "busy" and result["free"] == 0 and result["used"] == 8
    assert result["reason"] == ("no nvidia.com/gpu free on the node: 8 allocatable, 8 requested by team-a/train-0 (4), "
                                "team-a/train-1 (4); the serving pod needs 1 and is not started next to tenant "
                                "workloads")


def test_terminated_pods_and_a_left_serving_pod_hold_nothing():
    left = tenant("gpu-native-preflight-gpu-1-abc", 1,
                  labels={"app.kubernetes.io/name": "gpu-native-preflight", "gpu-native.io/preflight-node-hash": "abc"})
    pods = [tenant("done", 4, phase="Succeeded"), tenant("crashed", 2, phase="Failed"), tenant("train", 7), left]
    result = ps.free_gpus(gpu_node(), pods, "nvidia.com/gpu",
                          {"app.kubernetes.io/name": "gpu-native-preflight", "gpu-native.io/preflight-node-hash": "abc"})
    assert (result["status"], result["free"], result["used"], result["reason"]) == ("free", 1, 7, None)
    assert ps.free_gpus(gpu_node(), pods, "nvidia.com/gpu")["status"] == "busy"   # counted without ignore_labels


def test_the_effective_request_is_the_larger_of_containers_and_init():
    assert ps.pod_request(tenant("p", 1, init=3), "nvidia.com/gpu") == 3
    assert ps.pod_request(tenant("p", 2, init=1), "nvidia.com/gpu") == 2
    assert ps.pod_request(tenant("p", 2, limits_only=True), "nvidia.com/gpu") == 2
    assert ps.pod_request(tenant("p", "lots"), "nvidia.com/gpu") == 1   # unreadable: it still holds one


@pytest.mark.parametrize("allocatable", [None, "0", "eight"])
def test_a_node_without_the_resource_is_absent(allocatable):
    node = gpu_node(allocatable)
    if allocatable is None:
        del node["status"]["allocatable"]["nvidia.com/gpu"]
    result = ps.free_gpus(node, [], "nvidia.com/gpu")
    assert result["status"] == "absent" and "advertises no allocatable nvidia.com/gpu" in result["reason"]


def test_hostile_inputs_give_a_result_or_the_error():
    assert ps.free_gpus(None, None, "nvidia.com/gpu")["status"] == "absent"
    assert ps.free_gpus(gpu_node(), [None, 5, {"spec": []}, {"status": "x"}], "nvidia.com/gpu")["status"] == "free"
    with pytest.raises(AnsibleFilterError, match="Fix: set preflight_serving_gpu_resource"):
        serving_filters.preflight_free_gpus(gpu_node(), [], "")
