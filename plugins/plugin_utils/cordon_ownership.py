# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""Cordon ownership: who holds a node's cordon, and what taking or releasing it changes.

Every role and playbook of the collection that cordons a node (preflight,
onboard.yml, mig, driver_upgrade...) records that on the node: three
annotations name the owner (``gpu-native.io/cordoned-by``), the time
(``gpu-native.io/cordoned-at``) and the run (``gpu-native.io/run-id``).  The
collection only ever uncordons a node that carries the releasing owner's own
mark, so a node an admin drained stays drained.

Public API
----------
``decide_take(node, owner, run_id, now, take_over=False, adopt_registration_taint=True,
registration_taint_key=..., keys=None)`` -> ``(state, patch)``:
``state`` is ``{node, owned, action, holder, reason, was_unschedulable, previous_run_id}``
with ``action`` one of ``cordoned`` (schedulable node, cordoned now),
``resumed`` (the node already carries this owner's mark: an earlier run
stopped before handing it back, or this run took it already), ``adopted``
(an unmarked node that registered with the registration taint),
``taken_over`` (cordoned by someone else, ``take_over`` asked for it) or
``skipped`` (cordoned by someone else, or by another owner in this same
run, which is never taken over; the caller leaves it alone).
``patch`` is the Node patch to apply (``None``: nothing to change).

``decide_release(node, owner, keys=None)`` -> ``(released, patch)``:
``released`` is ``{node, released, reason}``; the node is uncordoned only
when it carries ``owner``'s mark, and the mark is removed then.

``is_joined(node, label_key=JOINED_LABEL, registration_taint_key=...)`` -> bool: the one answer to "has this
node joined?": schedulable, labelled ``<label_key>=passed`` by a preflight, and without the registration taint.

``annotation_keys(owner=..., time=..., run_id=...)`` checks the three
annotation keys.  Every error is a ``CordonError`` with a one-line cause
and its fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from collections.abc import Mapping

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

OWNER_ANNOTATION = "gpu-native.io/cordoned-by"
TIME_ANNOTATION = "gpu-native.io/cordoned-at"
RUN_ID_ANNOTATION = "gpu-native.io/run-id"
REGISTRATION_TAINT_KEY = "gpu-native.io/unvalidated"
#: The label a passed preflight writes (roles/preflight, preflight_label_key).
JOINED_LABEL = "gpu-native.io/preflight"
OUTSIDE = "someone outside gpu_native.fleet"
ACTIONS = ("cordoned", "resumed", "adopted", "taken_over", "skipped")

# An owner is a short word (it is shown in messages and compared exactly); a
# run id is an AWX job id, a timestamp or any short printable token.
_OWNER_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9_.:+-]{1,128}\Z")
# apimachinery IsQualifiedName: optional DNS-subdomain prefix, then a name of at most 63 characters.
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
# Annotation values the decision quotes in a reason are cut to this length.
_SHOW = 120


class CordonError(FleetError, ValueError):
    """Bad input to a cordon decision; the message names the fix."""


def _qualified_name_problem(key):
    if not isinstance(key, str) or not key:
        return "is empty"
    if key.count("/") > 1:
        return "has more than one '/'"
    prefix, _sep, name = key.rpartition("/")
    if _sep and (not prefix or len(prefix) > 253 or not _PREFIX_RE.match(prefix)):
        return "has an invalid prefix %r (a lowercase DNS subdomain)" % prefix[:_SHOW]
    if len(name) > 63 or not _NAME_RE.match(name):
        return "has an invalid name part %r (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)" % name[:_SHOW]
    return None


def annotation_keys(owner=OWNER_ANNOTATION, time=TIME_ANNOTATION, run_id=RUN_ID_ANNOTATION):
    """The three annotation keys as a dict, each checked (CordonError names the bad one)."""
    keys = {"owner": owner, "time": time, "run_id": run_id}
    for role, key in sorted(keys.items()):
        problem = _qualified_name_problem(key)
        if problem:
            raise CordonError("the %s annotation key %r %s. Fix: use a Kubernetes annotation key such as %s."
                              % (role, str(key)[:_SHOW], problem, OWNER_ANNOTATION))
    if len(set(keys.values())) != 3:
        raise CordonError("the owner, time and run id annotation keys must differ, got %s. Fix: give each its own key."
                          % ", ".join(keys[k] for k in ("owner", "time", "run_id")))
    return keys


