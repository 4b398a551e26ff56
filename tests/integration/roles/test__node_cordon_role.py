# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_node_cordon role (take.yml, release.yml) against the real Kubernetes control plane, one simulated host per case.

Each host takes its node's cordon, records _node_cordon_state, then releases it and records _node_cordon_released.
The control plane is the shared upstream one (tests/kube_cluster.py); the Nodes are created through its API with
names of this run, and the role runs with the token of the upgrades job's ServiceAccount (rbac/upgrades.yml), not
as admin, so a verb the shipped ClusterRole lacks fails here.

Where these tests ran on the Kubernetes API stand-in, two of their beliefs were the stand-in's: a Node carries only
the annotations and taints it was given (a real control plane adds `node.alpha.kubernetes.io/ttl` (TTL controller)
and `node.kubernetes.io/not-ready` / `unschedulable` / `unreachable` taints (admission and the node lifecycle
controller)), and "nothing changed" can be read off the node's resourceVersion (those controllers write to it;
`role_view` compares what the role could change).
"""
import json
import re
import secrets
import sys

import pytest

from kube_cluster import job_credentials
from testlib import run_ansible_playbook

MARK = "gpu-native.io/cordoned-by"
MARKS = (MARK, "gpu-native.io/cordoned-at", "gpu-native.io/run-id")
PLAY = """
- hosts: all:!localhost
  gather_facts: false
  tasks:
    - name: Take
      ansible.builtin.include_role:
        name: gpu_native.fleet._node_cordon
        tasks_from: take.yml
    - name: Record the state
      ansible.builtin.copy:
        content: "{{ _node_cordon_state | to_json }}"
        dest: "%(out)s/{{ inventory_hostname }}.take.json"
        mode: "0644"
      delegate_to: localhost
      check_mode: false
    - name: Release
      ansible.builtin.include_role:
        name: gpu_native.fleet._node_cordon
        tasks_from: release.yml
    - name: Record the release
      ansible.builtin.copy:
        content: "{{ _node_cordon_released | to_json }}"
        dest: "%(out)s/{{ inventory_hostname }}.release.json"
        mode: "0644"
      delegate_to: localhost
      check_mode: false
"""


def node(name, unschedulable=False, annotations=None, taints=None):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"team": "ml"}, "annotations": annotations or {}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []}}


def our_mark(owner, run_id):
    return {MARK: owner, "gpu-native.io/cordoned-at": "2026-11-29T08:00:00Z", "gpu-native.io/run-id": run_id}


def own_annotations(obj):
    """The node's annotations without the control plane's own (node.alpha.kubernetes.io/ttl of the TTL controller)."""
    return {key: value for key, value in obj["metadata"].get("annotations", {}).items()
            if not key.startswith("node.alpha.kubernetes.io/")}


def own_taints(obj):
    """The node's taints without those the control plane manages (node.kubernetes.io/not-ready, unschedulable, ...)."""
    return [t for t in obj["spec"].get("taints", []) if not t["key"].startswith("node.kubernetes.io/")]


def role_view(obj):
    """What the role could change on a node: unschedulable, labels, annotations (the control plane's left out)."""
    return (bool(obj["spec"].get("unschedulable")), obj["metadata"].get("labels"), own_annotations(obj))


CASES = {
    "fresh": (node("fresh"), {}),
    "admin": (node("admin", True, {"ops.example.com/reason": "RMA"}), {}),
    "takeover": (node("takeover", True, {"ops.example.com/reason": "RMA"}), {"_node_cordon_take_over": True}),
    "crashed": (node("crashed", True, our_mark("driver_upgrade", "old-run-1")), {}),
    "foreign": (node("foreign", True, our_mark("mig", "mig-run")), {}),
    "registering": (node("registering", True, taints=[{"key": "gpu-native.io/unvalidated", "effect": "NoSchedule"}]),
                    {}),
}


