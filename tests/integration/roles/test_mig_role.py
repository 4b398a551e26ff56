# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig role on localhost: the nvidia-smi stand-in (8x H100) and the real Kubernetes control plane.

The control plane is the shared upstream one (tests/kube_cluster.py); each test creates a Node of its own (and, for
the GPU Operator case, its DaemonSets in a namespace of its own, run by the real DaemonSet controller and scheduler)
and the role runs with the token of the upgrades job's ServiceAccount (rbac/upgrades.yml), not as admin.  No kubelet
runs: `KubeletStandin` writes what the node's kubelet would (node Ready, pods Running, a deleted pod finalized)
through the API.

Where these tests ran on the Kubernetes API stand-in, some beliefs were the stand-in's: a node carries only the
annotations it was given (the TTL controller adds node.alpha.kubernetes.io/ttl), "nothing changed" can be read off
the node's resourceVersion (controllers write to a node: `role_view` compares what the role could change), a paused
DaemonSet pod leaves at once (it is deleted gracefully and stays until its kubelet finalizes it), and the Events of
a Node may go to any namespace (a real API server accepts an Event with eventTime about a cluster-scoped object only
in `default` or `kube-system`), and the role's are the only Events about its node (the node lifecycle controller
records RegisteredNode and others: `events` keeps those the role reported).
"""
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from kube_cluster import KubeletStandin, job_credentials
from testlib import REPO_ROOT, run_ansible_playbook

STANDIN = os.path.join(REPO_ROOT, "tests", "standins", "nvidia-smi")
CAPTURE = os.path.join(REPO_ROOT, "tests", "standins", "captures", "h100x8-healthy")
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"team": "ml"}},
        "spec": {"podCIDR": "10.244.1.0/24"}}
MARKS = ("gpu-native.io/cordoned-by", "gpu-native.io/cordoned-at", "gpu-native.io/run-id")
MUTATING = ("-cgi", "-dci", "-dgi", "-mig", "-r")
CONFIG = {"version": "v1", "mig-configs": {
    "balanced": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
                 {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False}],
    "all-1g": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
               {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False}],
    "two-7g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 2}}],
}}
PLAY = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gpu_native.fleet.mig
      vars: %s
"""


OPERATOR_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {
    "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter": "false"}}, "spec": {}}


def daemonset(name, label):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {label: "true"},
                                           "containers": [{"name": "c", "image": "example.invalid/c:1"}]}}}}


def own_annotations(obj):
    return {key: value for key, value in obj["metadata"].get("annotations", {}).items()
            if not key.startswith("node.alpha.kubernetes.io/")}


def role_view(obj):
    """What the role could change on its node: unschedulable, labels, annotations (the control plane's left out)."""
    return (bool(obj["spec"].get("unschedulable")), obj["metadata"].get("labels"), own_annotations(obj))


@pytest.fixture
def operator_node(kube_cluster, tmp_path):
    yield from _node(kube_cluster, tmp_path, OPERATOR_NODE, daemonsets=[
        daemonset("nvidia-device-plugin-daemonset", "nvidia.com/gpu.deploy.device-plugin"),
        daemonset("gpu-feature-discovery", "nvidia.com/gpu.deploy.gpu-feature-discovery")])


@pytest.fixture
def node(kube_cluster, tmp_path):
    yield from _node(kube_cluster, tmp_path, NODE)