def _check_owner(owner):
    if not isinstance(owner, str) or not _OWNER_RE.match(owner):
        raise CordonError("the cordon owner %r is not a short name (1-63 of A-Z a-z 0-9 - _ ., alphanumeric at both "
                          "ends). Fix: name the role or playbook that cordons, such as onboard, preflight or mig."
                          % (str(owner)[:_SHOW],))
    return owner


def _check_run_id(run_id):
    if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id):
        raise CordonError("the run id %r is not 1-128 of A-Z a-z 0-9 _ . : + -. Fix: leave _node_cordon_run_id unset "
                          "(one id per run is made) or pass a job id." % (str(run_id)[:_SHOW],))
    return run_id


def _node_parts(node):
    """(name, annotations, unschedulable, taint keys) of a Node object, checked."""
    if not isinstance(node, Mapping):
        raise CordonError("expected a Node object (a mapping), got %s. Fix: pass the node that "
                          "kubernetes.core.k8s_info returned (resources[0])." % _kind(node))
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise CordonError("the Node object's metadata or spec is not a mapping. Fix: pass the node that "
                          "kubernetes.core.k8s_info returned (resources[0]).")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise CordonError("the Node object has no metadata.name. Fix: pass the node that kubernetes.core.k8s_info "
                          "returned (resources[0]).")
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise CordonError("node %s: metadata.annotations is not a mapping. Fix: pass the node that "
                          "kubernetes.core.k8s_info returned (resources[0])." % name[:_SHOW])
    taints = spec.get("taints") or []
    if not isinstance(taints, (list, tuple)):
        raise CordonError("node %s: spec.taints is not a list. Fix: pass the node that kubernetes.core.k8s_info "
                          "returned (resources[0])." % name[:_SHOW])
    taint_keys = set(t.get("key") for t in taints if isinstance(t, Mapping))
    return name, annotations, spec.get("unschedulable") is True, taint_keys


def _kind(value):
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def _text(value):
    """An annotation value as shown in a reason: a string, cut short; None when absent or empty."""
    if value is None:
        return None
    value = str(value)
    if not value:
        return None
    return value if len(value) <= _SHOW else value[:_SHOW] + "..."


def _since(time_value, run_value):
    parts = []
    if run_value:
        parts.append("run %s" % run_value)
    if time_value:
        parts.append("since %s" % time_value)
    return " (%s)" % ", ".join(parts) if parts else ""


def is_joined(node, label_key=JOINED_LABEL, registration_taint_key=REGISTRATION_TAINT_KEY):
    """True when the node has joined: schedulable, ``label_key`` is ``passed``, no registration taint."""
    name, _annotations, unschedulable, taint_keys = _node_parts(node)
    problem = _qualified_name_problem(label_key)
    if problem:
        raise CordonError("node %s: the preflight label key %r %s. Fix: use a Kubernetes label key such as %s."
                          % (name[:_SHOW], str(label_key)[:_SHOW], problem, JOINED_LABEL))
    labels = (node.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, Mapping):
        raise CordonError("node %s: metadata.labels is not a mapping. Fix: pass the node that kubernetes.core.k8s_info "
                          "returned (resources[0])." % name[:_SHOW])
    return (not unschedulable and labels.get(label_key) == "passed"
            and not (registration_taint_key and registration_taint_key in taint_keys))


