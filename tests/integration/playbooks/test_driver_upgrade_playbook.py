# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/driver_upgrade.yml on simulated nodes (local connection) against the real control plane
(tests/kube_cluster.py), as the upgrades job (rbac/upgrades.yml and rbac/namespaced.yml).

The cases that end before a package changes: a node an admin cordoned is skipped and stays cordoned; a
PodDisruptionBudget that blocks the eviction times out into a clean failure (node cordoned with our mark and
the reason, DaemonSets given back, no package step) and spends the failure budget, so the next node is not
started; --check reports the plan and changes nothing; bad settings are refused before anything changes.
The package change itself, the max-unavailable bound, a killed run and a failing gate after the upgrade are
in the Molecule scenario molecule/driver_upgrade (real packages on podman test hosts).

The device plugin DaemonSet is a real one: its controller puts a pod on every node labelled
nvidia.com/gpu.deploy.device-plugin=true, the scheduler binds it, `KubeletStandin` runs it (and finalizes the
pods the DaemonSet controller deletes when the role pauses it).  The Nodes' history (cordons and marks) comes from
a watch on the real API (`NodeHistory`), where the API stand-in kept its own log.
"""
import json
import os
import sys

import pytest

from kube_cluster import KubeletStandin, NodeHistory, Seed
from testlib import REPO_ROOT, run_ansible_playbook

PLAYBOOK = os.path.join(REPO_ROOT, "playbooks", "driver_upgrade.yml")
DEPLOY = "nvidia.com/gpu.deploy.device-plugin"
OWNER = "gpu-native.io/cordoned-by"


def node(name, unschedulable=False, annotations=None):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": annotations or {},
                         "labels": {DEPLOY: "true", "gpu-native.io/preflight": "passed"}},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}}}


def gpu_pod(name, node_name, app):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "labels": {"app": app},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app + "-rs",
                                              "uid": "0000-" + app, "controller": True}]},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def cpu_pod(name, node_name):
    pod = gpu_pod(name, node_name, "web")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    return pod


def pdb(app):
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": app, "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}}


DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet",
             "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"},
             "spec": {"selector": {"matchLabels": {"app": "nvidia-device-plugin-daemonset"}},
                      "template": {"metadata": {"labels": {"app": "nvidia-device-plugin-daemonset"}},
                                   "spec": {"nodeSelector": {DEPLOY: "true"},
                                            "containers": [{"name": "plugin", "image": "k8s-device-plugin:v0.17.1"}]}}}}


class Cluster:
    """The seed on the real control plane: nodes, namespaces, the DaemonSet, pods and budgets, all settled."""

    def __init__(self, plane, seed, settle=True):
        self.plane = plane
        self.seed = Seed(plane)
        self.node_names = [obj["metadata"]["name"] for obj in seed if obj["kind"] == "Node"]
        for obj in seed:
            if obj["kind"] == "Node":
                self.seed.node(obj)
        for obj in seed:
            if obj["kind"] == "Pod":
                self.seed.pod(obj)
        self.kubelet = KubeletStandin(plane, self.node_names).__enter__()
        for obj in [DAEMONSET] + [o for o in seed if o["kind"] not in ("Node", "Pod")]:
            self.seed.namespaced(obj)
        if settle:
            self.settle([obj["metadata"] for obj in seed if obj["kind"] == "PodDisruptionBudget"])

    def settle(self, budgets):
        """The seeded pods Running, a device plugin pod Running on every node, each budget observed."""
        def settled():
            for namespace, name in self.seed.pods:
                if self.get("/api/v1/namespaces/%s/pods/%s" % (namespace, name))["status"].get("phase") != "Running":
                    return False
            plugin = self.get("/api/v1/namespaces/%s/pods?labelSelector=app%%3Dnvidia-device-plugin-daemonset"
                              % self.seed.ns("gpu-operator"))["items"]
            running = set(p["spec"].get("nodeName") for p in plugin if p["status"].get("phase") == "Running")
            if not set(self.node_names) <= running:  # (another test's labelled nodes get one too)
                return False
            for meta in budgets:
                budget = self.get("/apis/policy/v1/namespaces/%s/poddisruptionbudgets/%s"
                                  % (self.seed.ns(meta["namespace"]), meta["name"]))
                if budget.get("status", {}).get("observedGeneration") != budget["metadata"]["generation"] or \
                        not budget["status"].get("currentHealthy"):
                    return False
            return True
        self.plane.wait_for("the seeded pods, the device plugin pods and the budgets", settled, timeout=120)

    def get(self, path):
        return self.plane.api("GET", path)

    def node(self, name):
        return self.get("/api/v1/nodes/" + name)

    def pod(self, namespace, name):
        return self.get("/api/v1/namespaces/%s/pods/%s" % (self.seed.ns(namespace), name))

    def close(self):
        self.kubelet.__exit__(None, None, None)
        self.seed.cleanup()


def run(plane, make_kubeconfig, tmp_path, seed, hosts, extra, check=False, settle=True):
    """One run of the playbook over `hosts` (inventory order = rollout order); returns (result, cluster).
    The cluster's `history` holds the Nodes' cordon history of the run."""
    cluster = Cluster(plane, seed, settle=settle)
    kubeconfig = make_kubeconfig("upgrades", namespaces=[cluster.seed.ns("ml"), cluster.seed.ns("gpu-operator")])
    inventory = {"gpu_nodes": {"hosts": dict(
        (host, {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                "preflight_node_name": host}) for host in hosts)}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    variables = {"upgrade_become": False, "upgrade_gather_facts": False, "nvidia_driver_version": "535.261.03",
                 "preflight_kubeconfig": kubeconfig, "upgrade_eviction_timeout": 3, "upgrade_eviction_wait_sleep": 1,
                 "upgrade_events": False, "upgrade_gpu_clients_namespace": cluster.seed.ns("gpu-operator"),
                 "upgrade_gpu_clients_poll_interval": 1}
    variables.update(extra)
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    args = ["-i", str(tmp_path / "inventory.json"), "-e", "@" + str(tmp_path / "vars.json")] + (["--check"] if check else [])
    with NodeHistory(plane, cluster.node_names) as watch:
        result = run_ansible_playbook(PLAYBOOK, kubeconfig, args)
    cluster.history = watch.entries
    for short, real in cluster.seed.namespaces.items():  # the test's namespaces by the short names it seeded
        result.stdout = result.stdout.replace(real + "/", short + "/")
    return result, cluster


def history(server):
    return server.history


def summary_line(stdout, node_name):
    lines = [line.strip().strip('",') for line in stdout.splitlines()
             if line.strip().strip('",').startswith(node_name + " ") and " -> " in line]
    assert lines, stdout[-3000:]
    return lines[-1]


@pytest.fixture
def kube_run(kube_cluster, kube_job_kubeconfig, tmp_path):
    made = []

    def _run(seed, hosts, extra, check=False, settle=True):
        result, cluster = run(kube_cluster, kube_job_kubeconfig, tmp_path, seed, hosts, extra, check, settle)
        made.append(cluster)
        return result, cluster
    yield _run
    for cluster in made:
        cluster.close()


@pytest.fixture(scope="module")
def rollout(kube_cluster, tmp_path_factory):
    """admin-cordoned node, then a node whose GPU pod a PDB protects, then a node never reached."""
    from kube_cluster import job_credentials  # pylint: disable=import-outside-toplevel
    folder = tmp_path_factory.mktemp("rollout")
    account_namespace = kube_cluster.create_namespace(prefix="upgrades-")
    cleanup = []

    def make_kubeconfig(job, namespaces=()):
        token, paths = job_credentials(kube_cluster, job, account_namespace, namespaces)
        cleanup.extend(paths)
        return kube_cluster.write_kubeconfig(str(folder / "kube-upgrades.kubeconfig"), token=token)
    seed = [node("gpu-admin", unschedulable=True, annotations={"ops.example.com/reason": "RMA"}),
            node("gpu-pdb"), node("gpu-later"),
            gpu_pod("trainer-0", "gpu-pdb", "trainer"), pdb("trainer"), gpu_pod("trainer-1", "gpu-later", "other")]
    result, server = run(kube_cluster, make_kubeconfig, folder, seed, ["gpu-admin", "gpu-pdb", "gpu-later"],
                         {"upgrade_max_unavailable": 1})
    yield result, server
    server.close()
    for path in cleanup:
        kube_cluster.request("DELETE", path)
    kube_cluster.delete_namespace(account_namespace)


def test_a_failed_node_fails_the_run_after_the_summary(rollout):
    result, _server = rollout
    assert result.returncode == 2, result.stdout[-4000:]
    assert "Driver upgrade summary" in result.stdout
    assert "1 node(s) failed the upgrade and stay cordoned: gpu-pdb" in result.stdout
    assert "(also on the Node, in its gpu-native.io/preflight-reasons annotation)" in result.stdout


def test_admin_cordoned_node_is_skipped_and_stays_cordoned(rollout):
    result, server = rollout
    admin = server.node("gpu-admin")
    assert admin["spec"]["unschedulable"] is True
    assert OWNER not in admin["metadata"]["annotations"]
    assert admin["metadata"]["annotations"]["ops.example.com/reason"] == "RMA"
    assert admin["metadata"]["labels"][DEPLOY] == "true"
    line = summary_line(result.stdout, "gpu-admin")
    assert line.split()[4:6] == ["skipped", "-"] and " skipped " in line and "not by driver_upgrade" in line


def test_pdb_timeout_is_a_clean_failure_with_the_node_still_cordoned(rollout):
    result, server = rollout
    blocked = server.node("gpu-pdb")
    assert blocked["spec"]["unschedulable"] is True
    assert blocked["metadata"]["annotations"][OWNER] == "driver_upgrade"
    assert blocked["metadata"]["labels"]["gpu-native.io/preflight"] == "failed"
    reason = blocked["metadata"]["annotations"]["gpu-native.io/preflight-reasons"]
    assert reason.startswith("driver upgrade to 535.261.03: Evict the GPU pods: ")
    assert "trainer" in reason
    # The pod is still there, the DaemonSet was given back, and no package step ran.
    assert server.pod("ml", "trainer-0")["spec"]["nodeName"] == "gpu-pdb"
    assert blocked["metadata"]["labels"][DEPLOY] == "true"
    assert "nvidia_driver : " not in result.stdout
    line = summary_line(result.stdout, "gpu-pdb")
    assert line.split()[4:6] == ["cordoned", "-"] and " failed " in line and "PodDisruptionBudget trainer" in line
    # Nothing was installed, so the reboot column still says what the plan said.
    assert "no (no nvidia module loaded)" in line


def test_the_spent_failure_budget_stops_the_rollout(rollout):
    result, server = rollout
    later = server.node("gpu-later")
    assert not later["spec"].get("unschedulable")
    assert OWNER not in later["metadata"]["annotations"]
    assert server.pod("ml", "trainer-1")["spec"]["nodeName"] == "gpu-later"
    line = summary_line(result.stdout, "gpu-later")
    assert "not started" in line and "the rollout stopped" in line


def test_never_more_than_one_node_cordoned_by_the_rollout(rollout):
    _result, server = rollout
    cordoned = {"gpu-admin"}
    most = 0
    for entry in history(server):
        (cordoned.add if entry["unschedulable"] else cordoned.discard)(entry["node"])
        most = max(most, len(cordoned - {"gpu-admin"}))
    assert most == 1


def test_check_mode_reports_the_plan_and_changes_nothing(kube_run):
    seed = [node("gpu-plan"), gpu_pod("trainer-0", "gpu-plan", "trainer"), cpu_pod("web-0", "gpu-plan")]
    result, server = kube_run(seed, ["gpu-plan"], {}, check=True)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "Driver upgrade summary (dry run: nothing changed)" in result.stdout
    line = summary_line(result.stdout, "gpu-plan")
    assert "-> 535.261.03  would cordon" in line and "ml/trainer-0" in line and "web-0" not in line and "would upgrade" in line
    assert "reboot: no" in line
    plan = server.node("gpu-plan")
    assert not plan["spec"].get("unschedulable")
    assert OWNER not in plan["metadata"]["annotations"]
    assert plan["metadata"]["labels"][DEPLOY] == "true"
    assert server.pod("ml", "trainer-0")["spec"]["nodeName"] == "gpu-plan"
    assert [entry for entry in history(server) if entry["event"] != "created"] == []


@pytest.mark.parametrize("extra, message", [
    ({"nvidia_driver_version": ""}, "nvidia_driver_version is not set"),
    ({"upgrade_component": "firmware"}, "upgrade_component is firmware, not driver or toolkit"),
    ({"upgrade_max_unavailable": "0"}, "upgrade_max_unavailable is '0'"),
    ({"upgrade_max_fail_percentage": 150}, "upgrade_max_fail_percentage is 150"),
    ({"upgrade_reboot": "always"}, "upgrade_reboot is always, not if_needed or never"),
    ({"upgrade_gpu_clients_poll_interval": 0}, "upgrade_gpu_clients_poll_interval is not a positive number of seconds"),
    # The role's argument spec (type int) refuses a word before any task runs.
    ({"upgrade_gpu_clients_timeout": "five"}, "argument 'upgrade_gpu_clients_timeout' is of type str and we were unable to convert to int"),
])
def test_bad_settings_are_refused_before_anything_changes(kube_run, extra, message):
    result, server = kube_run([node("gpu-bad")], ["gpu-bad"], extra, settle=False)
    assert result.returncode != 0
    assert message in result.stdout, result.stdout[-3000:]
    bad = server.node("gpu-bad")
    assert not bad["spec"].get("unschedulable") and OWNER not in bad["metadata"]["annotations"]