def _node(plane, tmp_path, seed, daemonsets=()):
    state = tmp_path / "smi" / "mig-state.json"
    name = "gpu-node-" + secrets.token_hex(3)
    obj = json.loads(json.dumps(seed))
    obj["metadata"]["name"] = name
    plane.api("POST", "/api/v1/nodes", obj)
    namespace = plane.create_namespace("gpu-operator-")
    token, cleanup = job_credentials(plane, "upgrades", namespace)
    kubeconfig = plane.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=namespace, token=token)
    for item in daemonsets:
        plane.api("POST", "/apis/apps/v1/namespaces/%s/daemonsets" % namespace, item)

    class Node:
        api = plane
        node_name = name
        gpu_namespace = namespace
        kubeconfig_path = kubeconfig

        def play(self, config_name, *args, **extra):
            role_vars = {"mig_config": CONFIG, "mig_config_name": config_name, "mig_node_name": name,
                         "mig_nvidia_smi": STANDIN, "mig_drain_timeout": 30, "mig_gpu_clients_namespace": namespace,
                         "mig_gpu_clients_poll_interval": 1}
            role_vars.update(extra)
            path = tmp_path / "play.yml"
            path.write_text(PLAY % json.dumps(role_vars))
            return run_ansible_playbook(str(path), kubeconfig, args, extra_env={
                "NVIDIA_SMI_STANDIN_CAPTURE": CAPTURE, "NVIDIA_SMI_STANDIN_MIG_STATE": str(state)})

        def object(self):
            return plane.api("GET", "/api/v1/nodes/" + name)

        def pods(self):
            return plane.api("GET", "/api/v1/namespaces/%s/pods" % namespace)["items"]

        def events(self):
            """The role's Events about the node (the node lifecycle controller records its own, RegisteredNode...)."""
            selector = urllib.parse.quote("involvedObject.kind=Node,involvedObject.name=" + name)
            items = plane.api("GET", "/api/v1/namespaces/default/events?fieldSelector=" + selector)["items"]
            return sorted((e for e in items if e.get("reportingComponent") == "gpu_native.fleet.mig"),
                          key=lambda e: e["eventTime"])

        def calls(self):
            path = state.parent / "calls.log"
            if not path.exists():
                return []
            return [json.loads(line) for line in path.read_text().splitlines()]

        def mutating(self):
            return [c for c in self.calls() if any(a in MUTATING for a in c["argv"])]

        def set_state(self, **knobs):
            if not state.exists():  # let the stand-in create its state from the capture
                subprocess.run([sys.executable, STANDIN, "-i", "7", "-mig", "0"], check=True, capture_output=True,
                               env=dict(os.environ, NVIDIA_SMI_STANDIN_CAPTURE=CAPTURE, NVIDIA_SMI_STANDIN_MIG_STATE=str(state)))
                (state.parent / "calls.log").unlink()
            data = json.loads(state.read_text())
            data.update(knobs)
            state.write_text(json.dumps(data))

    try:
        if daemonsets:
            with KubeletStandin(plane, [name]) as kubelet:
                Node.kubelet = kubelet
                yield Node()
        else:
            yield Node()
    finally:
        plane.request("DELETE", "/api/v1/nodes/" + name)
        for path in cleanup:
            plane.request("DELETE", path)
        plane.delete_namespace(namespace)


def test_gpu_operator_daemonsets_are_paused_around_the_change_and_restored(operator_node):
    node = operator_node
    node.api.wait_for("both GPU Operator pods Running on the node", lambda: len(
        [p for p in node.pods() if p["status"].get("phase") == "Running"]) == 2, timeout=120)
    before = sorted(p["metadata"]["name"] for p in node.pods())
    assert len(before) == 2
    result = node.play("balanced")
    assert result.returncode == 0, result.stdout
    events = node.events()
    assert [e["reason"] for e in events] == ["MigConfigCordoned", "MigConfigPending", "MigGpuClientsPaused",
                                             "MigGpuClientsRestored", "MigConfigSuccess"]
    mutating = node.mutating()
    assert _time(events[2]) < mutating[0]["time"] and mutating[-1]["time"] < _time(events[3])
    labels = node.object()["metadata"]["labels"]
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true" and labels["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"
    node.api.wait_for("both GPU Operator pods back", lambda: len(node.pods()) == 2, timeout=60)
    after = sorted(p["metadata"]["name"] for p in node.pods())
    assert len(after) == 2 and not set(after) & set(before)  # both left and came back as new pods
    assert not node.kubelet.errors, node.kubelet.errors


