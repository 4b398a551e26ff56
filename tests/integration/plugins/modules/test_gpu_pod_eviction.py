# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_native.fleet.gpu_pod_eviction run by ansible-playbook against the real control plane (tests/kube_cluster.py),
as the upgrades job (rbac/upgrades.yml): pod selection, drain and its refusals, a PodDisruptionBudget, check mode,
the errors.

The pods are seeded through the API (`Seed`): bound to two Nodes of this test, in namespaces of this test (the
short names ml, default, gpu-operator, kube-system stand for them), their controllers real (a ReplicaSet, a
DaemonSet) that adopted them, made Running and Ready by `KubeletStandin`, which also finalizes an evicted pod as
its kubelet would.  What the API stand-in this file used to run against believed and a real server does not:
- an evicted pod vanished at once: a real one keeps a deletionTimestamp until its kubelet finalizes it;
- an evicted ReplicaSet pod stayed gone: a real ReplicaSet creates a replacement (Pending here: it has nowhere to
  run), so "the pods left" are the pods still bound to the node;
- a PodDisruptionBudget was counted at once: the disruption controller counts only Ready pods and writes the
  budget's status a moment later, so the tests wait until it has (`settled`).
PDB and graceful-deletion edge cases have their own file, test_gpu_pod_eviction_real_api.py.
"""
import json
import os
import secrets
import shutil

import pytest

from eviction_playbook import PLAYBOOK
from kube_cluster import KubeletStandin, Seed

NODE = "gpu-node-1"  # replaced per test by a unique name (the control plane is shared by the session)
NODE2 = "gpu-node-2"
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "6a0c1d7e-3c1e-4d8a-9a43-0d6b7c2f1a01",
      "controller": True}
DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm-exporter",
      "uid": "2f4e6a8c-1b3d-4e5f-8a9b-0c1d2e3f4a5b", "controller": True}


def pod(name, namespace="ml", node=NODE, gpu=None, init_gpu=None, owner="rs", labels=None, phase="Running",
        volumes=None, annotations=None):
    owner = RS if owner == "rs" else owner
    container = {"name": "c", "image": "example.invalid/c:1"}
    if gpu:
        container["resources"] = {"limits": {gpu: 1}}
    spec = {"nodeName": node, "containers": [container]}
    if init_gpu:
        spec["initContainers"] = [{"name": "init", "image": "example.invalid/i:1",
                                   "resources": {"requests": {init_gpu: 1}, "limits": {init_gpu: 1}}}]
    if volumes:
        spec["volumes"] = volumes
    meta = {"name": name, "namespace": namespace, "labels": labels or {"app": name}}
    if owner:
        meta["ownerReferences"] = [owner]
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def pdb(name, app, namespace="ml", min_available=1):
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}}


SEED = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "spec": {"unschedulable": True}},
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE2}},
    pod("trainer-0", gpu="nvidia.com/gpu"),
    pod("mig-job", init_gpu="nvidia.com/mig-1g.10gb",
        owner=dict(RS, kind="Job", name="mig-job", apiVersion="batch/v1")),
    pod("web-0", namespace="default"),
    pod("dcgm-exporter-x2k8d", namespace="gpu-operator", gpu="nvidia.com/gpu", owner=DS),
    pod("finished-job", gpu="nvidia.com/gpu", phase="Succeeded"),
    pod("trainer-elsewhere", node=NODE2, gpu="nvidia.com/gpu"),
    pod("kube-proxy-static", namespace="kube-system", owner=None,
        annotations={"kubernetes.io/config.mirror": "0123456789abcdef"}),
]


class Cluster:
    """The seed on the real control plane, with the kubelet stand-in of its nodes running."""

    def __init__(self, plane, seed, node, node2):
        self.plane, self.node, self.node2 = plane, node, node2
        self.seed = Seed(plane)
        rename = {NODE: node, NODE2: node2}
        objects = json.loads(json.dumps(seed))
        for obj in objects:
            if obj["kind"] == "Node":
                obj["metadata"]["name"] = rename[obj["metadata"]["name"]]
            elif obj["kind"] == "Pod":
                obj["spec"]["nodeName"] = rename[obj["spec"]["nodeName"]]
        for obj in objects:
            if obj["kind"] == "Node":
                self.seed.node(obj)
        for obj in objects:
            if obj["kind"] == "Pod":
                self.seed.pod(obj)
            elif obj["kind"] != "Node":
                self.seed.namespaced(obj)
        # started once the pods exist: a finished pod is written Succeeded before a kubelet could start it
        self.kubelet = KubeletStandin(plane, [node, node2]).__enter__()
        self.budgets = [o["metadata"] for o in objects if o["kind"] == "PodDisruptionBudget"]
        self.settled()

    def settled(self):
        """Every seeded pod that should run is Running and Ready, every budget observed with its healthy pods."""
        def running():
            for namespace, name in self.seed.pods:
                pod = self.plane.api("GET", "/api/v1/namespaces/%s/pods/%s" % (namespace, name))
                if pod["status"].get("phase") not in ("Running", "Succeeded", "Failed"):
                    return False
            for meta in self.budgets:
                path = "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/%s" % (self.seed.ns(meta["namespace"]),
                                                                                  meta["name"])
                budget = self.plane.api("GET", path)
                status = budget.get("status", {})
                if status.get("observedGeneration") != budget["metadata"]["generation"] or \
                        not status.get("currentHealthy"):
                    return False
            return True
        self.plane.wait_for("the seeded pods Running and their budgets observed", running, timeout=120)

    def close(self):
        self.kubelet.__exit__(None, None, None)
        self.seed.cleanup()


def pod_names(server, node=None):
    """The pods bound to `node` (default: to either node of the test), as <short namespace>/<name>."""
    return server.seed.bound_pods(node and {NODE: server.node, NODE2: server.node2}[node])


def names(entries, server=None):
    return sorted("%s/%s" % (server.seed.logical(e["namespace"]) if server else e["namespace"], e["pod"])
                  for e in entries)


@pytest.fixture
def cluster(kube_cluster):
    made = []

    def make(seed):
        if made:
            made.pop().close()
        suffix = secrets.token_hex(3)  # new nodes each time: the pods of a closed seed may still be terminating
        made.append(Cluster(kube_cluster, seed, "gpu-node-1-" + suffix, "gpu-node-2-" + suffix))
        return made[-1]
    yield make
    for item in made:
        item.close()


@pytest.fixture
def evict(cluster, kube_job_kubeconfig, run_playbook, tmp_path):
    """Seed the control plane, run the module with ``args`` as the upgrades job; return (result, cluster, proc).
    The result's pod names carry the short namespace names (ml, default...) the test seeded them in."""
    config = kube_job_kubeconfig("upgrades")

    def _run(seed, args, check=False, extra_env=None, kubeconfig=True, diff=False, prepare=None):
        server = cluster(seed)
        if prepare is not None:
            prepare(server)  # what a test's controllers would write after the seed (a claim's allocation)
        out = tmp_path / "result.json"
        if out.exists():
            out.unlink()
        text = PLAYBOOK.format(args=json.dumps(dict({"node": server.node, "wait_sleep": 0.2}, **args)), out=out)
        proc = run_playbook(text, config if kubeconfig else None,
                            (["--check"] if check else []) + (["--diff"] if diff else []), extra_env)
        assert out.exists(), proc.stdout
        result = json.loads(out.read_text())
        for short, real in server.seed.namespaces.items():
            if "msg" in result:
                result["msg"] = result["msg"].replace(real + "/", short + "/")
        for key in ("evicted", "skipped", "blocked", "would_evict"):
            for entry in result.get(key, []):
                entry["namespace"] = server.seed.logical(entry["namespace"])
        if "diff" in result:
            for side in ("before", "after"):
                result["diff"][side] = "".join(
                    "%s/%s\n" % (server.seed.logical(line.split("/", 1)[0]), line.split("/", 1)[1])
                    for line in result["diff"][side].splitlines())
        return result, server, proc
    return _run


