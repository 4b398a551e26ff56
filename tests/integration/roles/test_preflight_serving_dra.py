"""The preflight serving gate under DRA (gpu_native_allocation: dra) against the real control plane
(tests/kube_cluster.py, v1.35.4, resource.k8s.io/v1), run as the onboarding job (rbac/onboarding.yml, with
rbac/namespaced.yml bound in the serving namespace only: a verb the shipped roles lack fails with 403).

The node publishes one A100 in a ResourceSlice as NVIDIA's DRA driver does (tests/fixtures/dra). The role creates
a ResourceClaimTemplate and a pod that claims through it; the real resourceclaim controller generates the claim, the
real scheduler allocates it to the node's device and binds the pod; KubeletStandin plays the kubelet (the pod
Running and Ready at 127.0.0.1, where the OpenAI stand-in answers; a deleted pod finalized). A watcher records what
the API stored while the gate ran; afterwards the pod, the template and the generated claim (owned by the pod,
garbage-collected with it) are gone.
"""
import json
import os
import secrets
import sys
import threading

import pytest
import yaml

from kube_cluster import KubeletStandin
from testlib import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "standins"))
import openai_standin  # noqa: E402
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight_serving  # noqa: E402

FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures", "dra")
RESOURCE = "/apis/resource.k8s.io/v1"
GPU_UUID = "GPU-2fa81118-5a5f-aa66-7660-471eed407181"
DIGEST_IMAGE = "registry.example.com/vllm/vllm-openai@sha256:" + "0123456789abcdef" * 4
PLAY = """
- name: Preflight, the serving gate only
  hosts: localhost
  gather_facts: false
  roles:
    - gpu_native.fleet.preflight
"""


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.fixture(scope="module")
def device_classes(kube_cluster):
    for name in ("deviceclass-gpu.yaml", "deviceclass-mig.yaml"):
        status, answer = kube_cluster.request("POST", RESOURCE + "/deviceclasses", yaml.safe_load(fixture(name)))
        assert status in (201, 409), answer


@pytest.fixture(scope="module")
def llm_port():
    server = openai_standin.serve(0, "ok")
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class Watcher(object):
    """Records every ResourceClaimTemplate, ResourceClaim and Pod seen in `namespace` while the gate runs."""

    def __init__(self, plane, namespace):
        self.plane, self.namespace = plane, namespace
        self.seen = {"resourceclaimtemplates": {}, "resourceclaims": {}, "pods": {}}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.wait(0.1):
            for plural in self.seen:
                base = "/api/v1" if plural == "pods" else RESOURCE
                status, answer = self.plane.request("GET", "%s/namespaces/%s/%s" % (base, self.namespace, plural))
                for item in answer.get("items", []) if status == 200 else []:
                    self.seen[plural].setdefault(item["metadata"]["name"], []).append(item)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def dra_serving(kube_cluster, kube_namespace, kube_job_kubeconfig, device_classes, llm_port, run_playbook):
    plane = kube_cluster
    suffix = secrets.token_hex(3)
    node = "dra-serve-" + suffix
    namespace = plane.create_namespace("gnp-dra-")
    runtime_class = "nvidia-" + suffix
    plane.api("POST", "/apis/node.k8s.io/v1/runtimeclasses", {
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime_class},
        "handler": "nvidia"})
    plane.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    item = yaml.safe_load(fixture("resourceslice_a100_gpu.yaml").replace("ipp1-0033", node))
    item["metadata"]["name"] = node + "-gpu.nvidia.com-0"
    plane.api("POST", RESOURCE + "/resourceslices", item)
    kubeconfig = kube_job_kubeconfig("onboarding", namespaces=[namespace])

    def run(extra=None):
        variables = {"preflight_node_name": node, "preflight_gates": ["serving"], "preflight_metrics_dir": "",
                     "gpu_native_allocation": "dra", "preflight_serving_namespace": namespace,
                     "preflight_serving_runtime_class": runtime_class, "preflight_serving_ready_timeout": 60,
                     "preflight_serving_ready_poll": 1, "preflight_serving_image": DIGEST_IMAGE,
                     "preflight_serving_port": llm_port, "preflight_serving_model": openai_standin.MODEL}
        variables.update(extra or {})
        with Watcher(plane, namespace) as watcher:
            result = run_playbook(PLAY, kubeconfig_path=kubeconfig, args=["-e", json.dumps(variables)])
        return result, watcher.seen
    try:
        with KubeletStandin(plane, [node], gpus=0, pod_ip="127.0.0.1") as kubelet:
            plane.wait_for("node %s Ready without the not-ready taint" % node, lambda: not [
                t for t in plane.api("GET", "/api/v1/nodes/" + node)["spec"].get("taints") or []
                if t["key"] == "node.kubernetes.io/not-ready"], timeout=120)
            yield plane, node, namespace, run, kubelet
    finally:
        for pod in plane.api("GET", "/api/v1/namespaces/%s/pods" % kube_namespace).get("items", []):
            plane.request("DELETE", "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0"
                          % (kube_namespace, pod["metadata"]["name"]))
        plane.delete_namespace(namespace)
        plane.request("DELETE", RESOURCE + "/resourceslices/" + item["metadata"]["name"])
        plane.request("DELETE", "/api/v1/nodes/" + node)
        plane.request("DELETE", "/apis/node.k8s.io/v1/runtimeclasses/" + runtime_class)