def _time(event):
    from datetime import datetime
    return datetime.strptime(event["eventTime"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def test_apply_cordons_first_labels_pending_then_success_and_uncordons(node):
    result = node.play("balanced")
    assert result.returncode == 0, result.stdout
    obj = node.object()
    assert obj["metadata"]["labels"]["nvidia.com/mig.config"] == "balanced"
    assert obj["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    assert not obj["spec"].get("unschedulable")
    assert not set(MARKS) & set(obj["metadata"].get("annotations", {}))
    events = node.events()
    assert [e["reason"] for e in events] == ["MigConfigCordoned", "MigConfigPending", "MigConfigSuccess"]
    mutating = node.mutating()
    assert [c["argv"] for c in mutating] == [
        ["-i", "0", "-mig", "1"], ["-i", "1", "-mig", "1"],
        ["mig", "-i", "0", "-cgi", "5:0,14:4,19:6", "-C"], ["mig", "-i", "1", "-cgi", "5:0,14:4,19:6", "-C"]]
    assert _time(events[0]) < _time(events[1]) < mutating[0]["time"]       # cordoned and pending before apply
    assert mutating[-1]["time"] < _time(events[2])                         # success after apply
    # idempotent: nothing drifts, nothing is run or written
    before = role_view(obj)
    again = node.play("balanced")
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout
    assert len(node.mutating()) == 4 and role_view(node.object()) == before


def test_relayout_destroys_and_recreates(node):
    assert node.play("balanced").returncode == 0
    result = node.play("all-1g")
    assert result.returncode == 0, result.stdout
    argv = [c["argv"] for c in node.mutating()][4:]
    assert argv == [["mig", "-i", "0", "-dci"], ["mig", "-i", "0", "-dgi"], ["mig", "-i", "1", "-dci"], ["mig", "-i", "1", "-dgi"],
                    ["mig", "-i", "0", "-cgi", "19:0,19:1,19:2,19:3,19:4,19:5,19:6", "-C"],
                    ["mig", "-i", "1", "-cgi", "19:0,19:1,19:2,19:3,19:4,19:5,19:6", "-C"]]
    assert node.object()["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g"


def test_failed_apply_leaves_the_node_cordoned_with_state_failed(node):
    assert node.play("balanced").returncode == 0
    node.set_state(busy=[1])
    result = node.play("all-1g")
    assert result.returncode != 0
    assert "MIG layout all-1g was not applied" in result.stdout
    obj = node.object()
    assert obj["spec"]["unschedulable"] is True
    assert obj["metadata"]["labels"]["nvidia.com/mig.config.state"] == "failed"
    assert obj["metadata"]["labels"]["nvidia.com/mig.config"] == "balanced"           # still the last good one
    reason = obj["metadata"]["annotations"]["gpu-native.io/mig.config.failure-reason"]
    assert "mig -i 1 -dci" in reason and "In use by another client" in reason
    assert node.events()[-1]["reason"] == "MigConfigFailed"
    assert obj["metadata"]["annotations"]["gpu-native.io/cordoned-by"] == "mig"             # the cordon is the role's own
    # fixed and re-run: the role finds its own mark, finishes the job and hands the node back
    node.set_state(busy=[])
    result = node.play("all-1g")
    assert result.returncode == 0, result.stdout
    assert "resumed: already cordoned by mig" in result.stdout
    obj = node.object()
    assert obj["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    assert "gpu-native.io/mig.config.failure-reason" not in obj["metadata"].get("annotations", {})
    assert not obj["spec"].get("unschedulable")
    assert not set(MARKS) & set(obj["metadata"].get("annotations", {}))


def test_apply_marks_the_cordon_as_the_roles_own_while_it_works(node):
    node.set_state(busy=[1])  # the apply fails after the cordon: the mark is left for a re-run to find
    assert node.play("balanced").returncode != 0
    annotations = node.object()["metadata"]["annotations"]
    assert annotations["gpu-native.io/cordoned-by"] == "mig"
    assert set(MARKS) <= set(annotations)


@pytest.mark.parametrize("owner", [None, "onboard"], ids=["admin", "onboard"])
def test_a_node_cordoned_by_someone_else_stays_cordoned_after_the_change(kube_cluster, tmp_path, owner):
    annotations = {"ops.example.com/reason": "RMA"} if owner is None else {
        "gpu-native.io/cordoned-by": owner, "gpu-native.io/cordoned-at": "2026-11-29T08:00:00Z",
        "gpu-native.io/run-id": "onboard-run"}
    cordoned = json.loads(json.dumps(NODE))
    cordoned["spec"]["unschedulable"] = True
    cordoned["metadata"]["annotations"] = annotations
    for node in _node(kube_cluster, tmp_path, cordoned):
        result = node.play("balanced")
        assert result.returncode == 0, result.stdout
        obj = node.object()
        assert obj["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"   # the layout was applied
        assert obj["spec"]["unschedulable"] is True                                   # and the cordon kept
        assert own_annotations(obj) == annotations                                    # with its owner's mark
        holder = "someone outside gpu_native.fleet" if owner is None else owner
        assert "skipped: cordoned by %s" % holder in result.stdout
        assert "kept: cordoned by %s" % holder in result.stdout


def test_invalid_layout_touches_nothing(node):
    result = node.play("two-7g")
    assert result.returncode != 0
    assert "7g.80gb: 2 requested but at most 1 fit" in result.stdout
    obj = node.object()
    assert not obj["spec"].get("unschedulable") and "nvidia.com/mig.config.state" not in obj["metadata"]["labels"]
    assert node.mutating() == [] and node.events() == []


def test_check_mode_changes_nothing(node):
    result = node.play("balanced", "--check")
    assert result.returncode == 0, result.stdout
    assert "%s: cordoned: cordoned by mig" % node.node_name in result.stdout   # says what it would do
    assert node.mutating() == [] and node.events() == []
    obj = node.object()
    assert not obj["spec"].get("unschedulable") and "nvidia.com/mig.config.state" not in obj["metadata"]["labels"]
    assert not set(MARKS) & set(obj["metadata"].get("annotations", {}))


def test_pending_mode_change_is_finished_with_a_reset(node):
    node.set_state(mode_change_needs_reset=True)
    result = node.play("balanced")
    assert result.returncode == 0, result.stdout
    argv = [c["argv"] for c in node.mutating()]
    assert ["-i", "0,1", "-r"] in argv
    assert argv.index(["-i", "0,1", "-r"]) < argv.index(["mig", "-i", "0", "-cgi", "5:0,14:4,19:6", "-C"])


@pytest.mark.parametrize("setting, value, message", [
    ("mig_gpu_clients_poll_interval", 0, "mig_gpu_clients_poll_interval is '0'"),
    ("mig_gpu_clients_timeout", -5, "mig_gpu_clients_timeout is '-5'"),
    # The argument spec (type int) refuses a word before any task runs.
    ("mig_gpu_clients_poll_interval", "often", "argument 'mig_gpu_clients_poll_interval' is of type"),
])
def test_bad_waiting_settings_are_refused_before_anything_is_cordoned_or_paused(operator_node, setting, value, message):
    before = operator_node.object()
    result = operator_node.play("balanced", **{setting: value})
    assert result.returncode != 0
    assert message in result.stdout, result.stdout[-2000:]
    if not isinstance(value, str):
        assert "Fix: set both to a whole number of seconds above 0. Nothing was cordoned or paused." in result.stdout
    after = operator_node.object()
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert not after["spec"].get("unschedulable")
    assert not operator_node.mutating()


@pytest.mark.parametrize("setting, value", [("_gpu_clients_poll_interval", 0), ("_gpu_clients_timeout", -5)])
def test_gpu_clients_pause_refuses_bad_waiting_settings_before_anything_is_paused(operator_node, tmp_path, setting, value):
    playbook = tmp_path / "pause.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: gpu_native.fleet._gpu_clients\n        tasks_from: pause\n"
        "      vars:\n        _gpu_clients_paused_value: paused-for-test\n")
    before = operator_node.object()["metadata"]["labels"]
    result = run_ansible_playbook(str(playbook), operator_node.kubeconfig_path, ["-e", json.dumps(
        {setting: value, "_gpu_clients_node_name": operator_node.node_name})])
    assert result.returncode != 0
    assert "Fix: set both to a whole number of seconds above 0. Nothing was paused." in result.stdout, result.stdout[-2000:]
    assert "%s is '%s'" % (setting, value) in result.stdout
    assert operator_node.object()["metadata"]["labels"] == before


def test_events_go_only_where_the_api_accepts_node_events(node):
    """A real API server refuses an Event with eventTime about a Node outside default and kube-system (422); the
    role's argument spec refuses such a namespace before anything changes."""
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": node.node_name + ".mig-"},
             "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node.node_name},
             "reason": "MigConfigPending", "message": "probe", "type": "Normal", "action": "MigReconfigure",
             "eventTime": "2026-12-02T02:00:00.000000Z", "reportingComponent": "gpu_native.fleet.mig",
             "reportingInstance": "probe", "source": {"component": "gpu_native.fleet.mig"}}
    status, answer = node.api.request("POST", "/api/v1/namespaces/%s/events" % node.gpu_namespace, event)
    assert status == 422 and "does not match event.namespace" in answer["message"], answer
    result = node.play("balanced", mig_events_namespace=node.gpu_namespace)
    assert result.returncode != 0
    assert "value of mig_events_namespace must be one of: default, kube-system" in result.stdout, result.stdout[-2000:]
    obj = node.object()
    assert not obj["spec"].get("unschedulable") and "nvidia.com/mig.config.state" not in obj["metadata"]["labels"]
    assert node.mutating() == [] and node.events() == []


# --- the DRA driver's kubelet plugin, paused with the other GPU clients on a DRA node (issue 29, item 6) -------------
DRA_LABEL = "gpu-native.io/deploy.dra-kubelet-plugin"
DRA_POD_LABELS = {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}
PAUSE_RESUME = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpu_native.fleet._gpu_clients
        tasks_from: pause
      vars:
        _gpu_clients_paused_value: paused-for-test
    - name: What the pause left on the node
      kubernetes.core.k8s_info:
        kind: Pod
        namespace: "{{ dra_namespace }}"
        field_selectors: ["spec.nodeName={{ _gpu_clients_node_name }}"]
      register: pods_while_paused
    - name: Show it
      ansible.builtin.debug:
        msg: "PODS WHILE PAUSED: {{ pods_while_paused.resources | map(attribute='metadata.name') | list | to_json }}"
    - ansible.builtin.include_role:
        name: gpu_native.fleet._gpu_clients
        tasks_from: resume
"""


@pytest.fixture
def dra_plugin_node(kube_cluster, tmp_path):
    """A node labelled for the DRA kubelet plugin, whose DaemonSet (as the driver's chart renders it with
    kubeletPlugin.nodeSelector {gpu-native.io/deploy.dra-kubelet-plugin: "true"}) runs in a namespace of its own."""
    plane = kube_cluster
    name = "gpu-dra-" + secrets.token_hex(3)
    plane.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {DRA_LABEL: "true", "nvidia.com/gpu.deploy.dcgm-exporter": "false"}}})
    operator = plane.create_namespace("gpu-operator-")
    dra = plane.create_namespace("dra-driver-")
    token, cleanup = job_credentials(plane, "upgrades", operator)
    kubeconfig = plane.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=operator, token=token)
    plane.api("POST", "/apis/apps/v1/namespaces/%s/daemonsets" % dra, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "dra-driver-nvidia-gpu-kubelet-plugin"},
        "spec": {"selector": {"matchLabels": DRA_POD_LABELS},
                 "template": {"metadata": {"labels": DRA_POD_LABELS},
                              "spec": {"nodeSelector": {DRA_LABEL: "true"},
                                       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                        "effect": "NoSchedule"}],
                                       "containers": [{"name": "gpus", "image": "registry.invalid/dra:0.4.1"}]}}}})

    def pods():
        return [p for p in plane.api("GET", "/api/v1/namespaces/%s/pods" % dra)["items"]
                if p["spec"].get("nodeName") == name]

    def play(allocation):
        path = tmp_path / "pause_resume.yml"
        path.write_text(PAUSE_RESUME)
        dra_daemonsets = [{"label": DRA_LABEL, "pods": "dra-driver-nvidia-gpu-component=kubelet-plugin",
                           "namespace": dra, "wait": True}]
        return run_ansible_playbook(str(path), kubeconfig, ["-e", json.dumps({
            "_gpu_clients_node_name": name, "_gpu_clients_namespace": operator, "_gpu_clients_poll_interval": 1,
            "_gpu_clients_timeout": 90, "_gpu_clients_host_services": [], "_gpu_clients_readiness_timer": "",
            "_gpu_clients_cdi_spec": "", "gpu_native_allocation": allocation,
            "_gpu_clients_dra_daemonsets": dra_daemonsets, "dra_namespace": dra})])
    try:
        with KubeletStandin(plane, [name]) as kubelet:
            plane.wait_for("the DRA kubelet-plugin pod Running on the node", lambda: [
                p for p in pods() if p["status"].get("phase") == "Running"], timeout=120)
            yield plane, name, pods, play, kubelet
    finally:
        plane.request("DELETE", "/api/v1/nodes/" + name)
        for path in cleanup:
            plane.request("DELETE", path)
        plane.delete_namespace(dra)
        plane.delete_namespace(operator)


def _resume_waited_for(stdout):
    """The items of resume's wait for the plugins to run again (its loop labels: namespace/selector)."""
    header = "Wait for the device plugin (or the DRA kubelet plugin) to run on the node again"
    segment = stdout.split(header, 1)[1].split("TASK [", 1)[0] if header in stdout else ""
    return [line.split("(item=", 1)[1].rstrip(")") for line in segment.splitlines() if "(item=" in line]


def _paused_pods(stdout):
    line = next(line for line in stdout.splitlines() if "PODS WHILE PAUSED: " in line)
    return json.loads(line.split("PODS WHILE PAUSED: ", 1)[1].rstrip('"').replace('\\"', '"'))


def test_the_dra_kubelet_plugin_is_paused_and_resumed_on_a_dra_node(dra_plugin_node):
    plane, name, pods, play, kubelet = dra_plugin_node
    before = [p["metadata"]["name"] for p in pods()]
    assert len(before) == 1
    result = play("dra")
    assert result.returncode == 0, result.stdout[-4000:]
    assert _paused_pods(result.stdout) == [], "pause waited until the kubelet plugin left the node"
    waited = _resume_waited_for(result.stdout)
    assert len(waited) == 1 and waited[0].endswith("/dra-driver-nvidia-gpu-component=kubelet-plugin"), waited
    after = [p for p in pods() if p["status"].get("phase") == "Running"]
    assert len(after) == 1 and after[0]["metadata"]["name"] not in before, "resume waited for a new pod to run"
    assert plane.api("GET", "/api/v1/nodes/" + name)["metadata"]["labels"][DRA_LABEL] == "true"
    selector = urllib.parse.quote("involvedObject.kind=Node,involvedObject.name=" + name)
    reasons = sorted(e["reason"] for e in plane.api(
        "GET", "/api/v1/namespaces/default/events?fieldSelector=" + selector)["items"]
        if e.get("reportingComponent") == "gpu_native.fleet")
    assert reasons == ["GpuClientsPaused", "GpuClientsRestored"], reasons
    assert not kubelet.errors, kubelet.errors


def test_the_dra_kubelet_plugin_is_left_alone_on_a_device_plugin_node(dra_plugin_node):
    plane, name, pods, play, kubelet = dra_plugin_node
    before = [p["metadata"]["name"] for p in pods()]
    result = play("device_plugin")
    assert result.returncode == 0, result.stdout[-4000:]
    assert _paused_pods(result.stdout) == before
    assert _resume_waited_for(result.stdout) == []
    assert [p["metadata"]["name"] for p in pods()] == before


# -- a DRA node: after the change the role waits for NVIDIA's DRA driver to republish the node's ResourceSlices ----

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
BALANCED = [["4g.40gb", "2g.20gb", "1g.10gb"]] * 2 + [None] * 6  # CONFIG["balanced"] per GPU index


def dra_slice(node, generation, layout):
    """The node's one ResourceSlice as the driver publishes it without DynamicMIG (pool = node name): per GPU index
    a full GPU (None) or its MIG devices (profiles), with type, uuid, profile and parentUUID attributes."""
    devices = []
    for index, migs in enumerate(layout):
        parent = "GPU-%08d-0000-0000-0000-000000000000" % index
        if migs is None:
            attributes = {"type": {"string": "gpu"}, "uuid": {"string": parent}}
            devices.append({"name": "gpu-%d" % index, "attributes": attributes})
            continue
        for number, profile in enumerate(migs):
            devices.append({"name": "gpu-%d-mig-%s-%d-%d" % (index, profile.replace(".", ""), number, number),
                            "attributes": {"type": {"string": "mig"}, "profile": {"string": profile},
                                           "uuid": {"string": "MIG-%08d-%04d-0000-0000-000000000000" % (index, number)},
                                           "parentUUID": {"string": parent}}})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": node + "-gpu.nvidia.com-0"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1}}}


class DraDriverStandin:
    """What the DRA driver's kubelet plugin does when it starts on the node: publish the node's slice (here: the
    new layout, at the next generation, `delay` seconds after a kubelet-plugin pod that was not there at the start
    runs). Writes through the real API only; `published_at` is when it did."""

    def __init__(self, plane, node, pods, layout, delay=3.0):
        self.plane, self.node, self.pods, self.layout, self.delay = plane, node, pods, layout, delay
        self.first = set(p["metadata"]["name"] for p in pods())
        self.published_at = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(0.3):
            if any(p["metadata"]["name"] not in self.first and p["status"].get("phase") == "Running"
                   for p in self.pods()):
                time.sleep(self.delay)
                path = "%s/%s-gpu.nvidia.com-0" % (SLICES, self.node)
                current = self.plane.api("GET", path)
                new = dra_slice(self.node, current["spec"]["pool"]["generation"] + 1, self.layout)
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.plane.api("PUT", path, new)
                self.published_at = time.time()
                return

    def close(self):
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def dra_node(kube_cluster, tmp_path):
    seed = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {
        DRA_LABEL: "true", "nvidia.com/gpu.deploy.dcgm-exporter": "false"}}, "spec": {}}
    plugin = daemonset("dra-driver-nvidia-gpu-kubelet-plugin", DRA_LABEL)
    for node in _node(kube_cluster, tmp_path, seed, daemonsets=[plugin]):
        kube_cluster.api("POST", SLICES, dra_slice(node.node_name, 1, [None] * 8))
        try:
            node.api.wait_for("the DRA kubelet-plugin pod Running on the node", lambda: [
                p for p in node.pods() if p["status"].get("phase") == "Running"], timeout=120)
            yield node
        finally:
            kube_cluster.request("DELETE", "%s/%s-gpu.nvidia.com-0" % (SLICES, node.node_name))


def test_on_a_dra_node_the_role_hands_back_only_once_the_slices_show_the_new_layout(dra_node):
    node = dra_node
    driver = DraDriverStandin(node.api, node.node_name, node.pods, BALANCED)
    try:
        result = node.play("balanced", gpu_native_allocation="dra", _gpu_clients_dra_daemonsets=[
            {"label": DRA_LABEL, "pods": "app=dra-driver-nvidia-gpu-kubelet-plugin",
             "namespace": node.gpu_namespace, "wait": True}])
    finally:
        driver.close()
    assert result.returncode == 0, result.stdout[-4000:]
    assert driver.published_at is not None, "the kubelet plugin never ran again"
    wait = result.stdout.split("Wait for the node's ResourceSlices to publish the new layout's devices (DRA)", 1)
    assert len(wait) == 2 and wait[1].split("TASK [", 1)[0].strip().splitlines()[-1].startswith("ok:"), \
        result.stdout[-4000:]
    success = [e for e in node.events() if e["reason"] == "MigConfigSuccess"]
    assert success and _time(success[0]) > driver.published_at, "handed back before the driver republished"
    assert not node.object()["spec"].get("unschedulable")
    assert not node.kubelet.errors, node.kubelet.errors
