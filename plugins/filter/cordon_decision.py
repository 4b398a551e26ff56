# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cordon ownership filter: take or release a node's cordon (logic in plugin_utils/cordon_ownership.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import cordon_ownership
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.plain_data import to_plain


def _bool(value, name):
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise AnsibleFilterError("cordon_decision: %s must be true or false, got %r" % (name, value))


def cordon_decision(node, owner, step="take", run_id="", now="", take_over=False, adopt_registration_taint=True,
                    registration_taint_key=cordon_ownership.REGISTRATION_TAINT_KEY,
                    owner_annotation=cordon_ownership.OWNER_ANNOTATION,
                    time_annotation=cordon_ownership.TIME_ANNOTATION,
                    run_id_annotation=cordon_ownership.RUN_ID_ANNOTATION):
    """Node object -> ``{state, patch}`` (step take) or ``{released, patch}`` (step release)."""
    try:
        keys = cordon_ownership.annotation_keys(owner=to_plain(owner_annotation), time=to_plain(time_annotation),
                                                run_id=to_plain(run_id_annotation))
        if step == "take":
            state, patch = cordon_ownership.decide_take(
                to_plain(node), to_plain(owner), to_plain(run_id), to_plain(now),
                take_over=_bool(take_over, "take_over"),
                adopt_registration_taint=_bool(adopt_registration_taint, "adopt_registration_taint"),
                registration_taint_key=to_plain(registration_taint_key) or "", keys=keys)
            return {"state": state, "patch": patch}
        if step == "release":
            released, patch = cordon_ownership.decide_release(to_plain(node), to_plain(owner), keys=keys)
            return {"released": released, "patch": patch}
    except cordon_ownership.CordonError as exc:
        raise AnsibleFilterError("cordon_decision: %s" % exc)
    raise AnsibleFilterError("cordon_decision: step must be take or release, got %r" % (step,))


def node_joined(node, label_key=cordon_ownership.JOINED_LABEL,
                registration_taint_key=cordon_ownership.REGISTRATION_TAINT_KEY):
    """Node object -> True when it has joined (cordon_ownership.is_joined, the one definition). A key given as
    None is the default (so a role passes an unset variable through ``default(none)``, never a copy of the key)."""
    label_key = cordon_ownership.JOINED_LABEL if label_key is None else label_key
    if registration_taint_key is None:
        registration_taint_key = cordon_ownership.REGISTRATION_TAINT_KEY
    try:
        return cordon_ownership.is_joined(to_plain(node), to_plain(label_key), to_plain(registration_taint_key) or "")
    except cordon_ownership.CordonError as exc:
        raise AnsibleFilterError("node_joined: %s" % exc)


class FilterModule(object):
    """gpu_native.fleet cordon ownership filters."""

    def filters(self):
        return {"cordon_decision": cordon_decision, "node_joined": node_joined}
