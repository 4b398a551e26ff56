# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight serving gate filters: the pod's name, the node's free GPUs, and under DRA the node's free devices, the
pod's ResourceClaimTemplate and the pod's DRA form (logic in plugin_utils/preflight_serving.py)."""

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


def preflight_dra_free_devices(node, slices, claims, device_class="gpu.nvidia.com", ignore_labels=None):
    """Node name, its ResourceSlices and the cluster's ResourceClaims -> ``{status, devices, free, allocated,
    holders, reason}`` (None for slices or claims: unreadable, status ``unknown``)."""
    try:
        return preflight_serving.dra_free_devices(to_plain(node), to_plain(slices), to_plain(claims),
                                                  to_plain(device_class), to_plain(ignore_labels))
    except preflight_serving.ServingPodError as exc:
        raise AnsibleFilterError("preflight_dra_free_devices: %s" % exc)


def preflight_dra_claim_template(name, namespace, labels, device_class, uuids):
    """-> the serving pod's ResourceClaimTemplate (resource.k8s.io/v1): one device of the class among ``uuids``."""
    try:
        return preflight_serving.dra_claim_template(to_plain(name), to_plain(namespace), to_plain(labels),
                                                    to_plain(device_class), to_plain(uuids))
    except preflight_serving.ServingPodError as exc:
        raise AnsibleFilterError("preflight_dra_claim_template: %s" % exc)


def preflight_dra_serving_pod(pod, node, template, resource="nvidia.com/gpu"):
    """The serving pod -> its DRA form (scheduled onto the node, claiming through ``template``)."""
    try:
        return preflight_serving.dra_serving_pod(to_plain(pod), to_plain(node), to_plain(template), to_plain(resource))
    except preflight_serving.ServingPodError as exc:
        raise AnsibleFilterError("preflight_dra_serving_pod: %s" % exc)


class FilterModule(object):
    """gpu_native.fleet preflight serving gate filters."""

    def filters(self):
        return {
            "preflight_serving_pod": preflight_serving_pod,
            "preflight_free_gpus": preflight_free_gpus,
            "preflight_dra_free_devices": preflight_dra_free_devices,
            "preflight_dra_claim_template": preflight_dra_claim_template,
            "preflight_dra_serving_pod": preflight_dra_serving_pod,
        }
