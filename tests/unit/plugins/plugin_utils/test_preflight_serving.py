"""preflight.serving_pod_problem: why the serving pod is not Ready, in one line (built from what the kubelet reports)."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight


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