def seeded_pods(seed, node=None):
    return len([p for p in seed if p["kind"] == "Pod" and (node is None or p["spec"]["nodeName"] == node)])


def test_gpu_pods_are_evicted_and_the_rest_kept(evict):
    result, server, proc = evict(SEED, {"timeout": 30})
    assert not result.get("failed"), proc.stdout
    assert result["changed"] is True
    assert names(result["evicted"]) == ["ml/mig-job", "ml/trainer-0"]
    assert pod_names(server) == ["default/web-0", "gpu-operator/dcgm-exporter-x2k8d", "kube-system/kube-proxy-static",
                                 "ml/finished-job", "ml/trainer-elsewhere"]
    reasons = {"%s/%s" % (s["namespace"], s["pod"]): s["reason"] for s in result["skipped"]}
    assert reasons["gpu-operator/dcgm-exporter-x2k8d"].startswith("DaemonSet pod")
    assert reasons["default/web-0"].startswith("uses no nvidia.com/")
    assert reasons["ml/finished-job"] == "finished (Succeeded)"
    assert reasons["kube-system/kube-proxy-static"].startswith("mirror")
    assert result["blocked"] == [] and result["would_evict"] == []


def test_a_node_without_gpu_pods_changes_nothing(evict):
    seed = [SEED[0], pod("web-0", namespace="default")]
    result, server, _proc = evict(seed, {})
    assert result["changed"] is False and result["evicted"] == []
    assert pod_names(server) == ["default/web-0"]


