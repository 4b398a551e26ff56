# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_native.fleet.gpu_pod_eviction against the real control plane, as the upgrades job (rbac/upgrades.yml).

PodDisruptionBudgets and graceful deletion are where the Kubernetes API stand-in and a real API server differ
most: the disruption controller counts only Ready=True pods as healthy and writes a budget's status
asynchronously, and an evicted pod bound to a node keeps a deletionTimestamp until its kubelet finalizes it.
The pods here come from a real ReplicaSet, bound by the scheduler to a Node of this test; `KubeletStandin` writes
what that node's kubelet would (node Ready, pods Running and Ready, deletions finalized or not) through the API.
The stand-in cases of the module (selection, drain refusals, errors) stay in test_gpu_pod_eviction.py.
"""
import json
import secrets
import urllib.parse

import pytest

from eviction_playbook import PLAYBOOK
from kube_cluster import KubeletStandin


class Fleet:
    """A Node of this test with a GPU ReplicaSet `serve` (and its PDB) in the test's namespace."""

    def __init__(self, plane, namespace, min_available):
        self.plane, self.namespace = plane, namespace
        self.node = "gpu-node-" + secrets.token_hex(3)
        plane.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                            "metadata": {"name": self.node, "labels": {"fleet-test": self.node}}})
        plane.api("POST", "/apis/apps/v1/namespaces/%s/replicasets" % namespace, {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "serve"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "serve"}},
                     "template": {"metadata": {"labels": {"app": "serve"}}, "spec": {
                         "nodeSelector": {"fleet-test": self.node},
                         "containers": [{"name": "c", "image": "example.invalid/serve:1",
                                         "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}})
        plane.api("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % namespace, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "serve-pdb"},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "serve"}}}})

    def pods(self):
        selector = urllib.parse.quote("spec.nodeName=" + self.node)
        return self.plane.api("GET", "/api/v1/namespaces/%s/pods?fieldSelector=%s" % (self.namespace, selector))["items"]

    def settle(self):
        """Wait until the pod runs Ready on the node and the disruption controller has observed the budget."""
        def ready():
            pdb = self.plane.api("GET", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/serve-pdb" % self.namespace)
            status = pdb.get("status", {})
            pods = [p for p in self.pods() if p["status"].get("phase") == "Running"]
            return len(pods) == 1 and status.get("observedGeneration") == pdb["metadata"]["generation"] \
                and status.get("currentHealthy") == 1 and pods[0]
        return self.plane.wait_for("the serve pod Ready on %s and its PDB observed" % self.node, ready, timeout=120)


@pytest.fixture
def fleet(kube_cluster, kube_namespace):
    made = []

    def make(min_available):
        made.append(Fleet(kube_cluster, kube_namespace, min_available))
        return made[-1]
    yield make
    for item in made:
        kube_cluster.request("DELETE", "/api/v1/nodes/" + item.node)


@pytest.fixture
def evict(kube_job_kubeconfig, run_playbook, tmp_path):
    kubeconfig = kube_job_kubeconfig("upgrades")

    def _run(node, args, check=False):
        out = tmp_path / "result.json"
        if out.exists():
            out.unlink()
        text = PLAYBOOK.format(args=json.dumps(dict({"node": node, "wait_sleep": 0.5}, **args)), out=out)
        proc = run_playbook(text, kubeconfig, ["--check"] if check else [])
        assert out.exists(), proc.stdout[-3000:]
        return json.loads(out.read_text()), proc
    return _run


def test_a_budget_that_allows_no_disruption_ends_in_a_clean_failure_naming_pod_and_budget(kube_cluster, fleet, evict):
    item = fleet(1)
    with KubeletStandin(kube_cluster, [item.node]) as kubelet:
        pod = item.settle()
        key = "%s/%s" % (item.namespace, pod["metadata"]["name"])
        result, proc = evict(item.node, {"timeout": 3})
        assert not kubelet.errors, kubelet.errors
    assert result["failed"] is True, proc.stdout[-3000:]
    msg = result["msg"]
    assert "\n" not in msg
    assert "%s (PodDisruptionBudget serve-pdb) still refused after 3s" % key in msg, msg
    assert "scale the workload up" in msg
    assert [(b["pod"], b["pdb"]) for b in result["blocked"]] == [(pod["metadata"]["name"], "serve-pdb")]
    assert "disruption budget" in result["blocked"][0]["message"]
    assert result["evicted"] == [] and result["changed"] is False
    assert [p["metadata"]["uid"] for p in item.pods()] == [pod["metadata"]["uid"]]  # still there, not terminating
    assert not item.pods()[0]["metadata"].get("deletionTimestamp")


def test_check_mode_names_the_budget_that_would_block_and_evicts_nothing(kube_cluster, fleet, evict):
    item = fleet(1)
    with KubeletStandin(kube_cluster, [item.node]):
        pod = item.settle()
        result, proc = evict(item.node, {"timeout": 30}, check=True)
    assert not result.get("failed"), proc.stdout[-3000:]
    assert [e["pod"] for e in result["would_evict"]] == [pod["metadata"]["name"]]
    assert [(b["pod"], b["pdb"]) for b in result["blocked"]] == [(pod["metadata"]["name"], "serve-pdb")]
    assert [p["metadata"]["uid"] for p in item.pods()] == [pod["metadata"]["uid"]]


def test_an_allowed_eviction_waits_until_the_kubelet_has_finalized_the_pod(kube_cluster, fleet, evict):
    item = fleet(0)
    with KubeletStandin(kube_cluster, [item.node]):
        pod = item.settle()
        result, proc = evict(item.node, {"timeout": 60})
    assert not result.get("failed"), proc.stdout[-3000:]
    assert [e["pod"] for e in result["evicted"]] == [pod["metadata"]["name"]] and result["changed"] is True
    assert pod["metadata"]["uid"] not in [p["metadata"]["uid"] for p in item.pods()]


def test_a_pod_its_kubelet_never_finalizes_is_reported_as_still_terminating(kube_cluster, fleet, evict):
    item = fleet(0)
    with KubeletStandin(kube_cluster, [item.node], finalize=False):
        pod = item.settle()
        result, proc = evict(item.node, {"timeout": 4})
        terminating = [p for p in item.pods() if p["metadata"]["uid"] == pod["metadata"]["uid"]]
    assert result["failed"] is True, proc.stdout[-3000:]
    key = "%s/%s" % (item.namespace, pod["metadata"]["name"])
    assert "%s still terminating on the node" % key in result["msg"], result["msg"]
    assert "finalizers, a long grace period" in result["msg"]
    assert [e["pod"] for e in result["evicted"]] == [pod["metadata"]["name"]]
    assert terminating and terminating[0]["metadata"].get("deletionTimestamp")  # the real server keeps it
