"""Verify gpu_native.fleet.runtime_class on a real node: the node supplies the facts, the API holds the result, and a
pod asking for the RuntimeClass is placed by it and run by the node's kubelet through containerd's nvidia handler."""
testinfra_hosts = ["podman://gn-kubernetes_objects-node1"]

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

import pytest  # noqa: E402
from kubernetes import client, config  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
KUBE_DIR = os.path.join(REPO, ".cache", "kube", "kubernetes_objects")
# Taints the control plane itself sets on a node no kubelet reports for (node lifecycle controller, admission).
CONTROL_PLANE_TAINTS = "node.kubernetes.io/"
# Labels the control plane itself sets: the node lifecycle controller copies kubernetes.io/os (and arch) to the
# deprecated beta.kubernetes.io/ keys.
CONTROL_PLANE_LABELS = "beta.kubernetes.io/"
# What the kubelet registers the node with (molecule/shared/real_kubelet.yml): NodeRestriction lets it set these.
KUBELET_LABELS = {"kubernetes.io/hostname": "gpu-node-1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
REGISTRATION_TAINT = ("gpu-native.io/unvalidated", None, "NoSchedule")
STANDIN_RUNTIME_LOG = "/var/log/nvidia-container-runtime-standin.log"  # one line per call of the handler's runtime
PAUSE_IMAGE = "localhost/gpu-native/pause:3.10.1"  # imported in prepare (tests/tools/pause-image.sh): no registry


def own_labels(node):
    return {key: value for key, value in (node.metadata.labels or {}).items()
            if not key.startswith(CONTROL_PLANE_LABELS)}


@pytest.fixture(scope="module")
def api():
    configuration = client.Configuration()
    config.load_kube_config(config_file=os.path.join(KUBE_DIR, "admin.kubeconfig"), client_configuration=configuration)
    return client.ApiClient(configuration)


def test_the_node_reports_the_gpus_the_labels_come_from(host):
    listing = host.check_output("nvidia-smi -L")
    assert listing.count("NVIDIA H100 80GB HBM3") == 8


def test_runtimeclass_nvidia(api):
    rc = client.NodeV1Api(api).read_runtime_class("nvidia")
    assert rc.handler == "nvidia"
    assert rc.scheduling.node_selector == {"accelerator": "nvidia-gpu"}
    assert [(t.key, t.operator, t.effect) for t in rc.scheduling.tolerations] == \
        [("nvidia.com/gpu", "Exists", "NoSchedule")]
    assert rc.overhead.pod_fixed == {"cpu": "250m", "memory": "120Mi"}
    assert rc.metadata.labels == {"app.kubernetes.io/managed-by": "gpu_native.fleet"}


def test_foreign_runtimeclass_untouched(api):
    kata = client.NodeV1Api(api).read_runtime_class("kata")
    assert kata.handler == "kata" and not kata.metadata.labels and not kata.metadata.annotations


def test_gpu_node_labels_and_foreign_labels_kept(api):
    labels = own_labels(client.CoreV1Api(api).read_node("gpu-node-1"))
    assert labels == {
        **KUBELET_LABELS,
        "team": "ml-platform",
        "accelerator": "nvidia-gpu",
        "gpu.nvidia.com/model": "NVIDIA-H100-80GB-HBM3",
        "gpu.nvidia.com/memory": "80Gi",
    }


def test_gpu_taint_and_foreign_taint_kept(api):
    taints = client.CoreV1Api(api).read_node("gpu-node-1").spec.taints
    assert [(t.key, t.value, t.effect) for t in taints if not t.key.startswith(CONTROL_PLANE_TAINTS)] == [
        ("dedicated", "ml", "NoSchedule"),
        REGISTRATION_TAINT,  # the preflight lifts it, not this role
        ("nvidia.com/gpu", "present", "NoSchedule"),
    ]


def test_the_node_is_a_real_kubelet_that_joined_as_itself(api):
    node = client.CoreV1Api(api).read_node("gpu-node-1")
    assert node.status.node_info.kubelet_version == "v1.35.4"
    assert node.status.node_info.container_runtime_version.startswith("containerd://2.")
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True" and ready[0].reason == "KubeletReady"
    # the kubelet's own lease, renewed by its credentials (system:node:gpu-node-1), not by a stand-in
    lease = client.CoordinationV1Api(api).read_namespaced_lease("gpu-node-1", "kube-node-lease")
    assert lease.spec.holder_identity == "gpu-node-1"


def _wait(probe, what, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise AssertionError("timed out after %d s waiting for %s" % (timeout, what))


def test_a_pod_with_the_runtime_class_runs_through_the_nvidia_handler(api, host):
    core = client.CoreV1Api(api)
    name = "runtime-class-" + uuid.uuid4().hex[:8]
    tolerations = [client.V1Toleration(key="dedicated", operator="Exists", effect="NoSchedule"),
                   client.V1Toleration(key=REGISTRATION_TAINT[0], operator="Exists", effect="NoSchedule")]
    # No nodeName, no nodeSelector: the RuntimeClass's scheduling (accelerator=nvidia-gpu, the nvidia.com/gpu
    # toleration) is what places it, on the one node the role labelled.
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=client.V1PodSpec(
        runtime_class_name="nvidia", tolerations=tolerations, termination_grace_period_seconds=5,
        containers=[client.V1Container(name="workload", image=PAUSE_IMAGE, image_pull_policy="Never")]))
    core.create_namespaced_pod("default", pod)
    try:
        def running_pod():
            seen = core.read_namespaced_pod(name, "default")
            return seen if seen.status.phase == "Running" else None
        running = _wait(running_pod, "pod %s to run" % name)
        assert running.spec.node_name == "gpu-node-1"
        assert running.spec.overhead == {"cpu": "250m", "memory": "120Mi"}  # the RuntimeClass's, added at admission
        assert running.status.pod_ip.startswith("10.244.0.")  # the bridge CNI's range
        container_id = running.status.container_statuses[0].container_id
        assert container_id.startswith("containerd://")
        # the kubelet ran it through the nvidia handler: its runtime (the toolkit's stand-in) created the container
        calls = host.file(STANDIN_RUNTIME_LOG).content_string.splitlines()
        assert [line for line in calls if container_id.split("//", 1)[1] in line and "'create'" in line]
    finally:
        core.delete_namespaced_pod(name, "default")
    # a real kubelet stops the container and finalizes the deletion
    _wait(lambda: not [p for p in core.list_namespaced_pod("default").items if p.metadata.name == name],
          "pod %s to be gone" % name)


def test_other_nodes_untouched(api):
    node = client.CoreV1Api(api).read_node("cpu-node-1")
    assert own_labels(node) == {"kubernetes.io/hostname": "cpu-node-1"}
    assert not [t for t in node.spec.taints or [] if not t.key.startswith(CONTROL_PLANE_TAINTS)]


def test_check_mode_after_converge_changed_nothing():
    with open(os.path.join(KUBE_DIR, "check-mode-recap.json")) as handle:
        recap = json.load(handle)
    assert len(recap) == 1 and "gn-kubernetes_objects-node1" in recap[0]
    assert " changed=0 " in recap[0] and " failed=0 " in recap[0]