def test_drain_evicts_non_gpu_pods_but_not_daemonset_or_mirror_pods(evict):
    result, server, proc = evict(SEED, {"drain": True, "timeout": 30})
    assert not result.get("failed"), proc.stdout
    assert names(result["evicted"]) == ["default/web-0", "ml/mig-job", "ml/trainer-0"]
    assert pod_names(server) == ["gpu-operator/dcgm-exporter-x2k8d", "kube-system/kube-proxy-static",
                                 "ml/finished-job", "ml/trainer-elsewhere"]


def test_drain_refuses_emptydir_and_unmanaged_pods_and_evicts_nothing(evict):
    seed = SEED + [pod("scratch", namespace="default", volumes=[{"name": "tmp", "emptyDir": {}}]),
                   pod("bare", namespace="default", owner=None)]
    result, server, _proc = evict(seed, {"drain": True, "timeout": 30})
    assert result["failed"] is True
    assert "nothing was evicted" in result["msg"]
    assert "default/scratch uses emptyDir" in result["msg"] and "delete_emptydir_data=true" in result["msg"]
    assert "default/bare not managed by a controller" in result["msg"] and "force=true" in result["msg"]
    assert result["evicted"] == [] and result["changed"] is False
    assert len(pod_names(server, NODE)) == len([p for p in seed if p["kind"] == "Pod"
                                                and p["spec"]["nodeName"] == NODE])
    result, server, _proc = evict(seed, {"drain": True, "delete_emptydir_data": True, "force": True,
                                         "timeout": 30})
    assert not result.get("failed"), result
    assert "default/scratch" in names(result["evicted"]) and "default/bare" in names(result["evicted"])


def test_pdb_with_no_disruption_allowed_times_out_into_a_clean_failure(evict):
    seed = SEED + [pod("serve-0", gpu="nvidia.com/gpu", labels={"app": "serve"}), pdb("serve-pdb", "serve")]
    # 8 s, not less: on a loaded 2-core machine the evictions of the other pods and the reads around them took
    # more than 2 s + 5 s (CI-like load, stop 40), and the run ended on the API deadline instead of the budget
    result, server, _proc = evict(seed, {"timeout": 8})
    assert result["failed"] is True
    msg = result["msg"]
    assert "\n" not in msg
    assert "ml/serve-0 (PodDisruptionBudget serve-pdb)" in msg
    assert "scale the workload up" in msg  # the fix
    assert [(b["pod"], b["pdb"]) for b in result["blocked"]] == [("serve-0", "serve-pdb")]
    assert "disruption budget" in result["blocked"][0]["message"]
    # What was evicted is reported, and nothing beyond it left the node.
    assert names(result["evicted"]) == ["ml/mig-job", "ml/trainer-0"]
    assert pod_names(server, NODE) == ["default/web-0", "gpu-operator/dcgm-exporter-x2k8d",
                                       "kube-system/kube-proxy-static", "ml/finished-job", "ml/serve-0"]
    assert result["changed"] is True


def test_check_mode_lists_the_pods_and_the_blocked_ones_and_changes_nothing(evict):
    seed = SEED + [pod("serve-0", gpu="nvidia.com/gpu", labels={"app": "serve"}), pdb("serve-pdb", "serve")]
    result, server, proc = evict(seed, {"timeout": 30}, check=True, diff=True)
    assert not result.get("failed"), proc.stdout
    assert result["changed"] is True
    assert names(result["would_evict"]) == ["ml/mig-job", "ml/serve-0", "ml/trainer-0"]
    assert [(b["pod"], b["pdb"]) for b in result["blocked"]] == [("serve-0", "serve-pdb")]
    assert result["evicted"] == []
    assert len(pod_names(server)) == len([p for p in seed if p["kind"] == "Pod"])
    assert result["diff"]["before"] == "ml/mig-job\nml/serve-0\nml/trainer-0\n"
    assert result["diff"]["after"] == "ml/serve-0\n"