def decide_take(node, owner, run_id, now, take_over=False, adopt_registration_taint=True,
                registration_taint_key=REGISTRATION_TAINT_KEY, keys=None):
    """Decide whether ``owner`` holds the node's cordon; return ``(state, patch)``."""
    keys = keys or annotation_keys()
    owner = _check_owner(owner)
    run_id = _check_run_id(run_id)
    if not isinstance(now, str) or not now:
        raise CordonError("no time given for the cordon mark. Fix: pass now, such as 2026-01-31T12:00:00Z.")
    name, annotations, unschedulable, taint_keys = _node_parts(node)
    mark = _text(annotations.get(keys["owner"]))
    marked_run = _text(annotations.get(keys["run_id"]))
    marked_time = _text(annotations.get(keys["time"]))
    registering = bool(registration_taint_key) and registration_taint_key in taint_keys
    state = {"node": name, "owned": True, "was_unschedulable": unschedulable, "previous_run_id": marked_run}
    full_mark = {keys["owner"]: owner, keys["time"]: now, keys["run_id"]: run_id}

    if not unschedulable:
        state.update(action="cordoned", holder=owner)
        if mark:
            state["reason"] = ("cordoned by %s (run %s); the node was schedulable, so the stale mark of %s%s was "
                               "replaced" % (owner, run_id, mark, _since(marked_time, marked_run)))
        else:
            state["reason"] = "cordoned by %s (run %s)" % (owner, run_id)
        return state, {"metadata": {"annotations": full_mark}, "spec": {"unschedulable": True}}

    if mark == owner:
        state.update(action="resumed", holder=owner)
        if marked_run == run_id:
            state["reason"] = "already cordoned by %s in this run (run %s)" % (owner, run_id)
            return state, None
        state["reason"] = ("already cordoned by %s%s: an earlier run stopped before handing the node back; "
                           "run %s finishes the job" % (owner, _since(marked_time, marked_run), run_id))
        return state, {"metadata": {"annotations": {keys["run_id"]: run_id}}}

    if not mark and registering and adopt_registration_taint:
        state.update(action="adopted", holder=owner,
                     reason="a new node that registered with the taint %s and no cordon mark: cordon adopted by %s "
                            "(run %s)" % (registration_taint_key, owner, run_id))
        return state, {"metadata": {"annotations": full_mark}}

    holder = mark or OUTSIDE
    if mark and marked_run == run_id:
        # Another owner of this same run (onboard.yml around the mig role): it hands the node back, never taken over.
        state.update(action="skipped", holder=holder, owned=False,
                     reason="cordoned by %s in this same run (run %s): %s hands the node back, %s leaves it cordoned"
                            % (holder, run_id, holder, owner))
        return state, None
    if take_over:
        state.update(action="taken_over", holder=owner,
                     reason="cordoned by %s%s; taken over by %s (run %s) as asked"
                            % (holder, _since(marked_time, marked_run), owner, run_id))
        return state, {"metadata": {"annotations": full_mark}}

    state.update(action="skipped", holder=holder, owned=False,
                 reason="cordoned by %s%s, not by %s: left alone and never uncordoned by this run (set "
                        "_node_cordon_take_over=true to take it over)" % (holder, _since(marked_time, marked_run), owner))
    return state, None


def decide_release(node, owner, keys=None):
    """Decide whether ``owner`` may uncordon the node; return ``(released, patch)``."""
    keys = keys or annotation_keys()
    owner = _check_owner(owner)
    name, annotations, unschedulable, _taints = _node_parts(node)
    mark = _text(annotations.get(keys["owner"]))
    marked_run = _text(annotations.get(keys["run_id"]))
    marked_time = _text(annotations.get(keys["time"]))
    no_mark = {keys["owner"]: None, keys["time"]: None, keys["run_id"]: None}

    if mark == owner:
        if unschedulable:
            return ({"node": name, "released": True,
                     "reason": "uncordoned: it carried the mark of %s%s, now removed"
                               % (owner, _since(marked_time, marked_run))},
                    {"metadata": {"annotations": no_mark}, "spec": {"unschedulable": False}})
        return ({"node": name, "released": True,
                 "reason": "already schedulable (someone uncordoned it); the mark of %s%s was removed"
                           % (owner, _since(marked_time, marked_run))},
                {"metadata": {"annotations": no_mark}})
    if mark:
        reason = ("cordoned by %s%s, not by %s: left cordoned" % (mark, _since(marked_time, marked_run), owner)
                  if unschedulable else
                  "schedulable, and the mark on it is %s's, not %s's: left as it is" % (mark, owner))
        return {"node": name, "released": False, "reason": reason}, None
    if unschedulable:
        return ({"node": name, "released": False,
                 "reason": "cordoned by %s, not by %s: left cordoned" % (OUTSIDE, owner)}, None)
    return {"node": name, "released": False, "reason": "not cordoned: nothing to hand back"}, None