def _gone(plane, namespace):
    left = dict((plural, plane.api("GET", "%s/namespaces/%s/%s" % (base, namespace, plural))["items"])
                for plural, base in (("pods", "/api/v1"), ("resourceclaimtemplates", RESOURCE),
                                     ("resourceclaims", RESOURCE)))
    return left if any(left.values()) else None


@pytest.mark.parametrize("allocation", ["dra", "auto"])
def test_the_dra_serving_pod_claims_one_device_of_the_node_and_everything_is_deleted(dra_serving, allocation):
    plane, node, namespace, run, kubelet = dra_serving
    identity = preflight_serving.serving_pod_identity(node)
    # a template a killed run left for this node (found by its labels, deleted before anything else is created)
    plane.api("POST", "%s/namespaces/%s/resourceclaimtemplates" % (RESOURCE, namespace), {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {
            "name": "left-by-a-killed-run", "labels": {"app.kubernetes.io/name": "gpu-native-preflight",
                                                       "gpu-native.io/preflight-node-hash": identity["node_hash"]}},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})
    result, seen = run({"gpu_native_allocation": allocation})
    assert result.returncode == 0, result.stdout[-4000:]
    text = " ".join(result.stdout.split())
    assert "%s: PASSED (serving=pass)" % node in text, result.stdout[-5000:]

    # the template the API server accepted (resource.k8s.io/v1 validated it); the killed run's was deleted first
    templates = seen["resourceclaimtemplates"]
    assert set(templates) == {identity["name"], "left-by-a-killed-run"}, templates
    created = templates[identity["name"]][0]["metadata"]["creationTimestamp"]
    assert all(item["metadata"]["creationTimestamp"] <= created for item in templates["left-by-a-killed-run"])
    assert not [t for t in plane.api("GET", "%s/namespaces/%s/resourceclaimtemplates" % (RESOURCE, namespace))["items"]
                if t["metadata"]["name"] == "left-by-a-killed-run"]
    request = templates[identity["name"]][0]["spec"]["spec"]["devices"]["requests"]
    assert request == [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1,
        "selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].uuid in ["%s"]' % GPU_UUID}}]}}]

    # the pod: scheduled (not nodeName-bound) onto the node, claiming through the template, no nvidia.com/gpu
    pod = next(p for p in seen["pods"][identity["name"]] if p["spec"].get("nodeName"))
    assert pod["spec"]["nodeName"] == node
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": identity["name"]}]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]

    # the generated claim: owned by the pod (garbage-collected with it), allocated the node's device
    claims = list(seen["resourceclaims"].values())
    assert len(claims) == 1, seen["resourceclaims"]
    owners = claims[0][0]["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o.get("controller")) for o in owners] == [("Pod", identity["name"], True)]
    assert claims[0][0]["metadata"]["labels"]["gpu-native.io/preflight-node-hash"] == identity["node_hash"]
    allocated = [c["status"]["allocation"]["devices"]["results"] for c in claims[0]
                 if c.get("status", {}).get("allocation")]
    assert allocated and allocated[-1] == [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": node,
                                            "device": "gpu-0"}], claims[0][-1]
    # afterwards: the pod, the template and the claim are deleted
    plane.wait_for("the serving pod, its template and its claim deleted", lambda: _gone(plane, namespace) is None,
                   timeout=60)
    assert not kubelet.errors, kubelet.errors


def test_a_dra_node_whose_device_a_tenant_claims_is_skipped_and_nothing_is_created(dra_serving, kube_namespace):
    plane, node, namespace, run, kubelet = dra_serving
    plane.api("POST", "%s/namespaces/%s/resourceclaimtemplates" % (RESOURCE, kube_namespace), {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    plane.api("POST", "/api/v1/namespaces/%s/pods" % kube_namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
        "spec": {"affinity": affinity,
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                 "containers": [{"name": "train", "image": "train:1", "resources": {"claims": [{"name": "gpu"}]}}]}})
    plane.wait_for("the tenant's claim allocated", lambda: [
        c for c in plane.api("GET", "%s/namespaces/%s/resourceclaims" % (RESOURCE, kube_namespace))["items"]
        if c.get("status", {}).get("allocation")], timeout=60)
    plane.wait_for("the tenant's pod bound to the node", lambda: plane.api(
        "GET", "/api/v1/namespaces/%s/pods/train" % kube_namespace)["spec"].get("nodeName") == node, timeout=60)
    # the tenant's pod holds the node's one device through its claim: gpu_pod_eviction's dry run counts it as a GPU
    # pod (dra_drivers), so with preflight_evict false the active gates are skipped before anything is created
    result, seen = run({"preflight_evict": False})
    assert result.returncode == 0, result.stdout[-4000:]
    text = " ".join(result.stdout.split())
    assert "%s: PASSED (serving=skip)" % node in text, result.stdout[-5000:]
    assert "GPU pods running: %s/train (preflight_evict is false)" % kube_namespace in text, text[-3000:]
    assert seen["resourceclaimtemplates"] == {} and seen["pods"] == {}, seen
    assert plane.request("GET", "/api/v1/namespaces/%s/pods/train" % kube_namespace)[0] == 200, "not evicted"