class Run(object):
    """Create the cases' Nodes (named <case>-<suffix>), run the play as the upgrades job, keep the results."""

    def __init__(self, plane, tmp_path, cases, *args, job="upgrades"):
        self.plane = plane
        self.suffix = secrets.token_hex(3)
        self.names = {case: "%s-%s" % (case, self.suffix) for case in cases}
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.namespace = plane.create_namespace("cordon-")
        self.cleanup = []
        try:
            for case, spec in cases.items():
                obj = json.loads(json.dumps(spec[0]))
                obj["metadata"]["name"] = self.names[case]
                plane.api("POST", "/api/v1/nodes", obj)
            token, self.cleanup = job_credentials(plane, job, self.namespace)
            kubeconfig = plane.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=self.namespace, token=token)
            inventory = {"all": {"hosts": dict(
                (case, dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                             "_node_cordon_node_name": self.names[case], "_node_cordon_owner": "driver_upgrade",
                             "_node_cordon_run_id": "run-2"}, **spec[1]))
                for case, spec in cases.items())}}
            (tmp_path / "inventory.json").write_text(json.dumps(inventory))
            (tmp_path / "play.yml").write_text(PLAY % {"out": self.out})
            self.before = dict((case, self.node(case)) for case in cases)
            self.result = run_ansible_playbook(str(tmp_path / "play.yml"), kubeconfig,
                                               ["-i", str(tmp_path / "inventory.json"), "--forks", "6"] + list(args))
        except BaseException:
            self.close()
            raise

    def node(self, case):
        return self.plane.api("GET", "/api/v1/nodes/" + self.names[case])

    def take(self, case):
        return json.loads((self.out / (case + ".take.json")).read_text())

    def release(self, case):
        return json.loads((self.out / (case + ".release.json")).read_text())

    def close(self):
        for name in self.names.values():
            self.plane.request("DELETE", "/api/v1/nodes/" + name)
        for path in self.cleanup:
            self.plane.request("DELETE", path)
        self.plane.delete_namespace(self.namespace)


@pytest.fixture(scope="module")
def run(kube_cluster, tmp_path_factory):
    result = Run(kube_cluster, tmp_path_factory.mktemp("cordon"), CASES)
    yield result
    result.close()


def flat(text):
    return " ".join(text.split())


def test_the_run_succeeds(run):
    assert run.result.returncode == 0, run.result.stdout[-4000:]


def test_a_schedulable_node_is_cordoned_with_the_mark_and_handed_back(run):
    assert run.take("fresh") == {"node": run.names["fresh"], "owned": True, "action": "cordoned",
                                 "holder": "driver_upgrade", "reason": "cordoned by driver_upgrade (run run-2)",
                                 "was_unschedulable": False, "previous_run_id": None}
    assert run.release("fresh")["released"] is True
    obj = run.node("fresh")
    assert not obj["spec"].get("unschedulable")
    assert not set(MARKS) & set(obj["metadata"].get("annotations", {}))


def test_an_admin_cordoned_node_is_skipped_with_the_reason_and_stays_cordoned(run):
    state = run.take("admin")
    assert state["action"] == "skipped" and state["owned"] is False
    assert state["holder"] == "someone outside gpu_native.fleet"
    assert "set _node_cordon_take_over=true to take it over" in state["reason"]
    assert "%s: skipped: cordoned by someone outside gpu_native.fleet" % run.names["admin"] in run.result.stdout
    assert run.release("admin")["released"] is False
    obj = run.node("admin")
    assert obj["spec"]["unschedulable"] is True
    assert own_annotations(obj) == {"ops.example.com/reason": "RMA"}


def test_take_over_is_opt_in_and_then_hands_the_node_back(run):
    assert run.take("takeover")["action"] == "taken_over"
    assert run.release("takeover")["released"] is True
    assert not run.node("takeover")["spec"].get("unschedulable")


