# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/driver_upgrade.yml on simulated nodes (local connection) against the Kubernetes API stand-in.

The cases that end before a package changes: a node an admin cordoned is skipped and stays cordoned; a
PodDisruptionBudget that blocks the eviction times out into a clean failure (node cordoned with our mark and
the reason, DaemonSets given back, no package step) and spends the failure budget, so the next node is not
started; --check reports the plan and changes nothing; bad settings are refused before anything changes.
The package change itself, the max-unavailable bound, a killed run and a failing gate after the upgrade are
in the Molecule scenario molecule/driver_upgrade (real packages on podman test hosts).
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "roles"))
from standin_helpers import REPO_ROOT, api_get, run_ansible_playbook, start_k8s_standin  # noqa: E402

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
NAMESPACES = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}} for name in ("gpu-operator", "ml")]


def run(tmp_path, seed, hosts, extra, check=False):
    """One run of the playbook over `hosts` (inventory order = rollout order); returns (result, server)."""
    server, kubeconfig = start_k8s_standin(tmp_path, NAMESPACES + [DAEMONSET] + seed)
    inventory = {"gpu_nodes": {"hosts": dict(
        (host, {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                "preflight_node_name": host}) for host in hosts)}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    variables = {"upgrade_become": False, "upgrade_gather_facts": False, "nvidia_driver_version": "535.261.03",
                 "preflight_kubeconfig": kubeconfig, "upgrade_eviction_timeout": 3, "upgrade_eviction_wait_sleep": 1,
                 "upgrade_events": False}
    variables.update(extra)
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    args = ["-i", str(tmp_path / "inventory.json"), "-e", "@" + str(tmp_path / "vars.json")] + (["--check"] if check else [])
    return run_ansible_playbook(PLAYBOOK, kubeconfig, args), server


def history(server):
    path = os.path.join(server.state_dir, "node-history.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def summary_line(stdout, node_name):
    lines = [line.strip().strip('",') for line in stdout.splitlines()
             if line.strip().strip('",').startswith(node_name + " ") and " -> " in line]
    assert lines, stdout[-3000:]
    return lines[-1]


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    """admin-cordoned node, then a node whose GPU pod a PDB protects, then a node never reached."""
    folder = tmp_path_factory.mktemp("rollout")
    seed = [node("gpu-admin", unschedulable=True, annotations={"ops.example.com/reason": "RMA"}),
            node("gpu-pdb"), node("gpu-later"),
            gpu_pod("trainer-0", "gpu-pdb", "trainer"), pdb("trainer"), gpu_pod("trainer-1", "gpu-later", "other")]
    result, server = run(folder, seed, ["gpu-admin", "gpu-pdb", "gpu-later"], {"upgrade_max_unavailable": 1})
    yield result, server
    server.stop()


def test_a_failed_node_fails_the_run_after_the_summary(rollout):
    result, _server = rollout
    assert result.returncode == 2, result.stdout[-4000:]
    assert "Driver upgrade summary" in result.stdout
    assert "1 node(s) failed the upgrade and stay cordoned: gpu-pdb" in result.stdout


def test_admin_cordoned_node_is_skipped_and_stays_cordoned(rollout):
    result, server = rollout
    admin = api_get(server, "/api/v1/nodes/gpu-admin")
    assert admin["spec"]["unschedulable"] is True
    assert OWNER not in admin["metadata"]["annotations"]
    assert admin["metadata"]["annotations"]["ops.example.com/reason"] == "RMA"
    assert admin["metadata"]["labels"][DEPLOY] == "true"
    line = summary_line(result.stdout, "gpu-admin")
    assert line.split()[4:6] == ["skipped", "-"] and " skipped " in line and "not by driver_upgrade" in line


def test_pdb_timeout_is_a_clean_failure_with_the_node_still_cordoned(rollout):
    result, server = rollout
    blocked = api_get(server, "/api/v1/nodes/gpu-pdb")
    assert blocked["spec"]["unschedulable"] is True
    assert blocked["metadata"]["annotations"][OWNER] == "driver_upgrade"
    assert blocked["metadata"]["labels"]["gpu-native.io/preflight"] == "failed"
    reason = blocked["metadata"]["annotations"]["gpu-native.io/preflight-reasons"]
    assert reason.startswith("driver upgrade to 535.261.03: Evict the GPU pods: ")
    assert "trainer" in reason
    # The pod is still there, the DaemonSet was given back, and no package step ran.
    assert api_get(server, "/api/v1/namespaces/ml/pods/trainer-0")["spec"]["nodeName"] == "gpu-pdb"
    assert blocked["metadata"]["labels"][DEPLOY] == "true"
    assert "nvidia_driver : " not in result.stdout
    line = summary_line(result.stdout, "gpu-pdb")
    assert line.split()[4:6] == ["cordoned", "-"] and " failed " in line and "PodDisruptionBudget trainer" in line
    # Nothing was installed, so the reboot column still says what the plan said.
    assert "no (no nvidia module loaded)" in line


def test_the_spent_failure_budget_stops_the_rollout(rollout):
    result, server = rollout
    later = api_get(server, "/api/v1/nodes/gpu-later")
    assert not later["spec"].get("unschedulable")
    assert OWNER not in later["metadata"]["annotations"]
    assert api_get(server, "/api/v1/namespaces/ml/pods/trainer-1")["spec"]["nodeName"] == "gpu-later"
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


def test_check_mode_reports_the_plan_and_changes_nothing(tmp_path):
    seed = [node("gpu-plan"), gpu_pod("trainer-0", "gpu-plan", "trainer"), cpu_pod("web-0", "gpu-plan")]
    result, server = run(tmp_path, seed, ["gpu-plan"], {}, check=True)
    try:
        assert result.returncode == 0, result.stdout[-4000:]
        assert "Driver upgrade summary (dry run: nothing changed)" in result.stdout
        line = summary_line(result.stdout, "gpu-plan")
        assert "-> 535.261.03  would cordon" in line and "ml/trainer-0" in line and "web-0" not in line and "would upgrade" in line
        assert "reboot: no" in line
        plan = api_get(server, "/api/v1/nodes/gpu-plan")
        assert not plan["spec"].get("unschedulable")
        assert OWNER not in plan["metadata"]["annotations"]
        assert plan["metadata"]["labels"][DEPLOY] == "true"
        assert api_get(server, "/api/v1/namespaces/ml/pods/trainer-0")["spec"]["nodeName"] == "gpu-plan"
        assert [entry for entry in history(server) if entry["event"] != "created"] == []
    finally:
        server.stop()


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
def test_bad_settings_are_refused_before_anything_changes(tmp_path, extra, message):
    result, server = run(tmp_path, [node("gpu-bad")], ["gpu-bad"], extra)
    try:
        assert result.returncode != 0
        assert message in result.stdout, result.stdout[-3000:]
        bad = api_get(server, "/api/v1/nodes/gpu-bad")
        assert not bad["spec"].get("unschedulable") and OWNER not in bad["metadata"]["annotations"]
    finally:
        server.stop()
