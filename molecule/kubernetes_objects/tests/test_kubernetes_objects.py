"""Verify gpu_native.fleet.runtime_class: the node supplies the facts, the API holds the result."""
testinfra_hosts = ["podman://gn-kubernetes_objects-node1"]

import json  # noqa: E402
import os  # noqa: E402

import pytest  # noqa: E402
from kubernetes import client, config  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
KUBE_DIR = os.path.join(REPO, ".cache", "kube", "kubernetes_objects")
# Taints the control plane itself sets on a node no kubelet reports for (node lifecycle controller, admission).
CONTROL_PLANE_TAINTS = "node.kubernetes.io/"
# Labels the control plane itself sets: the node lifecycle controller copies kubernetes.io/os (and arch) to the
# deprecated beta.kubernetes.io/ keys.
CONTROL_PLANE_LABELS = "beta.kubernetes.io/"


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
        "kubernetes.io/hostname": "gpu-node-1",
        "kubernetes.io/os": "linux",
        "team": "ml-platform",
        "accelerator": "nvidia-gpu",
        "gpu.nvidia.com/model": "NVIDIA-H100-80GB-HBM3",
        "gpu.nvidia.com/memory": "80Gi",
    }


def test_gpu_taint_and_foreign_taint_kept(api):
    taints = client.CoreV1Api(api).read_node("gpu-node-1").spec.taints
    assert [(t.key, t.value, t.effect) for t in taints if not t.key.startswith(CONTROL_PLANE_TAINTS)] == [
        ("dedicated", "ml", "NoSchedule"),
        ("nvidia.com/gpu", "present", "NoSchedule"),
    ]


def test_other_nodes_untouched(api):
    node = client.CoreV1Api(api).read_node("cpu-node-1")
    assert own_labels(node) == {"kubernetes.io/hostname": "cpu-node-1"}
    assert not [t for t in node.spec.taints or [] if not t.key.startswith(CONTROL_PLANE_TAINTS)]


def test_check_mode_after_converge_changed_nothing():
    with open(os.path.join(KUBE_DIR, "check-mode-recap.json")) as handle:
        recap = json.load(handle)
    assert len(recap) == 1 and "gn-kubernetes_objects-node1" in recap[0]
    assert " changed=0 " in recap[0] and " failed=0 " in recap[0]