def test_a_run_killed_after_cordoning_is_resumed_and_finished(run):
    state = run.take("crashed")
    assert state["action"] == "resumed" and state["owned"] and state["previous_run_id"] == "old-run-1"
    assert "an earlier run stopped before handing the node back; run run-2 finishes the job" in state["reason"]
    assert run.release("crashed")["released"] is True
    obj = run.node("crashed")
    assert not obj["spec"].get("unschedulable") and not set(MARKS) & set(obj["metadata"]["annotations"])


def test_release_never_uncordons_another_owners_mark(run):
    state = run.take("foreign")
    assert state["action"] == "skipped" and state["holder"] == "mig"
    released = run.release("foreign")
    assert released["released"] is False and "cordoned by mig (run mig-run" in released["reason"]
    assert run.node("foreign")["spec"]["unschedulable"] is True
    assert own_annotations(run.node("foreign")) == our_mark("mig", "mig-run")


def test_a_registering_node_is_adopted_and_released_with_its_taint_kept(run):
    assert run.take("registering")["action"] == "adopted"
    assert run.release("registering")["released"] is True
    obj = run.node("registering")
    assert not obj["spec"].get("unschedulable")
    assert [t["key"] for t in own_taints(obj)] == ["gpu-native.io/unvalidated"]  # the caller's to remove


def test_check_mode_reports_and_changes_nothing(kube_cluster, tmp_path):
    run = Run(kube_cluster, tmp_path, CASES, "--check", job="onboarding")
    try:
        assert run.result.returncode == 0, run.result.stdout[-4000:]
        assert run.take("fresh")["action"] == "cordoned" and run.take("admin")["action"] == "skipped"
        assert run.take("crashed")["action"] == "resumed" and run.take("takeover")["action"] == "taken_over"
        for case in CASES:
            assert role_view(run.node(case)) == role_view(run.before[case]), case
    finally:
        run.close()


def test_a_second_run_changes_nothing_on_a_held_node(kube_cluster, tmp_path):
    cases = {"held": (node("held", True, our_mark("driver_upgrade", "run-2")), {})}
    run = Run(kube_cluster, tmp_path, cases)
    try:
        assert run.result.returncode == 0, run.result.stdout[-4000:]
        state = run.take("held")
        assert state["action"] == "resumed" and state["reason"] == "already cordoned by driver_upgrade in this run (run run-2)"
        # the take patched nothing; only the release did
        assert re.search(r"Cordon and mark node %s\] \*+\nskipping: \[held\]" % run.names["held"], run.result.stdout), \
            run.result.stdout
    finally:
        run.close()


def test_a_node_the_api_does_not_know_fails_with_the_fix(kube_cluster, tmp_path):
    cases = {"ghost": (node("ghost"), {"_node_cordon_node_name": "no-such-node"})}
    run = Run(kube_cluster, tmp_path, cases)
    try:
        assert run.result.returncode != 0
        assert "Node no-such-node is not in the cluster, so driver_upgrade cannot cordon it. Fix:" in \
            flat(run.result.stdout)
    finally:
        run.close()


def test_the_job_without_patch_on_nodes_is_refused_and_the_node_is_unchanged(kube_cluster, tmp_path):
    """The compliance job's role is read-only: the cordon fails with the API's 403 and changes nothing."""
    cases = {"fresh": (node("fresh"), {})}
    run = Run(kube_cluster, tmp_path, cases, job="compliance")
    try:
        assert run.result.returncode != 0
        assert re.search(r'nodes \\*"%s\\*" is forbidden: User \\*"system:serviceaccount:%s:gpu-native-compliance'
                         r'\\*" cannot patch resource \\*"nodes\\*"' % (run.names["fresh"], run.namespace),
                         run.result.stdout), run.result.stdout[-3000:]
        assert role_view(run.node("fresh")) == role_view(run.before["fresh"])
    finally:
        run.close()
