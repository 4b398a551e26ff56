# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_label_problems, k8s_problems: what the API server would refuse, checked before any change.

The rules live in plugins/module_utils/k8s/k8s_labels.py; roles call these filters instead of repeating regexes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from collections.abc import Mapping

from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import KINDS, problems, type_name


def k8s_label_problems(labels, name="labels"):
    """Return ``["<name>.<key>: <reason>", ...]``; empty when every key and value is valid."""
    if labels is not None and not isinstance(labels, Mapping):
        raise AnsibleFilterError("k8s_label_problems expects a dict of labels, got %s" % type_name(labels))
    return problems(labels, "labels", name)


def k8s_problems(value, kind, name="value"):
    """Return what the API server would refuse in ``value`` read as ``kind``; see k8s_problems.yml."""
    if kind not in KINDS:
        raise AnsibleFilterError("k8s_problems: unknown kind %r; use one of %s" % (kind, ", ".join(sorted(KINDS))))
    return problems(value, kind, name)


class FilterModule(object):
    """gpu_native.fleet Kubernetes label filters."""

    def filters(self):
        return {"k8s_label_problems": k8s_label_problems, "k8s_problems": k8s_problems}
