# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight serving gate filters: the pod's name and the node's free GPUs (logic in plugin_utils/preflight_serving.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight_serving
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.plain_data import to_plain


def preflight_serving_pod(node, prefix=preflight_serving.DEFAULT_PREFIX):
    """Node name -> ``{name, node_hash}`` of its serving pod."""
    try:
        return preflight_serving.serving_pod_identity(to_plain(node), to_plain(prefix))
    except preflight_serving.ServingPodError as exc:
        raise AnsibleFilterError("preflight_serving_pod: %s" % exc)


def preflight_free_gpus(node, pods, resource="nvidia.com/gpu", ignore_labels=None):
    """Node object and its pods -> ``{status, allocatable, used, free, holders, reason}``."""
    try:
        return preflight_serving.free_gpus(to_plain(node), to_plain(pods), to_plain(resource),
                                           to_plain(ignore_labels))
    except preflight_serving.ServingPodError as exc:
        raise AnsibleFilterError("preflight_free_gpus: %s" % exc)


class FilterModule(object):
    """gpu_native.fleet preflight serving gate filters."""

    def filters(self):
        return {
            "preflight_serving_pod": preflight_serving_pod,
            "preflight_free_gpus": preflight_free_gpus,
        }
