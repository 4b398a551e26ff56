# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_cordon role (take.yml, release.yml) against the Kubernetes API stand-in, one simulated host per case.

Each host takes its node's cordon, records node_cordon_state, then releases it and records node_cordon_released.
"""
import json
import re
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from standin_helpers import api_get, run_ansible_playbook, start_k8s_standin  # noqa: E402

MARK = "gpu-native.io/cordoned-by"
MARKS = (MARK, "gpu-native.io/cordoned-at", "gpu-native.io/run-id")
PLAY = """
- hosts: all:!localhost
  gather_facts: false
  tasks:
    - name: Take
      ansible.builtin.include_role:
        name: gpu_native.fleet.node_cordon
        tasks_from: take.yml
    - name: Record the state
      ansible.builtin.copy:
        content: "{{ node_cordon_state | to_json }}"
        dest: "%(out)s/{{ inventory_hostname }}.take.json"
        mode: "0644"
      delegate_to: localhost
      check_mode: false
    - name: Release
      ansible.builtin.include_role:
        name: gpu_native.fleet.node_cordon
        tasks_from: release.yml
    - name: Record the release
      ansible.builtin.copy:
        content: "{{ node_cordon_released | to_json }}"
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


CASES = {
    "fresh": (node("fresh"), {}),
    "admin": (node("admin", True, {"ops.example.com/reason": "RMA"}), {}),
    "takeover": (node("takeover", True, {"ops.example.com/reason": "RMA"}), {"node_cordon_take_over": True}),
    "crashed": (node("crashed", True, our_mark("driver_upgrade", "old-run-1")), {}),
    "foreign": (node("foreign", True, our_mark("mig", "mig-run")), {}),
    "registering": (node("registering", True, taints=[{"key": "gpu-native.io/unvalidated", "effect": "NoSchedule"}]),
                    {}),
}


class Run(object):
    def __init__(self, tmp_path, cases, *args):
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.server, kubeconfig = start_k8s_standin(tmp_path, [spec[0] for spec in cases.values()])
        inventory = {"all": {"hosts": dict(
            (case, dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                         "node_cordon_node_name": spec[0]["metadata"]["name"], "node_cordon_owner": "driver_upgrade",
                         "node_cordon_run_id": "run-2"}, **spec[1]))
            for case, spec in cases.items())}}
        (tmp_path / "inventory.json").write_text(json.dumps(inventory))
        (tmp_path / "play.yml").write_text(PLAY % {"out": self.out})
        self.before = dict((case, self.node(case)) for case in cases)
        self.result = run_ansible_playbook(str(tmp_path / "play.yml"), kubeconfig,
                                           ["-i", str(tmp_path / "inventory.json"), "--forks", "6"] + list(args))

    def node(self, name):
        return api_get(self.server, "/api/v1/nodes/" + name)

    def take(self, case):
        return json.loads((self.out / (case + ".take.json")).read_text())

    def release(self, case):
        return json.loads((self.out / (case + ".release.json")).read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    result = Run(tmp_path_factory.mktemp("cordon"), CASES)
    yield result
    result.server.stop()


def test_the_run_succeeds(run):
    assert run.result.returncode == 0, run.result.stdout[-4000:]


def test_a_schedulable_node_is_cordoned_with_the_mark_and_handed_back(run):
    assert run.take("fresh") == {"node": "fresh", "owned": True, "action": "cordoned", "holder": "driver_upgrade",
                                 "reason": "cordoned by driver_upgrade (run run-2)", "was_unschedulable": False,
                                 "previous_run_id": None}
    assert run.release("fresh")["released"] is True
    obj = run.node("fresh")
    assert not obj["spec"].get("unschedulable")
    assert not set(MARKS) & set(obj["metadata"].get("annotations", {}))


def test_an_admin_cordoned_node_is_skipped_with_the_reason_and_stays_cordoned(run):
    state = run.take("admin")
    assert state["action"] == "skipped" and state["owned"] is False
    assert state["holder"] == "someone outside gpu_native.fleet"
    assert "set node_cordon_take_over=true to take it over" in state["reason"]
    assert "admin: skipped: cordoned by someone outside gpu_native.fleet" in run.result.stdout
    assert run.release("admin")["released"] is False
    obj = run.node("admin")
    assert obj["spec"]["unschedulable"] is True
    assert obj["metadata"]["annotations"] == {"ops.example.com/reason": "RMA"}


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
    assert run.node("foreign")["metadata"]["annotations"] == our_mark("mig", "mig-run")


def test_a_registering_node_is_adopted_and_released_with_its_taint_kept(run):
    assert run.take("registering")["action"] == "adopted"
    assert run.release("registering")["released"] is True
    obj = run.node("registering")
    assert not obj["spec"].get("unschedulable")
    assert [t["key"] for t in obj["spec"]["taints"]] == ["gpu-native.io/unvalidated"]  # the caller's to remove


def test_check_mode_reports_and_changes_nothing(tmp_path):
    run = Run(tmp_path, CASES, "--check")
    try:
        assert run.result.returncode == 0, run.result.stdout[-4000:]
        assert run.take("fresh")["action"] == "cordoned" and run.take("admin")["action"] == "skipped"
        assert run.take("crashed")["action"] == "resumed" and run.take("takeover")["action"] == "taken_over"
        for case in CASES:
            assert run.node(case)["metadata"]["resourceVersion"] == run.before[case]["metadata"]["resourceVersion"]
    finally:
        run.server.stop()


def test_a_second_run_changes_nothing_on_a_held_node(tmp_path):
    cases = {"held": (node("held", True, our_mark("driver_upgrade", "run-2")), {})}
    run = Run(tmp_path, cases)
    try:
        assert run.result.returncode == 0, run.result.stdout[-4000:]
        state = run.take("held")
        assert state["action"] == "resumed" and state["reason"] == "already cordoned by driver_upgrade in this run (run run-2)"
        # the take patched nothing; only the release did
        assert re.search(r"Cordon and mark node held\] \*+\nskipping: \[held\]", run.result.stdout), run.result.stdout
    finally:
        run.server.stop()


def test_a_node_the_api_does_not_know_fails_with_the_fix(tmp_path):
    cases = {"ghost": (node("ghost"), {"node_cordon_node_name": "no-such-node"})}
    run = Run(tmp_path, cases)
    try:
        assert run.result.returncode != 0
        assert "Node no-such-node is not in the cluster, so driver_upgrade cannot cordon it. Fix:" in \
            " ".join(run.result.stdout.split())
    finally:
        run.server.stop()