ERRORS_PLAYBOOK = """
- name: gpu_pod_eviction refusals
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Unknown node
      gpu_native.fleet.gpu_pod_eviction: {{node: no-such-node}}
      register: unknown_node
      ignore_errors: true
    - name: Missing kubeconfig
      gpu_native.fleet.gpu_pod_eviction: {{node: gpu-node-1, kubeconfig: "{missing}"}}
      register: no_kubeconfig
      ignore_errors: true
    - name: Python without the kubernetes client
      gpu_native.fleet.gpu_pod_eviction: {{node: gpu-node-1}}
      vars:
        ansible_python_interpreter: "{python}"
      register: no_client
      ignore_errors: true
    - name: Keep the results
      ansible.builtin.copy:
        content: "{{{{ {{'unknown_node': unknown_node, 'no_kubeconfig': no_kubeconfig, 'no_client': no_client}} | to_json }}}}"
        dest: "{out}"
        mode: "0600"
"""


def _python_without_kubernetes():
    import subprocess  # pylint: disable=import-outside-toplevel
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and os.path.exists(candidate):
            proc = subprocess.run([candidate, "-c", "import kubernetes"], capture_output=True, check=False)
            if proc.returncode != 0:
                return candidate
    return None


def test_unknown_node_missing_kubeconfig_or_client_are_clear_errors(cluster, kube_job_kubeconfig, run_playbook,
                                                                    tmp_path):
    python = _python_without_kubernetes()
    if python is None:
        pytest.skip("every Python here has the kubernetes client")
    server = cluster(SEED)
    out = tmp_path / "errors.json"
    text = ERRORS_PLAYBOOK.format(missing=tmp_path / "absent" / "kubeconfig", python=python, out=out)
    proc = run_playbook(text, kube_job_kubeconfig("upgrades"))
    assert out.exists(), proc.stdout
    results = json.loads(out.read_text())
    for result in results.values():
        assert result["failed"] is True and "\n" not in result["msg"]
        assert result["evicted"] == [] and result["changed"] is False
    assert results["unknown_node"]["msg"] == ("node no-such-node not found in the cluster; check the node name "
                                              "(kubectl get nodes)")
    assert results["no_kubeconfig"]["msg"].startswith("cannot connect to the Kubernetes API: ")
    assert "point kubeconfig (or K8S_AUTH_KUBECONFIG) at a valid kubeconfig" in results["no_kubeconfig"]["msg"]
    assert "Failed to import the required Python library (kubernetes)" in results["no_client"]["msg"]
    assert "pip install kubernetes" in results["no_client"]["msg"]
    assert len(pod_names(server)) == seeded_pods(SEED)


# -- DRA: a pod holding a GPU through a ResourceClaim (resource.k8s.io/v1, served by the real control plane) -------

def dra_claim(name, device_class="gpu.nvidia.com"):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": device_class}}]}}}


def dra_pod(name, claim_name):
    obj = pod(name)
    obj["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": claim_name}]
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "dev"}]}
    return obj


def allocate(server, claim_name, driver, device):
    """Write a claim's allocation as the scheduler does once it has picked a device of that driver on the node."""
    path = "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s/status" % (server.seed.ns("ml"), claim_name)
    server.plane.api("PATCH", path, {"status": {"allocation": {"devices": {"results": [
        {"request": "dev", "driver": driver, "pool": server.node, "device": device}]}}}},
        content_type="application/merge-patch+json")


DRA_SEED = [SEED[0], SEED[1], dra_pod("dra-trainer", "trainer-gpu"), dra_pod("dra-nic", "nic"),
            pod("web-0", namespace="default"), dra_claim("trainer-gpu"), dra_claim("nic", "nic.example.com")]


def allocate_dra_seed(server):
    allocate(server, "trainer-gpu", "gpu.nvidia.com", "gpu-0")
    allocate(server, "nic", "nic.example.com", "nic-0")


def test_a_pod_whose_claim_holds_an_nvidia_dra_device_is_evicted(evict):
    result, server, proc = evict(DRA_SEED, {"timeout": 30}, prepare=allocate_dra_seed)
    assert not result.get("failed"), proc.stdout
    assert names(result["evicted"]) == ["ml/dra-trainer"]
    reasons = {"%s/%s" % (s["namespace"], s["pod"]): s["reason"] for s in result["skipped"]}
    assert reasons["ml/dra-nic"] == "uses no nvidia.com/* resource and no device of DRA driver gpu.nvidia.com"
    assert pod_names(server, NODE) == ["default/web-0", "ml/dra-nic"]


def test_without_dra_drivers_the_claim_is_not_read_and_the_pod_stays(evict):
    result, server, proc = evict(DRA_SEED, {"timeout": 30, "dra_drivers": []}, prepare=allocate_dra_seed)
    assert not result.get("failed"), proc.stdout
    assert result["evicted"] == [] and result["changed"] is False
    assert pod_names(server, NODE) == ["default/web-0", "ml/dra-nic", "ml/dra-trainer"]
