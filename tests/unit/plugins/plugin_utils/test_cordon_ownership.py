"""Cordon ownership: every branch of take and release, and the bad inputs (plugin_utils/cordon_ownership.py)."""
import copy

import pytest

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import cordon_ownership as co

NOW = "2026-11-30T12:00:00Z"
OWNER, TIME, RUN = co.OWNER_ANNOTATION, co.TIME_ANNOTATION, co.RUN_ID_ANNOTATION
REGISTRATION = {"key": "gpu-native.io/unvalidated", "effect": "NoSchedule"}


def node(unschedulable=False, annotations=None, taints=None, name="gpu-1"):
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"team": "ml"}}, "spec": {}}
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    if taints is not None:
        obj["spec"]["taints"] = taints
    return obj


def mark(owner, run="run-1", at="2026-11-29T08:00:00Z"):
    return {OWNER: owner, TIME: at, RUN: run, "ops.example.com/ticket": "T-1"}


def take(obj, owner="preflight", run_id="run-2", **kwargs):
    before = copy.deepcopy(obj)
    state, patch = co.decide_take(obj, owner, run_id, NOW, **kwargs)
    assert obj == before  # the decision never changes its input
    assert set(state) == {"node", "owned", "action", "holder", "reason", "was_unschedulable", "previous_run_id"}
    assert state["action"] in co.ACTIONS
    assert "\n" not in state["reason"]
    return state, patch


FULL_MARK = {OWNER: "preflight", TIME: NOW, RUN: "run-2"}


def test_schedulable_node_is_cordoned_and_marked():
    state, patch = take(node())
    assert state == {"node": "gpu-1", "owned": True, "action": "cordoned", "holder": "preflight",
                     "reason": "cordoned by preflight (run run-2)", "was_unschedulable": False,
                     "previous_run_id": None}
    assert patch == {"metadata": {"annotations": FULL_MARK}, "spec": {"unschedulable": True}}


def test_schedulable_node_with_a_stale_mark_is_cordoned_and_the_mark_replaced():
    state, patch = take(node(annotations=mark("mig", run="old")))
    assert state["action"] == "cordoned" and state["owned"] and state["previous_run_id"] == "old"
    assert "stale mark of mig (run old, since 2026-11-29T08:00:00Z) was replaced" in state["reason"]
    assert patch == {"metadata": {"annotations": FULL_MARK}, "spec": {"unschedulable": True}}


def test_own_mark_from_an_earlier_run_is_resumed_and_the_run_id_moves_on():
    state, patch = take(node(True, mark("preflight", run="crashed-run")))
    assert state["action"] == "resumed" and state["owned"] and state["holder"] == "preflight"
    assert state["was_unschedulable"] is True and state["previous_run_id"] == "crashed-run"
    assert "an earlier run stopped before handing the node back; run run-2 finishes the job" in state["reason"]
    # the time of the original cordon stays: how long the node has been out
    assert patch == {"metadata": {"annotations": {RUN: "run-2"}}}


def test_own_mark_from_this_run_changes_nothing():
    state, patch = take(node(True, mark("preflight", run="run-2")))
    assert state["action"] == "resumed" and state["owned"]
    assert state["reason"] == "already cordoned by preflight in this run (run run-2)"
    assert patch is None


