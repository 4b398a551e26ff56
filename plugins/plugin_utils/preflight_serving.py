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
* Under DRA (``gpu_native_allocation: dra``): ``dra_free_devices(node, slices, claims, device_class)``, the node's
  published devices that no ResourceClaim has allocated; ``dra_claim_template(...)``, the ResourceClaimTemplate
  (``resource.k8s.io/v1``) that claims exactly one of them; ``dra_serving_pod(pod, node, template)``, the pod in its
  DRA form (scheduled onto the node, claiming through the template).
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


# --- the serving gate under DRA (gpu_native_allocation dra; docs/dra.md) ---------------------------------------------
# The serving pod claims exactly one device of the node through a ResourceClaimTemplate (resource.k8s.io/v1); the
# claim the resourceclaim controller generates from it is owned by the pod (garbage-collected with it). The pod
# goes through the scheduler (the scheduler allocates claims; a pod with spec.nodeName set bypasses it and the
# kubelet never runs it, Kubernetes docs "Dynamic Resource Allocation", pre-scheduled pods), pinned to the node by
# a required nodeAffinity on metadata.name and tolerating the cordon's node.kubernetes.io/unschedulable taint.

#: The DRA request and pod claim name (a DNS label).
DRA_REQUEST = "gpu"
#: A device UUID as NVIDIA's driver publishes it (GPU-... / MIG-...): the only text that goes into the CEL selector.
_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]{1,64}$")
#: Devices named in one selector (a node holds at most dra.MAX_GPUS GPUs of dra.MAX_MIGS_PER_GPU MIG devices each).
MAX_SELECTOR_DEVICES = 512
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def _dra():
    # imported here: dra reads its facts file at import, which only the DRA path needs
    from ansible_collections.gpu_native.fleet.plugins.plugin_utils import dra  # pylint: disable=import-outside-toplevel
    return dra


def _device_type(device_class):
    dra = _dra()
    if not isinstance(device_class, str) or device_class not in dra.DEVICE_CLASSES \
            or dra.DEVICE_CLASSES[device_class] not in ("gpu", "mig"):
        raise ServingPodError("the serving DeviceClass is %r; the serving pod claims one of %s. Fix: set "
                              "preflight_serving_dra_device_class to gpu.nvidia.com (a full GPU) or mig.nvidia.com"
                              % (device_class, ", ".join(sorted(c for c, t in dra.DEVICE_CLASSES.items()
                                                                if t in ("gpu", "mig")))))
    return dra.DEVICE_CLASSES[device_class]


def _claim_key(claim):
    return _pod_key(claim)


def dra_free_devices(node, slices, claims, device_class="gpu.nvidia.com", ignore_labels=None):
    """``{status, devices, free, allocated, holders, reason}`` for the devices of ``device_class`` the DRA driver
    publishes for ``node`` (a node name) in ``slices`` (ResourceSlices; None: they could not be read) and that no
    ResourceClaim in ``claims`` (all namespaces; None: they could not be read) has allocated.

    Devices: the current generation of the node's pools (``dra.node_pools``), of the class's ``type`` with a
    ``uuid``. A claim holds a device when a result of ``status.allocation.devices.results`` names its driver, pool
    and device. Claims whose labels contain ``ignore_labels`` (the serving gate's own, left by an earlier run) do
    not count. ``status``: ``free`` (at least one free: ``free`` lists their UUIDs), ``busy`` (all allocated: the
    gate is skipped), ``unknown`` (slices or claims unreadable: skipped), ``absent`` (no such device published:
    fails, the kubernetes gate says why).
    """
    node = _node_name(node)
    kind = _device_type(device_class)
    dra = _dra()
    result = {"status": "free", "devices": [], "free": [], "allocated": [], "holders": [], "reason": None}
    if slices is None or claims is None or not isinstance(slices, list) or not isinstance(claims, list):
        result["status"] = "unknown"
        result["reason"] = ("the node's ResourceSlices or the cluster's ResourceClaims could not be read, so "
                            "whether a %s device is free is not known; the serving pod is not started next to "
                            "what may be tenant workloads. Fix: check that the cluster serves resource.k8s.io/v1 "
                            "and that the job may list resourceslices and resourceclaims (rbac/onboarding.yml)"
                            % device_class)
        return result
    try:
        mine = dra.node_slices(slices, node)
    except dra.DraError as exc:
        result["status"] = "unknown"
        result["reason"] = "the node's ResourceSlices cannot be judged (%s); the serving gate is skipped" % exc
        return result
    devices = {}
    for pool, entry in sorted(dra.node_pools(mine).items()):
        for item in entry["current"]:
            listed = _dict(item.get("spec")).get("devices")
            for device in _list(listed)[:dra.MAX_DEVICES_PER_SLICE]:
                if not isinstance(device, dict) or not isinstance(device.get("name"), str):
                    continue
                uuid = dra._attribute(device, "uuid")  # pylint: disable=protected-access
                if dra._attribute(device, "type") != kind or not isinstance(uuid, str) \
                        or not _UUID_RE.match(uuid):  # pylint: disable=protected-access
                    continue
                devices[(pool, device["name"])] = uuid
    result["devices"] = sorted(devices.values())
    if not devices:
        result["status"] = "absent"
        result["reason"] = ("the DRA driver publishes no %s device (type %s) for the node, so the serving pod cannot "
                            "claim one. Fix: check the node's ResourceSlices (the kubernetes gate under "
                            "gpu_native_allocation dra says more), or set preflight_serving_dra_device_class"
                            % (device_class, kind))
        return result
    ignore = _dict(ignore_labels)
    held = {}
    for claim in claims[:MAX_PODS * 4]:
        claim = _dict(claim)
        labels = _dict(_dict(claim.get("metadata")).get("labels"))
        if ignore and all(labels.get(key) == value for key, value in ignore.items()):
            continue
        allocation = _dict(_dict(claim.get("status")).get("allocation"))
        for entry in _list(_dict(allocation.get("devices")).get("results"))[:MAX_SELECTOR_DEVICES]:
            entry = _dict(entry)
            key = (entry.get("pool"), entry.get("device"))
            if entry.get("driver") == dra.DRIVER and key in devices:
                held.setdefault(devices[key], []).append(_claim_key(claim))
    result["allocated"] = sorted(held)
    result["holders"] = sorted(set(name for names in held.values() for name in names))
    result["free"] = sorted(uuid for uuid in devices.values() if uuid not in held)
    if not result["free"]:
        result["status"] = "busy"
        shown = ", ".join(result["holders"][:MAX_SHOWN]) + (", ..." if len(result["holders"]) > MAX_SHOWN else "")
        result["reason"] = ("no %s device free on the node: all %d are allocated to ResourceClaims (%s); the serving "
                            "pod needs 1 and is not started next to tenant workloads"
                            % (device_class, len(devices), shown))
    return result


