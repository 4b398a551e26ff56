"""The preflight serving gate's pod against the real Kubernetes control plane (tests/kube_cluster.py), through
ansible-playbook: the pod the API stored, the namespace the role created, the cleanup of what a killed run left,
and a node whose GPUs are all held by a tenant.

There is no kubelet: the serving pod never becomes Ready, the gate fails at preflight_serving_ready_timeout and
deletes the pod. A pod bound to a node is deleted gracefully (the API sets deletionTimestamp and waits for the
kubelet), so it stays readable after the run, exactly as the role created it.
"""
import json
import re
import secrets

import pytest

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight_serving

PLAY = """
- name: Preflight, the serving gate only
  hosts: localhost
  gather_facts: false
  roles:
    - gpu_native.fleet.preflight
"""
DIGEST_IMAGE = "registry.example.com/vllm/vllm-openai@sha256:" + "0123456789abcdef" * 4
SERVING_LABELS = {"app.kubernetes.io/name": "gpu-native-preflight"}


@pytest.fixture
def serving(kube_cluster, run_playbook, tmp_path):
    """(plane, node name, serving namespace, run(extra vars)) with a Node of 8 GPUs and a RuntimeClass."""
    suffix = secrets.token_hex(3)
    # a long node name with dots: the pod name is a DNS label all the same
    node = "gpu-h100-sxm5-80gb-rack-17-row-c-datacenter-eu-west-1-%s.cluster.internal" % suffix
    runtime_class = "nvidia-" + suffix
    namespace = "gnp-" + suffix
    kube_cluster.api("POST", "/apis/node.k8s.io/v1/runtimeclasses",
                     {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime_class},
                      "handler": "nvidia"})
    kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    kube_cluster.api("PATCH", "/api/v1/nodes/%s/status" % node,
                     {"status": {"capacity": capacity, "allocatable": capacity}},
                     content_type="application/merge-patch+json")
    kubeconfig = kube_cluster.write_kubeconfig(str(tmp_path / "kubeconfig"))

    def run(extra=None):
        variables = {"preflight_node_name": node, "preflight_gates": ["serving"], "preflight_metrics_dir": "",
                     "preflight_serving_namespace": namespace, "preflight_serving_runtime_class": runtime_class,
                     "preflight_serving_ready_timeout": 3, "preflight_serving_ready_poll": 1,
                     "preflight_serving_image": DIGEST_IMAGE}
        variables.update(extra or {})
        return run_playbook(PLAY, kubeconfig_path=kubeconfig, args=["-e", json.dumps(variables)])
    yield kube_cluster, node, namespace, run
    for pod in kube_cluster.api("GET", "/api/v1/namespaces/%s/pods" % namespace, expect=(200, 404)).get("items", []):
        kube_cluster.request("DELETE", "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0"
                             % (namespace, pod["metadata"]["name"]))
    kube_cluster.delete_namespace(namespace)
    kube_cluster.request("DELETE", "/api/v1/nodes/" + node)
    kube_cluster.request("DELETE", "/apis/node.k8s.io/v1/runtimeclasses/" + runtime_class)


def serving_pods(plane, namespace):
    status, answer = plane.request("GET", "/api/v1/namespaces/%s/pods" % namespace)
    return answer["items"] if status == 200 else []


def test_the_serving_pod_is_a_good_citizen(serving):
    plane, node, namespace, run = serving
    identity = preflight_serving.serving_pod_identity(node)
    # a serving pod a killed run left (another name, not bound): found by its labels and removed
    plane.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    plane.wait_for("the default ServiceAccount", lambda: plane.request(
        "GET", "/api/v1/namespaces/%s/serviceaccounts/default" % namespace)[0] == 200)
    plane.api("POST", "/api/v1/namespaces/%s/pods" % namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "left-by-a-killed-run", "labels": dict(
            SERVING_LABELS, **{"gpu-native.io/preflight-node-hash": identity["node_hash"]})},
        # kept off every node (no scheduler binds it): without a kubelet a bound pod is never fully deleted
        "spec": {"nodeSelector": {"gpu-native.io/test": "nowhere"},
                 "containers": [{"name": "server", "image": "vllm/vllm-openai:v0.11.0"}]}})

    result = run()
    assert result.returncode == 0, result.stdout[-4000:]
    text = " ".join(result.stdout.split())
    assert "%s: FAILED (serving=fail): serving: serving pod %s did not become Ready within 3 s" % (
        node, identity["name"]) in text, result.stdout[-5000:]

    pods = serving_pods(plane, namespace)
    assert [p["metadata"]["name"] for p in pods] == [identity["name"]], pods
    pod = pods[0]
    assert pod["metadata"].get("deletionTimestamp"), "the role deleted it; the API waits for a kubelet"
    assert len(identity["name"]) <= 63 and identity["name"].endswith("-" + identity["node_hash"])
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/name": "gpu-native-preflight", "app.kubernetes.io/component": "serving-gate",
        "app.kubernetes.io/managed-by": "gpu_native.fleet", "gpu-native.io/preflight-node-hash": identity["node_hash"]}
    assert pod["metadata"]["annotations"]["gpu-native.io/preflight-node"] == node
    spec = pod["spec"]
    assert spec["nodeName"] == node and spec["automountServiceAccountToken"] is False
    assert spec["activeDeadlineSeconds"] == 3 + 120 + 300
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert [t for t in spec["tolerations"] if not t["key"].startswith("node.kubernetes.io/")] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "gpu-native.io/unvalidated", "operator": "Exists"}]
    assert not [v for v in spec.get("volumes", []) if "projected" in v], "no service-account token volume"
    container = spec["containers"][0]
    assert container["image"] == DIGEST_IMAGE
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "privileged": False,
                                            "capabilities": {"drop": ["ALL"]}}
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
                                      "limits": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "1"}}
    # an existing namespace is used as it is, never patched (rbac/onboarding.yml grants get and create only)
    existing = plane.api("GET", "/api/v1/namespaces/" + namespace)
    assert "app.kubernetes.io/managed-by" not in existing["metadata"].get("labels", {})


