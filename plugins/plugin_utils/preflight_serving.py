# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""The preflight serving gate's pod: its name and whether the node has a GPU free for it.

* ``serving_pod_identity(node, prefix)``: the pod's name, a DNS label (RFC 1123, at most 63 characters) that is
  unique per node (a readable part of the node name plus a short hash of the whole name), and the hash as a label
  value, so the next run finds and deletes what a killed run left for the same node.
* ``free_gpus(node, pods, resource)``: the node's allocatable count of ``resource`` minus what its
  non-terminated pods request (Kubernetes' effective request: the larger of the sum over the containers and the
  largest init container), with the pods that hold them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import dns_label_problem

DEFAULT_PREFIX = "gpu-native-preflight"
#: Hex characters of sha256(node name) in the name and the label: 40 bits, so two nodes of one cluster
#: colliding is vanishingly unlikely (about 1e-6 for 1,000 nodes).
HASH_CHARS = 10
#: A DNS label (Kubernetes validation.IsDNS1123Label): the pod's name doubles as its hostname.
MAX_NAME = 63
#: The prefix leaves room for "-", a readable part of the node name of at least 8 characters, "-" and the hash.
MAX_PREFIX = MAX_NAME - HASH_CHARS - 10
#: A node name is a DNS subdomain (at most 253 characters).
MAX_NODE_NAME = 253
#: Pods a node may list (the kubelet's maxPods default is 110; clusters raise it to a few hundred).
MAX_PODS = 5000
MAX_CONTAINERS = 256
MAX_SHOWN = 5
TERMINATED = ("Succeeded", "Failed")


class ServingPodError(FleetError, ValueError):
    """An input the serving gate cannot use (a caller mistake); the message says what to fix."""


def _node_name(node):
    if not isinstance(node, str) or not node.strip():
        raise ServingPodError("the node name is %r, not a non-empty string. Fix: set preflight_node_name to the "
                              "node's name in Kubernetes" % (node,))
    if len(node) > MAX_NODE_NAME:
        raise ServingPodError("the node name is %d characters long, longer than a Kubernetes node name can be "
                              "(%d). Fix: set preflight_node_name to the node's name in Kubernetes"
                              % (len(node), MAX_NODE_NAME))
    return node


def node_hash(node):
    """The first HASH_CHARS hex characters of sha256 of the node name (a valid label value)."""
    return hashlib.sha256(_node_name(node).encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]


def serving_pod_identity(node, prefix=DEFAULT_PREFIX):
    """``{name, node_hash}`` for the serving pod of ``node``: ``<prefix>-<readable part>-<hash>``, a DNS label."""
    if not isinstance(prefix, str) or len(prefix) > MAX_PREFIX or dns_label_problem(prefix):
        raise ServingPodError("the serving pod prefix %r must be a lowercase DNS label of at most %d characters "
                              "(a-z, 0-9 and '-', starting and ending with a letter or digit). Fix: set "
                              "preflight_serving_pod_prefix to one, e.g. %s" % (prefix, MAX_PREFIX, DEFAULT_PREFIX))
    digest = node_hash(node)
    room = MAX_NAME - len(prefix) - len(digest) - 2
    readable = re.sub(r"[^a-z0-9]+", "-", node.lower())[:room].strip("-")
    name = "-".join(part for part in (prefix, readable, digest) if part)
    problem = dns_label_problem(name)
    if problem:  # cannot happen by construction; never hand the API a name it refuses
        raise ServingPodError("the serving pod name %s (report this as a bug)" % problem)
    return {"name": name, "node_hash": digest}


def _dict(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return value if isinstance(value, list) else []


def _count(value):
    """An extended-resource quantity (whole numbers only) as int; None when unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 10 ** 6 else None
    if isinstance(value, str) and re.match(r"^\s*\d{1,6}\s*$", value):
        return int(value)
    return None


def _container_request(container, resource):
    """What one container asks of ``resource``: its request, else its limit (extended resources: both equal)."""
    resources = _dict(_dict(container).get("resources"))
    for section in ("requests", "limits"):
        value = _dict(resources.get(section)).get(resource)
        if value is not None:
            count = _count(value)
            return 1 if count is None else count  # an unreadable request still holds the device: count one
    return 0


def pod_request(pod, resource):
    """The pod's effective request of ``resource``: max(sum over containers, largest init container)."""
    spec = _dict(_dict(pod).get("spec"))
    containers = sum(_container_request(c, resource) for c in _list(spec.get("containers"))[:MAX_CONTAINERS])
    init = [_container_request(c, resource) for c in _list(spec.get("initContainers"))[:MAX_CONTAINERS]]
    return max([containers] + init)


def _pod_key(pod):
    meta = _dict(_dict(pod).get("metadata"))
    return "%s/%s" % (str(meta.get("namespace", ""))[:63], str(meta.get("name", ""))[:253])


def free_gpus(node, pods, resource, ignore_labels=None):
    """``{status, allocatable, used, free, holders, reason}`` for ``resource`` on ``node`` (a Node object).

    ``pods``: the pods bound to the node (any namespace); terminated ones (Succeeded, Failed) hold nothing, and
    pods whose labels contain ``ignore_labels`` (a serving pod left by an earlier run, deleted before ours starts)
    are not counted. ``status``: ``free`` (at least one), ``busy`` (all held by pods: the gate is skipped) or
    ``absent`` (the node advertises none: the gate fails); ``reason`` is one line for the last two, else None.
    """
    if not isinstance(resource, str) or not resource:
        raise ServingPodError("the serving GPU resource is %r. Fix: set preflight_serving_gpu_resource, e.g. "
                              "nvidia.com/gpu" % (resource,))
    allocatable = _count(_dict(_dict(_dict(node).get("status")).get("allocatable")).get(resource))
    ignore = _dict(ignore_labels)
    used = 0
    holders = []
    for pod in _list(pods)[:MAX_PODS]:
        pod = _dict(pod)
        if _dict(pod.get("status")).get("phase") in TERMINATED:
            continue
        labels = _dict(_dict(pod.get("metadata")).get("labels"))
        if ignore and all(labels.get(key) == value for key, value in ignore.items()):
            continue
        count = pod_request(pod, resource)
        if count > 0:
            used += count
            holders.append("%s (%d)" % (_pod_key(pod), count))
    result = {"status": "free", "allocatable": allocatable, "used": used, "holders": holders, "reason": None,
              "free": None if allocatable is None else max(allocatable - used, 0)}
    if allocatable is None or allocatable == 0:
        result["status"] = "absent"
        result["reason"] = ("the node advertises no allocatable %s, so the serving pod cannot be admitted. Fix: "
                            "check the NVIDIA device plugin on the node (the kubernetes gate says more), or set "
                            "preflight_serving_gpu_resource to the resource it advertises" % resource)
    elif result["free"] == 0:
        result["status"] = "busy"
        shown = ", ".join(holders[:MAX_SHOWN]) + (", ..." if len(holders) > MAX_SHOWN else "")
        result["reason"] = ("no %s free on the node: %d allocatable, %d requested by %s; the serving pod needs 1 "
                            "and is not started next to tenant workloads" % (resource, allocatable, used, shown))
    return result
