# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_label_problems: what the API server would refuse in a label map, checked before any change."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s_labels import (
    label_key_problem,
    label_value_problem,
)


def k8s_label_problems(labels, name="labels"):
    """Return ``["<name>.<key>: <reason>", ...]``; empty when every key and value is valid."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        raise AnsibleFilterError("k8s_label_problems expects a dict of labels, got %s" % type(labels).__name__)
    problems = []
    for key in sorted(labels, key=str):
        problem = label_key_problem(key)
        if problem:
            problems.append("%s.%s: key %s" % (name, key, problem))
        problem = label_value_problem(labels[key])
        if problem:
            problems.append("%s.%s: value %s" % (name, key, problem))
    return problems


class FilterModule(object):
    """gpu_native.fleet Kubernetes label filters."""

    def filters(self):
        return {"k8s_label_problems": k8s_label_problems}