def test_a_missing_namespace_is_created_with_the_collections_label(serving):
    plane, node, namespace, run = serving
    assert plane.request("GET", "/api/v1/namespaces/" + namespace)[0] == 404
    result = run()
    assert result.returncode == 0, result.stdout[-4000:]
    created = plane.api("GET", "/api/v1/namespaces/" + namespace)
    assert created["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu_native.fleet"


def progress_lines(out, node):
    return re.findall(r"%s: serving pod ([A-Za-z, ]+), ([0-9]+) s of ([0-9]+) s" % re.escape(node), out)


def test_the_wait_for_the_serving_pod_prints_a_line_per_poll(serving):
    # issue 25, item 11: no kubelet here, so the pod stays Pending; a poll every second, a line per poll, then the
    # gate fails at preflight_serving_ready_timeout with the pod's own reason, as without the lines. The timeout
    # leaves room for several polls: on a loaded 2-core machine one poll (two k8s_info runs) took 8 s (CI, stop 39)
    plane, node, namespace, run = serving
    result = run({"preflight_progress_interval": 1, "preflight_serving_ready_timeout": 24})
    assert result.returncode == 0, result.stdout[-4000:]
    lines = progress_lines(" ".join(result.stdout.split()), node)
    assert len(lines) >= 2, result.stdout[-5000:]
    assert all(state == "Pending" and total == "24" for state, _elapsed, total in lines), lines
    assert [int(elapsed) for _state, elapsed, _total in lines] == sorted(int(e) for _s, e, _t in lines)
    assert int(lines[-1][1]) >= 24, lines  # the last line is the one at the timeout
    identity = preflight_serving.serving_pod_identity(node)
    assert "%s: FAILED (serving=fail): serving: serving pod %s did not become Ready within 24 s" % (
        node, identity["name"]) in " ".join(result.stdout.split()), result.stdout[-5000:]


def test_interval_zero_waits_without_a_line_per_poll(serving):
    plane, node, namespace, run = serving
    result = run({"preflight_progress_interval": 0})
    assert result.returncode == 0, result.stdout[-4000:]
    assert progress_lines(" ".join(result.stdout.split()), node) == [], result.stdout[-4000:]
    assert "did not become Ready within 3 s" in " ".join(result.stdout.split())


def test_a_node_whose_gpus_a_tenant_holds_is_skipped_and_no_pod_is_started(serving, kube_namespace):
    plane, node, namespace, run = serving
    plane.api("POST", "/api/v1/namespaces/%s/pods" % kube_namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
        "spec": {"nodeName": node, "containers": [
            {"name": "train", "image": "train:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
    # preflight_evict false: the tenant keeps its GPUs and the serving gate (an active test) is skipped, never failed
    # (with eviction, the default, the pod would be evicted first: test_preflight_batches_real_api.py)
    result = run({"preflight_evict": False})
    assert result.returncode == 0, result.stdout[-4000:]
    text = " ".join(result.stdout.split())
    assert "%s: PASSED (serving=skip)" % node in text, text[-3000:]
    assert "GPU pods running: %s/train" % kube_namespace in text, text[-3000:]
    assert serving_pods(plane, namespace) == []
    labels = plane.api("GET", "/api/v1/nodes/" + node)["metadata"]["labels"]
    assert labels.get("gpu-native.io/preflight") == "passed"


@pytest.mark.parametrize("image", ["vllm/vllm-openai@sha256:short", "Registry/UPPER:tag", "vllm openai:v1"])
def test_an_image_that_is_not_a_reference_fails_the_gate_before_any_pod(serving, image):
    plane, node, namespace, run = serving
    result = run({"preflight_serving_image": image})
    assert result.returncode == 0, result.stdout[-4000:]
    text = " ".join(result.stdout.split())
    assert "is not an image reference" in text and "%s: FAILED (serving=fail)" % node in text, text[-3000:]
    assert serving_pods(plane, namespace) == []