def test_unmarked_registering_node_is_adopted():
    state, patch = take(node(True, {}, [REGISTRATION, {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]))
    assert state["action"] == "adopted" and state["owned"] and state["holder"] == "preflight"
    assert "registered with the taint gpu-native.io/unvalidated" in state["reason"]
    assert patch == {"metadata": {"annotations": FULL_MARK}}


def test_registering_node_is_not_adopted_when_adoption_is_off():
    state, patch = take(node(True, {}, [REGISTRATION]), adopt_registration_taint=False)
    assert state["action"] == "skipped" and not state["owned"] and patch is None


def test_registering_node_with_a_foreign_mark_is_not_adopted():
    state, patch = take(node(True, mark("mig"), [REGISTRATION]))
    assert state["action"] == "skipped" and state["holder"] == "mig" and patch is None


def test_registration_taint_key_is_configurable():
    state, _patch = take(node(True, {}, [{"key": "example.com/new", "effect": "NoSchedule"}]),
                         registration_taint_key="example.com/new")
    assert state["action"] == "adopted"
    state, _patch = take(node(True, {}, [REGISTRATION]), registration_taint_key="example.com/new")
    assert state["action"] == "skipped"


def test_admin_cordon_is_skipped_with_the_reason():
    state, patch = take(node(True, {"ops.example.com/reason": "RMA"}))
    assert state == {"node": "gpu-1", "owned": False, "action": "skipped", "holder": co.OUTSIDE,
                     "was_unschedulable": True, "previous_run_id": None,
                     "reason": "cordoned by someone outside gpu_native.fleet, not by preflight: left alone and never "
                               "uncordoned by this run (set _node_cordon_take_over=true to take it over)"}
    assert patch is None


def test_another_owners_cordon_is_skipped_and_names_that_owner():
    state, patch = take(node(True, mark("mig", run="r7")), owner="driver_upgrade")
    assert state["action"] == "skipped" and state["holder"] == "mig" and state["previous_run_id"] == "r7"
    assert state["reason"].startswith("cordoned by mig (run r7, since 2026-11-29T08:00:00Z), not by driver_upgrade")
    assert patch is None


def test_take_over_of_an_admin_cordon():
    state, patch = take(node(True, {"ops.example.com/reason": "RMA"}), take_over=True)
    assert state["action"] == "taken_over" and state["owned"] and state["holder"] == "preflight"
    assert state["reason"] == ("cordoned by someone outside gpu_native.fleet; taken over by preflight (run run-2) "
                               "as asked")
    assert patch == {"metadata": {"annotations": FULL_MARK}}


def test_take_over_of_another_owners_cordon():
    state, patch = take(node(True, mark("mig")), take_over=True)
    assert state["action"] == "taken_over" and "cordoned by mig (run run-1" in state["reason"]
    assert patch == {"metadata": {"annotations": FULL_MARK}}


@pytest.mark.parametrize("take_over", [False, True])
def test_another_owner_of_this_same_run_is_never_taken_over(take_over):
    # onboard.yml cordons as onboard, then runs the mig role in the same run: mig must leave the cordon to onboard
    state, patch = take(node(True, mark("onboard", run="run-2")), owner="mig", take_over=take_over)
    assert state["action"] == "skipped" and not state["owned"] and state["holder"] == "onboard"
    assert state["reason"] == ("cordoned by onboard in this same run (run run-2): onboard hands the node back, "
                               "mig leaves it cordoned")
    assert patch is None


def test_take_over_does_not_change_an_uncordoned_or_own_node():
    assert take(node(), take_over=True)[0]["action"] == "cordoned"
    assert take(node(True, mark("preflight")), take_over=True)[0]["action"] == "resumed"


def test_custom_annotation_keys_are_used_for_reading_and_writing():
    keys = co.annotation_keys(owner="example.com/by", time="example.com/at", run_id="example.com/run")
    state, patch = co.decide_take(node(True, {"example.com/by": "mig", "example.com/run": "r1"}), "mig", "r2", NOW,
                                  keys=keys)
    assert state["action"] == "resumed" and patch == {"metadata": {"annotations": {"example.com/run": "r2"}}}
    # the default keys are not ours any more: a node marked with them is someone else's
    state, patch = co.decide_take(node(True, mark("mig")), "mig", "r2", NOW, keys=keys)
    assert state["action"] == "skipped" and patch is None


def test_long_annotation_values_are_cut_in_the_reason():
    state, _patch = take(node(True, {OWNER: "x" * 5000}))
    assert state["holder"] == "x" * 120 + "..." and len(state["reason"]) < 400


# release


def release(obj, owner="preflight"):
    before = copy.deepcopy(obj)
    released, patch = co.decide_release(obj, owner)
    assert obj == before
    assert set(released) == {"node", "released", "reason"}
    return released, patch


NO_MARK = {OWNER: None, TIME: None, RUN: None}


def test_release_uncordons_the_owners_node_and_removes_the_mark():
    released, patch = release(node(True, mark("preflight")))
    assert released == {"node": "gpu-1", "released": True,
                        "reason": "uncordoned: it carried the mark of preflight (run run-1, since "
                                  "2026-11-29T08:00:00Z), now removed"}
    assert patch == {"metadata": {"annotations": NO_MARK}, "spec": {"unschedulable": False}}


def test_release_of_an_already_schedulable_own_node_only_removes_the_mark():
    released, patch = release(node(False, mark("preflight")))
    assert released["released"] is True and "already schedulable" in released["reason"]
    assert patch == {"metadata": {"annotations": NO_MARK}}


def test_release_never_uncordons_a_foreign_mark():
    released, patch = release(node(True, mark("onboard")), owner="mig")
    assert released["released"] is False and patch is None
    assert released["reason"].startswith("cordoned by onboard (run run-1")


def test_release_never_uncordons_an_admin_cordon():
    released, patch = release(node(True, {"ops.example.com/reason": "RMA"}))
    assert released == {"node": "gpu-1", "released": False,
                        "reason": "cordoned by someone outside gpu_native.fleet, not by preflight: left cordoned"}
    assert patch is None


def test_release_leaves_a_registering_unmarked_node_alone():
    released, patch = release(node(True, {}, [REGISTRATION]))
    assert released["released"] is False and patch is None


def test_release_of_a_schedulable_node_with_a_foreign_mark_changes_nothing():
    released, patch = release(node(False, mark("mig")))
    assert released["released"] is False and "mark on it is mig's" in released["reason"] and patch is None


def test_release_of_a_schedulable_unmarked_node_changes_nothing():
    assert release(node()) == ({"node": "gpu-1", "released": False, "reason": "not cordoned: nothing to hand back"},
                               None)


def test_take_then_release_round_trip_is_idempotent():
    obj = node()
    _state, patch = take(obj)
    obj["spec"].update(patch["spec"])
    obj["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
    state, again = take(obj)
    assert state["action"] == "resumed" and again is None
    _released, patch = release(obj)
    obj["spec"].update(patch["spec"])
    for key, value in patch["metadata"]["annotations"].items():
        assert value is None
        obj["metadata"]["annotations"].pop(key)
    assert release(obj)[1] is None and take(obj)[0]["action"] == "cordoned"


# bad input: a clear error, never a guess


@pytest.mark.parametrize("obj, message", [
    (None, "expected a Node object (a mapping), got null"),
    ("gpu-1", "expected a Node object (a mapping), got a string"),
    ([], "expected a Node object (a mapping), got a list"),
    ({"metadata": {}}, "has no metadata.name"),
    ({"metadata": "x"}, "metadata or spec is not a mapping"),
    ({"metadata": {"name": "n", "annotations": ["a"]}}, "node n: metadata.annotations is not a mapping"),
    ({"metadata": {"name": "n"}, "spec": {"taints": "x"}}, "node n: spec.taints is not a list"),
])
def test_bad_node_objects_are_refused(obj, message):
    with pytest.raises(co.CordonError, match="Fix: ") as info:
        co.decide_take(obj, "preflight", "r", NOW)
    assert message in str(info.value)
    with pytest.raises(co.CordonError, match=message.replace("(", r"\(").replace(")", r"\)")):
        co.decide_release(obj, "preflight")


@pytest.mark.parametrize("owner", ["", "-mig", "mig-", "a b", "x" * 64, None, 7, "mig\n"])
def test_bad_owners_are_refused(owner):
    with pytest.raises(co.CordonError, match="is not a short name.*Fix: name the role"):
        co.decide_take(node(), owner, "r", NOW)
    with pytest.raises(co.CordonError, match="is not a short name"):
        co.decide_release(node(), owner)


@pytest.mark.parametrize("run_id", ["", "a b", "x" * 129, None, "r\n"])
def test_bad_run_ids_are_refused(run_id):
    with pytest.raises(co.CordonError, match="the run id .* Fix: leave _node_cordon_run_id unset"):
        co.decide_take(node(), "preflight", run_id, NOW)


def test_missing_time_is_refused():
    with pytest.raises(co.CordonError, match="no time given"):
        co.decide_take(node(), "preflight", "r", "")


@pytest.mark.parametrize("kwargs, message", [
    ({"owner": ""}, "the owner annotation key '' is empty"),
    ({"time": "a/b/c"}, "the time annotation key 'a/b/c' has more than one '/'"),
    ({"run_id": "Example.com/run"}, "has an invalid prefix 'Example.com'"),
    ({"run_id": "example.com/-run"}, "has an invalid name part '-run'"),
    ({"owner": "example.com/" + "x" * 64}, "has an invalid name part"),
    ({"time": co.OWNER_ANNOTATION}, "must differ"),
])
def test_bad_annotation_keys_are_refused(kwargs, message):
    with pytest.raises(co.CordonError, match="Fix: ") as info:
        co.annotation_keys(**kwargs)
    assert message in str(info.value)


def _node(unschedulable=False, labels=None, taints=None):
    return {"metadata": {"name": "gpu-1", "labels": labels if labels is not None else {"gpu-native.io/preflight": "passed"}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []}}


def test_is_joined_is_the_one_definition():
    from ansible_collections.gpu_native.fleet.plugins.plugin_utils.cordon_ownership import is_joined, CordonError
    assert is_joined(_node()) is True
    assert is_joined(_node(unschedulable=True)) is False
    assert is_joined(_node(labels={"gpu-native.io/preflight": "failed"})) is False
    assert is_joined(_node(labels={})) is False
    assert is_joined(_node(taints=[{"key": "gpu-native.io/unvalidated", "effect": "NoSchedule"}])) is False
    assert is_joined(_node(taints=[{"key": "gpu-native.io/unvalidated"}]), registration_taint_key="") is True
    assert is_joined(_node(labels={"x/y": "passed"}), label_key="x/y") is True
    with pytest.raises(CordonError):
        is_joined(_node(), label_key="bad key")
    with pytest.raises(CordonError):
        is_joined("gpu-1")
