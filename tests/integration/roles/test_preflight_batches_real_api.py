# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/preflight.yml re-validating a fleet of five nodes on the real control plane (issue 25, item 1).

As the preflight job (rbac/onboarding.yml, not admin). The nodes are Node objects of this test whose kubelet is
`KubeletStandin`; the GPU tools are the stand-ins (healthy H100 x8), so every node passes the gates it runs (spec,
hardware, cuda; kubernetes and serving are skipped: no device plugin runs here). A thread reads the Nodes from the
API server every 50 ms while the playbook runs: the cordons it sees are the API's history of the run.

- preflight_serial=2: never more than two of the five nodes cordoned at once, each node cordoned once, in batches.
- A tenant's GPU pod on a node: with the default preflight_evict it is evicted (through the eviction API) before the
  active tests and the node joins; with preflight_evict=false the active tests (dcgmi diag -r 2, the CUDA kernel)
  are skipped with "GPU pods running: <namespace>/<pod>", the pod stays, and the node is not failed.
"""
import json
import os
import secrets
import sys
import threading
import time
import urllib.parse

import pytest
import testlib
from kube_cluster import KubeletStandin

sys.path.insert(0, os.path.dirname(__file__))
from test_preflight_role import DCGM_PASS, CAPTURES, host_vars  # noqa: E402

FLEET = 5


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory):
    return testlib.build_fake_libcuda(tmp_path_factory.mktemp("libcuda"))


class Cordons(threading.Thread):
    """Which of `nodes` are unschedulable, read from the API server every 50 ms: [(monotonic time, frozenset)]."""

    def __init__(self, plane, selector):
        super().__init__(daemon=True)
        self.plane, self.selector, self.seen, self.errors = plane, selector, [], []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            status, answer = self.plane.request("GET", "/api/v1/nodes?labelSelector=" + urllib.parse.quote(self.selector))
            if status == 200:
                cordoned = frozenset(n["metadata"]["name"] for n in answer["items"] if n["spec"].get("unschedulable"))
                if not self.seen or self.seen[-1][1] != cordoned:
                    self.seen.append((time.monotonic(), cordoned))
            else:
                self.errors.append(status)
            time.sleep(0.05)

    def stop(self):
        self._halt.set()
        self.join(10)

    def most(self):
        return max((len(cordoned) for _at, cordoned in self.seen), default=0)

    def ever(self):
        return set().union(*[cordoned for _at, cordoned in self.seen]) if self.seen else set()


class Fleet:
    def __init__(self, plane, namespace, tmp_path, libcuda):
        self.plane, self.namespace, self.tmp_path, self.libcuda = plane, namespace, tmp_path, libcuda
        self.token = secrets.token_hex(3)
        self.nodes = ["gpu-b%s-%d" % (self.token, index) for index in range(FLEET)]
        for node in self.nodes:
            plane.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": node, "labels": {"fleet-test": self.token}}})

    def tenant(self, node, name):
        """A tenant's pod bound to `node` holding one GPU (no controller: nothing recreates it)."""
        self.plane.api("POST", "/api/v1/namespaces/%s/pods" % self.namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [
                {"name": "train", "image": "example.invalid/train:1",
                 "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}}}]}})
        return "%s/%s" % (self.namespace, name)

    def pod_exists(self, name):
        return self.plane.request("GET", "/api/v1/namespaces/%s/pods/%s" % (self.namespace, name))[0] == 200

    def node(self, name):
        return self.plane.api("GET", "/api/v1/nodes/" + name)

    def run(self, kubeconfig, extra_vars, record):
        inventory = {"gpu_nodes": {"hosts": {}}}
        for index, node in enumerate(self.nodes):
            case = "n%d-%s" % (index, secrets.token_hex(2))
            values = host_vars(self.tmp_path, self.libcuda, case, dcgm=DCGM_PASS)
            values.pop("preflight_test_env")
            values.update(preflight_node_name=node, preflight_skip_gates=["kubernetes", "serving"],
                          preflight_skip_reasons={"kubernetes": "no device plugin here", "serving": "no LLM server"},
                          preflight_bandwidth=False)
            inventory["gpu_nodes"]["hosts"][case] = values
        inventory_path = self.tmp_path / ("inventory-%s.json" % secrets.token_hex(2))
        inventory_path.write_text(json.dumps(inventory))
        play = self.tmp_path / "preflight-run.yml"
        play.write_text("- ansible.builtin.import_playbook: gpu_native.fleet.preflight\n")
        variables = dict({"preflight_become": False, "preflight_evict_timeout": 60}, **extra_vars)
        env = {"NVIDIA_SMI_STANDIN_CAPTURE": os.path.join(CAPTURES, "h100x8-healthy"),
               "DCGMI_STANDIN_OUTPUT": str(self.tmp_path / "dcgm.json"), "DCGMI_STANDIN_RECORD": str(record)}
        (self.tmp_path / "dcgm.json").write_text(DCGM_PASS)
        args = ["-i", str(inventory_path), "--forks", "5", "-e", json.dumps(variables)]
        return testlib.run_ansible_playbook(str(play), kubeconfig, args, extra_env=env)


@pytest.fixture
def fleet(kube_cluster, kube_namespace, tmp_path, libcuda):
    made = Fleet(kube_cluster, kube_namespace, tmp_path, libcuda)
    yield made
    for node in made.nodes:
        kube_cluster.request("DELETE", "/api/v1/nodes/" + node)


def watched_run(kube_cluster, fleet, kubeconfig, extra_vars, record):
    cordons = Cordons(kube_cluster, "fleet-test=" + fleet.token)
    cordons.start()
    try:
        with KubeletStandin(kube_cluster, fleet.nodes) as kubelet:
            result = fleet.run(kubeconfig, extra_vars, record)
            assert not kubelet.errors, kubelet.errors
    finally:
        cordons.stop()
    assert not cordons.errors, cordons.errors
    return result, cordons


def test_batches_of_two_and_a_tenant_pod_evicted_first(kube_cluster, kube_job_kubeconfig, fleet, tmp_path):
    kubeconfig = kube_job_kubeconfig("onboarding")
    busy = fleet.nodes[2]
    fleet.tenant(busy, "train-0")
    record = tmp_path / "dcgmi-calls.txt"
    result, cordons = watched_run(kube_cluster, fleet, kubeconfig, {"preflight_serial": 2}, record)
    assert result.returncode == 0, result.stdout[-4000:]
    assert cordons.most() <= 2, cordons.seen
    assert cordons.ever() == set(fleet.nodes), cordons.seen  # each node was cordoned, in its batch
    assert "evicted %s/train-0 before the active tests" % fleet.namespace in result.stdout
    assert not fleet.pod_exists("train-0")
    for node in fleet.nodes:
        obj = fleet.node(node)
        assert obj["metadata"]["labels"].get("gpu-native.io/preflight") == "passed", (node, obj["metadata"])
        assert not obj["spec"].get("unschedulable"), node
    assert len(record.read_text().splitlines()) == FLEET  # dcgmi diag ran on every node, the drained one included
    assert "Preflight summary" in result.stdout


def test_one_at_a_time_and_a_busy_node_skipped_not_failed_without_eviction(
        kube_cluster, kube_job_kubeconfig, fleet, tmp_path):
    kubeconfig = kube_job_kubeconfig("onboarding")
    busy = fleet.nodes[3]
    key = fleet.tenant(busy, "train-1")
    record = tmp_path / "dcgmi-calls.txt"
    result, cordons = watched_run(kube_cluster, fleet, kubeconfig, {"preflight_evict": False}, record)
    assert result.returncode == 0, result.stdout[-4000:]
    assert cordons.most() <= 1, cordons.seen  # preflight_serial defaults to one node at a time
    assert cordons.ever() == set(fleet.nodes), cordons.seen
    assert fleet.pod_exists("train-1")  # the tenant keeps its GPU
    assert "GPU pods running: %s (preflight_evict is false)" % key in result.stdout
    obj = fleet.node(busy)
    assert obj["metadata"]["labels"].get("gpu-native.io/preflight") == "passed", obj["metadata"]
    assert not obj["spec"].get("unschedulable")
    summary = [line for line in result.stdout.splitlines() if line.strip().strip('",').startswith(busy)]
    assert summary and " skip " in summary[0] and " cordoned " not in summary[0], summary
    assert len(record.read_text().splitlines()) == FLEET - 1  # no dcgmi diag -r 2 next to the tenant