def _label_map(labels):
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ServingPodError("the serving labels are %r, not a mapping of strings (report this as a bug)" % (labels,))
    return dict(labels)


def dra_claim_template(name, namespace, labels, device_class, uuids):
    """The ResourceClaimTemplate (``resource.k8s.io/v1``) of the serving pod: one request ``gpu`` for exactly one
    device of ``device_class`` whose ``uuid`` attribute is one of ``uuids`` (the node's free devices, from
    ``dra_free_devices``): the claim can only be allocated on that node, and only a device no claim holds. The
    generated claim carries ``labels`` (so the next run finds what a killed run left)."""
    _device_type(device_class)
    dra = _dra()
    problem = dns_label_problem(name) if isinstance(name, str) else "is not a string"
    if problem:
        raise ServingPodError("the claim template name %s (report this as a bug)" % problem)
    if not isinstance(uuids, list) or not uuids or len(uuids) > MAX_SELECTOR_DEVICES \
            or not all(isinstance(u, str) and _UUID_RE.match(u) for u in uuids):
        raise ServingPodError("the devices to claim are %r, not 1 to %d device UUIDs (GPU-... or MIG-...). Fix: "
                              "check the node's ResourceSlices" % (uuids if not isinstance(uuids, list)
                                                                   else uuids[:3], MAX_SELECTOR_DEVICES))
    labels = _label_map(labels)
    expression = 'device.attributes["%s"].uuid in [%s]' % (
        dra.DRIVER, ", ".join('"%s"' % uuid for uuid in sorted(set(uuids))))
    return {
        "apiVersion": "%s/%s" % (dra.FACTS["api"]["group"], dra.FACTS["api"]["version"]),
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "metadata": {"labels": labels},
            "spec": {"devices": {"requests": [{"name": DRA_REQUEST, "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1,
                "selectors": [{"cel": {"expression": expression}}]}}]}},
        },
    }


def dra_serving_pod(pod, node, template, resource="nvidia.com/gpu"):
    """The serving pod (as the device-plugin path builds it) turned into its DRA form: ``spec.nodeName`` replaced
    by a required nodeAffinity on the node's ``metadata.name`` (the scheduler allocates the claim), the cordon's
    taint tolerated, ``resource`` removed from the containers' requests and limits, and the claim ``gpu`` from
    ``template`` (a ResourceClaimTemplate name) in ``spec.resourceClaims`` and each container's
    ``resources.claims``. The input is not changed."""
    import copy  # pylint: disable=import-outside-toplevel
    node = _node_name(node)
    if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict) \
            or not _list(pod["spec"].get("containers")):
        raise ServingPodError("the serving pod has no spec.containers (report this as a bug)")
    if not isinstance(template, str) or dns_label_problem(template):
        raise ServingPodError("the claim template name %r is not a DNS label (report this as a bug)" % (template,))
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    spec.pop("nodeName", None)
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    tolerations = [t for t in _list(spec.get("tolerations")) if _dict(t).get("key") != UNSCHEDULABLE_TAINT]
    spec["tolerations"] = tolerations + [{"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    spec["resourceClaims"] = [{"name": DRA_REQUEST, "resourceClaimTemplateName": template}]
    for container in spec["containers"]:
        if not isinstance(container, dict):
            raise ServingPodError("a container of the serving pod is not a mapping (report this as a bug)")
        if not isinstance(container.get("resources"), dict):
            container["resources"] = {}
        resources = container["resources"]
        for section in ("requests", "limits"):
            if isinstance(resources.get(section), dict):
                resources[section].pop(resource, None)
        resources["claims"] = [{"name": DRA_REQUEST}]
    return pod
