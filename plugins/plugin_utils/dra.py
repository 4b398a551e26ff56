# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as NVIDIA's DRA Driver for GPUs serves it.

The kubernetes gate and the ``dra`` compliance check of a node whose GPUs are
published in ResourceSlices rather than counted in ``nvidia.com/gpu``:

- ``parse_smi_list(text)``: ``nvidia-smi -L`` -> GPUs with their MIG devices (profile, UUID);
- ``expected_devices(gpus, mig_enabled)``: what the driver must publish for them (static MIG: a
  MIG-enabled GPU is published through its MIG devices only);
- ``node_pools(slices, node, driver)``: the node's pools, their current generation and completeness;
- ``judge(...)``: ``(status, reasons, details)``: slices present and complete, devices one for one
  (count, UUIDs, product, driver version, MIG profiles), DeviceClasses, the kubelet-plugin pod, no double
  exposure with the device plugin;
- ``resolve_mode(mode, slices, node)``: ``device_plugin``, ``dra`` or ``auto`` (DRA when the node has slices).

Every fact (driver name, classes, attributes, labels) comes from ``dra_facts.yml`` next to this file,
which names its sources.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import yaml

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dra_facts.yml"), "r") as _handle:
    FACTS = yaml.safe_load(_handle)

DRIVER = FACTS["driver"]["name"]
DEVICE_CLASSES = dict(FACTS["driver"]["device_classes"])
FULL_RESOURCE = FACTS["device_plugin_resources"]["full"]
MIG_RESOURCE_PREFIX = FACTS["device_plugin_resources"]["mig_prefix"]
MAX_DEVICES_PER_SLICE = FACTS["api"]["max_devices_per_slice"]
KUBELET_PLUGIN = dict(FACTS["driver"]["kubelet_plugin"])
SYSTEM_NAMESPACES = tuple(FACTS["system_namespaces"])

MODE_DEVICE_PLUGIN = "device_plugin"
MODE_DRA = "dra"
MODE_AUTO = "auto"
MODES = (MODE_DEVICE_PLUGIN, MODE_DRA, MODE_AUTO)

PASS = "pass"
FAIL = "fail"

#: Bounds on what is judged (hostile or broken input): slices per node, GPUs per node, reasons listed.
MAX_SLICES = 256
MAX_GPUS = 64
MAX_MIGS_PER_GPU = 8
MAX_LIST_CHARS = 1 << 20
MAX_REASONS = 40

_SMI_GPU_RE = re.compile(r"^GPU (?P<index>[0-9]{1,4}): (?P<name>.{1,200}?) \(UUID: (?P<uuid>GPU-[0-9a-fA-F-]{1,64})\)\s*$")
_SMI_MIG_RE = re.compile(r"^\s+MIG (?P<profile>[0-9a-z.+]{1,32})\s+Device\s+(?P<index>[0-9]{1,3}): "
                         r"\(UUID: (?P<uuid>MIG-[0-9a-fA-F-]{1,64})\)\s*$")
_VERSION_RE = re.compile(r"^v?(\d{1,6})(?:\.(\d{1,6}))?(?:\.(\d{1,6}))?$")


class DraError(FleetError):
    """Input the DRA gate cannot judge (a caller mistake)."""


def parse_smi_list(text):
    """``nvidia-smi -L`` -> ``[{index, product, uuid, migs: [{profile, uuid}]}]``.

    Lines that are neither a GPU nor a MIG line are ignored (warnings, blank lines); a MIG line before any
    GPU line is ignored too.  Bounded: at most ``MAX_LIST_CHARS`` characters and ``MAX_GPUS`` GPUs.
    """
    if text is None:
        return []
    if not isinstance(text, str):
        raise DraError("the nvidia-smi -L output is %s, not text" % type(text).__name__)
    if len(text) > MAX_LIST_CHARS:
        raise DraError("the nvidia-smi -L output has %d characters, more than %d" % (len(text), MAX_LIST_CHARS))
    gpus = []
    for line in text.splitlines():
        if len(line) > 512:
            continue
        line = line.rstrip()
        gpu = _SMI_GPU_RE.match(line)
        if gpu:
            if len(gpus) >= MAX_GPUS:
                raise DraError("nvidia-smi -L lists more than %d GPUs" % MAX_GPUS)
            gpus.append({"index": int(gpu.group("index")), "product": gpu.group("name").strip(),
                         "uuid": gpu.group("uuid"), "migs": []})
            continue
        mig = _SMI_MIG_RE.match(line)
        if mig and gpus:
            if len(gpus[-1]["migs"]) >= MAX_MIGS_PER_GPU:
                raise DraError("nvidia-smi -L lists more than %d MIG devices on GPU %d"
                               % (MAX_MIGS_PER_GPU, gpus[-1]["index"]))
            gpus[-1]["migs"].append({"profile": mig.group("profile"), "uuid": mig.group("uuid")})
    return gpus


def version_tuple(text):
    """``580.126.20`` -> ``(580, 126, 20)``; ``570.124.06`` and ``570.124.6`` are the same (the driver publishes
    semver, without leading zeros); None when it is not a version."""
    match = _VERSION_RE.match(str(text or "").strip())
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def expected_devices(gpus, mig_enabled=None):
    """What the driver must publish for the node's GPUs (static MIG, as the driver's nvlib.go does).

    ``gpus``: ``parse_smi_list`` entries.  ``mig_enabled``: ``{uuid: bool}`` (from nvidia-smi -q); a GPU
    with MIG enabled and no MIG device is published as nothing (the driver "strands" it), one without MIG
    devices and not known to be MIG-enabled as a full GPU.  Returns ``{"gpus": {uuid: product},
    "migs": {uuid: {profile, parent}}, "stranded": [uuid]}``.
    """
    mig_enabled = mig_enabled or {}
    result = {"gpus": {}, "migs": {}, "stranded": []}
    for gpu in gpus or []:
        if gpu["migs"]:
            for mig in gpu["migs"]:
                result["migs"][mig["uuid"]] = {"profile": mig["profile"], "parent": gpu["uuid"]}
        elif mig_enabled.get(gpu["uuid"]):
            result["stranded"].append(gpu["uuid"])
        else:
            result["gpus"][gpu["uuid"]] = gpu["product"]
    return result


def _spec(obj):
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return spec if isinstance(spec, dict) else {}


def _name(obj):
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    return str((metadata or {}).get("name") or "?") if isinstance(metadata or {}, dict) else "?"


def _int(value):
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def node_slices(slices, node_name, driver=DRIVER):
    """The ResourceSlices of ``driver`` for ``node_name`` (``spec.nodeName``)."""
    if slices is None:
        return []
    if not isinstance(slices, list):
        raise DraError("the ResourceSlices are %s, not a list" % type(slices).__name__)
    if len(slices) > MAX_SLICES * 16:
        raise DraError("%d ResourceSlices, more than %d" % (len(slices), MAX_SLICES * 16))
    mine = [item for item in slices if isinstance(item, dict) and _spec(item).get("driver") == driver
            and _spec(item).get("nodeName") == node_name]
    if len(mine) > MAX_SLICES:
        raise DraError("node %s has %d ResourceSlices of %s, more than %d" % (node_name, len(mine), driver, MAX_SLICES))
    return mine


def node_pools(slices):
    """Group a node's slices by pool: ``{pool: {generation, expected, current: [slice], stale: [(name, gen)],
    problems: [text]}}``.  Only the slices at the highest generation count (a consumer "must only use
    ResourceSlices with the highest generation number", resource.k8s.io/v1 ResourcePool)."""
    pools = {}
    for item in slices:
        pool = _spec(item).get("pool") if isinstance(_spec(item).get("pool"), dict) else {}
        name = str(pool.get("name") or "")
        entry = pools.setdefault(name, {"all": []})
        entry["all"].append((item, _int(pool.get("generation")), _int(pool.get("resourceSliceCount"))))
    result = {}
    for name, entry in pools.items():
        problems = []
        generations = [gen for _item, gen, _count in entry["all"] if gen is not None]
        top = max(generations) if generations else None
        current = [item for item, gen, _count in entry["all"] if gen == top and top is not None]
        counts = sorted(set(count for _item, gen, count in entry["all"] if gen == top and count is not None))
        stale = sorted((_name(item), gen) for item, gen, _count in entry["all"] if gen != top)
        expected = counts[0] if len(counts) == 1 else None
        if top is None:
            problems.append("pool %s: no slice has a pool generation" % (name or "(unnamed)"))
        elif not counts:
            problems.append("pool %s: no slice at generation %d says resourceSliceCount" % (name, top))
        elif len(counts) > 1:
            problems.append("pool %s: the slices at generation %d disagree on resourceSliceCount (%s)"
                            % (name, top, ", ".join(str(c) for c in counts)))
        elif len(current) < expected:
            problems.append("pool %s is incomplete: %d of %d ResourceSlices at generation %d (the driver is still "
                            "publishing, or a slice was deleted; the scheduler allocates nothing from it)"
                            % (name, len(current), expected, top))
        elif len(current) > expected:
            problems.append("pool %s has %d ResourceSlices at generation %d, resourceSliceCount says %d"
                            % (name, len(current), top, expected))
        if stale:
            problems.append("pool %s has stale ResourceSlices from an older generation (%s; current %s): the "
                            "driver has not finished republishing the pool"
                            % (name, ", ".join("%s at %s" % (n, g) for n, g in stale[:3]), top))
        result[name] = {"generation": top, "expected": expected, "current": current, "stale": stale,
                        "problems": problems}
    return result


def _attribute(device, key):
    attributes = device.get("attributes") if isinstance(device.get("attributes"), dict) else {}
    value = attributes.get(key)
    if not isinstance(value, dict):
        return None
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            return value[kind]
    return None


def published_devices(slices):
    """The devices of the current slices: ``{"gpus": {uuid: {product, driver, name}}, "migs": {uuid: {profile,
    parent, driver, name}}, "dynamic": [name], "other": [name], "duplicates": [uuid]}``."""
    found = {"gpus": {}, "migs": {}, "dynamic": [], "other": [], "duplicates": [], "too_many": []}
    for item in slices:
        devices = _spec(item).get("devices") or []
        if not isinstance(devices, list):
            continue
        if len(devices) > MAX_DEVICES_PER_SLICE:
            found["too_many"].append(_name(item))
            devices = devices[:MAX_DEVICES_PER_SLICE]
        for device in devices:
            if not isinstance(device, dict):
                continue
            kind = _attribute(device, "type")
            uuid = _attribute(device, "uuid")
            name = str(device.get("name") or "?")
            entry = {"product": _attribute(device, "productName"), "driver": _attribute(device, "driverVersion"),
                     "name": name}
            if kind == "mig" and not uuid:
                found["dynamic"].append(name)  # DynamicMIG: a partition that does not exist yet
                continue
            if kind not in ("gpu", "mig") or not isinstance(uuid, str):
                found["other"].append(name)
                continue
            table = found["gpus"] if kind == "gpu" else found["migs"]
            if kind == "mig":
                entry.update(profile=_attribute(device, "profile"), parent=_attribute(device, "parentUUID"))
            if uuid in found["gpus"] or uuid in found["migs"]:
                found["duplicates"].append(uuid)
            table[uuid] = entry
    return found


def _by_profile(migs):
    counts = {}
    for mig in migs.values():
        counts[str(mig.get("profile"))] = counts.get(str(mig.get("profile")), 0) + 1
    return counts


def advertised_resources(slices, node_name):
    """What the node's ResourceSlices of NVIDIA's driver offer, named as the device plugin's ``mixed`` strategy
    names them (``nvidia.com/gpu`` per full GPU, ``nvidia.com/mig-<profile>`` per MIG device; a MIG-enabled GPU is
    published through its MIG devices only), counts as strings like a Node's allocatable; None while the node has
    no slices or a pool is incomplete or stale (the driver is still publishing)."""
    mine = node_slices(slices, node_name)
    pools = node_pools(mine)
    if not pools or any(pool["problems"] for pool in pools.values()):
        return None
    devices = published_devices([item for pool in pools.values() for item in pool["current"]])
    counts = dict((MIG_RESOURCE_PREFIX + profile, count) for profile, count in _by_profile(devices["migs"]).items())
    if devices["gpus"]:
        counts[FULL_RESOURCE] = len(devices["gpus"])
    return dict((name, str(count)) for name, count in sorted(counts.items()))


def _resource_count(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if re.match(r"^\d{1,6}$", text) else None


def double_exposure(node):
    """Device-plugin resources the node's allocatable offers (``{resource: count}``, counts > 0 only)."""
    status = node.get("status") if isinstance(node, dict) and isinstance(node.get("status"), dict) else {}
    allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
    exposed = {}
    for resource, value in allocatable.items():
        if resource == FULL_RESOURCE or str(resource).startswith(MIG_RESOURCE_PREFIX):
            count = _resource_count(value)
            if count is None or count > 0:
                exposed[resource] = value
    return exposed


def _pod_ready(pod):
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    if status.get("phase") != "Running":
        return False
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def resolve_mode(mode, slices, node_name):
    """``auto``: ``dra`` when the driver publishes slices for the node, else ``device_plugin``."""
    if mode not in MODES:
        raise DraError("gpu_native_allocation is %r; it takes %s" % (mode, ", ".join(MODES)))
    if mode != MODE_AUTO:
        return mode
    return MODE_DRA if node_slices(slices, node_name) else MODE_DEVICE_PLUGIN


def judge(node_name, node, slices, device_classes, plugin_pods, gpus, driver_version=None, mig_enabled=None,
          required_classes=None, cluster=True):
    """The kubernetes gate of a DRA node: ``(status, reasons, details)``.

    ``node``: the Node object (its allocatable, for double exposure); ``slices``: ResourceSlices (any node,
    any driver: the node's are picked); ``device_classes``: DeviceClass objects; ``plugin_pods``: the DRA
    kubelet-plugin pods on the node; ``gpus``: ``parse_smi_list`` entries; ``driver_version``: the node's
    NVIDIA driver; ``mig_enabled``: ``{uuid: bool}``; ``required_classes``: DeviceClass names that must exist
    beyond the ones the node's devices need (gpu.nvidia.com for full GPUs, mig.nvidia.com for MIG devices).
    ``cluster=False`` leaves out the DeviceClasses and the plugin pods (the compliance check reads slices only).
    """
    reasons = []
    mine = node_slices(slices, node_name)
    expected = expected_devices(gpus, mig_enabled)
    details = {"allocation_mode": MODE_DRA, "driver": DRIVER, "slices": len(mine), "pools": {},
               "expected": {"gpus": len(expected["gpus"]), "migs": _by_profile(expected["migs"])}}
    for uuid in expected["stranded"]:
        reasons.append("GPU %s has MIG enabled and no MIG device: the DRA driver publishes nothing for it. Fix: "
                       "apply the node's MIG layout (mig_config) or disable MIG on it" % uuid)
    if not mine:
        reasons.append("no ResourceSlice of driver %s for node %s: the DRA kubelet plugin has not published the "
                       "node's GPUs. Fix: check the kubelet-plugin pod's log on the node" % (DRIVER, node_name))
    pools = node_pools(mine)
    current = []
    for name, pool in sorted(pools.items()):
        details["pools"][name] = {"generation": pool["generation"], "resourceSliceCount": pool["expected"],
                                  "slices": len(pool["current"]), "stale": len(pool["stale"])}
        reasons.extend(pool["problems"])
        if name != node_name:
            reasons.append("pool %s for node %s: the driver names its pool after the node" % (name, node_name))
        current.extend(pool["current"])
    if mine:
        reasons.extend(_compare(published_devices(current), expected, driver_version, details))
    if cluster:
        reasons.extend(_classes(device_classes, expected, required_classes, details))
        reasons.extend(_plugin_pods(plugin_pods, details))
    exposed = double_exposure(node)
    details["device_plugin_allocatable"] = exposed
    if exposed and (mine or expected["gpus"] or expected["migs"]):
        reasons.append("double exposure: the node's allocatable offers %s from the device plugin while the DRA "
                       "driver publishes the node's GPUs; a GPU could be given twice. Fix: remove the NVIDIA device "
                       "plugin from this node (GPU Operator: nvidia.com/gpu.deploy.device-plugin=false)"
                       % ", ".join("%s: %s" % (key, exposed[key]) for key in sorted(exposed)))
    if len(reasons) > MAX_REASONS:
        reasons = reasons[:MAX_REASONS - 1] + ["... and %d more" % (len(reasons) - MAX_REASONS + 1)]
    return (FAIL if reasons else PASS), reasons, details


def _compare(found, expected, driver_version, details):
    reasons = []
    details["published"] = {"gpus": len(found["gpus"]), "migs": _by_profile(found["migs"])}
    for name in found["too_many"]:
        reasons.append("ResourceSlice %s lists more than %d devices (the API allows %d)"
                       % (name, MAX_DEVICES_PER_SLICE, MAX_DEVICES_PER_SLICE))
    for uuid in sorted(set(found["duplicates"])):
        reasons.append("device %s is published twice" % uuid)
    if found["dynamic"]:
        reasons.append("%d MIG devices have no uuid (DynamicMIG partitions: %s); this gate judges static MIG only. "
                       "Fix: disable the DynamicMIG feature gate, or skip the kubernetes gate for this node"
                       % (len(found["dynamic"]), ", ".join(found["dynamic"][:3])))
    if len(found["gpus"]) != len(expected["gpus"]):
        reasons.append("the slices publish %d full GPUs, nvidia-smi shows %d (MIG off)"
                       % (len(found["gpus"]), len(expected["gpus"])))
    for uuid in sorted(set(expected["gpus"]) - set(found["gpus"])):
        reasons.append("GPU %s (%s) is not published in a ResourceSlice" % (uuid, expected["gpus"][uuid]))
    for uuid in sorted(set(found["gpus"]) - set(expected["gpus"])):
        where = "as a MIG-enabled GPU" if uuid in set(m["parent"] for m in expected["migs"].values()) else ""
        reasons.append("the slices publish GPU %s (device %s) that nvidia-smi does not show%s"
                       % (uuid, found["gpus"][uuid]["name"], (" " + where) if where else ""))
    for uuid in sorted(set(found["gpus"]) & set(expected["gpus"])):
        if found["gpus"][uuid]["product"] != expected["gpus"][uuid]:
            reasons.append("GPU %s is published as %s, nvidia-smi says %s"
                           % (uuid, found["gpus"][uuid]["product"], expected["gpus"][uuid]))
    published, wanted = _by_profile(found["migs"]), _by_profile(expected["migs"])
    for profile in sorted(set(published) | set(wanted)):
        if published.get(profile, 0) != wanted.get(profile, 0):
            reasons.append("MIG %s: the slices publish %d, nvidia-smi shows %d"
                           % (profile, published.get(profile, 0), wanted.get(profile, 0)))
    for uuid in sorted(set(expected["migs"]) - set(found["migs"])):
        reasons.append("MIG device %s (%s on %s) is not published"
                       % (uuid, expected["migs"][uuid]["profile"], expected["migs"][uuid]["parent"]))
    for uuid in sorted(set(found["migs"]) - set(expected["migs"])):
        reasons.append("the slices publish MIG device %s (%s) that nvidia-smi does not show"
                       % (uuid, found["migs"][uuid]["profile"]))
    for uuid in sorted(set(found["migs"]) & set(expected["migs"])):
        mine, theirs = found["migs"][uuid], expected["migs"][uuid]
        if mine["profile"] != theirs["profile"]:
            reasons.append("MIG device %s is published as profile %s, nvidia-smi shows %s"
                           % (uuid, mine["profile"], theirs["profile"]))
        if mine["parent"] != theirs["parent"]:
            reasons.append("MIG device %s is published on GPU %s, nvidia-smi shows it on %s"
                           % (uuid, mine["parent"], theirs["parent"]))
    node_driver = version_tuple(driver_version) if driver_version else None
    if node_driver is not None:
        seen = sorted(set(str(d["driver"]) for table in (found["gpus"], found["migs"]) for d in table.values()
                          if version_tuple(d["driver"]) != node_driver))
        if seen:
            reasons.append("the slices publish driverVersion %s, the node's driver is %s (the kubelet plugin has "
                           "not restarted since the driver changed)" % (", ".join(seen[:3]), driver_version))
    return reasons


def _classes(device_classes, expected, required_classes, details):
    names = set(_name(item) for item in device_classes or [] if isinstance(item, dict))
    needed = set(required_classes or [])
    if expected["gpus"]:
        needed.add("gpu.nvidia.com")
    if expected["migs"]:
        needed.add("mig.nvidia.com")
    missing = sorted(needed - names)
    details["device_classes_missing"] = missing
    if missing:
        return ["DeviceClass %s does not exist: claims cannot ask for the node's devices. Fix: install the DRA "
                "driver's chart with resources.gpus.enabled=true" % ", ".join(missing)]
    return []


def _plugin_pods(pods, details):
    pods = [pod for pod in pods or [] if isinstance(pod, dict)]
    ready = [pod for pod in pods if _pod_ready(pod)]
    details["plugin_pods_ready"] = len(ready)
    if not pods:
        return ["no DRA kubelet-plugin pod runs on the node (namespace %s, label %s, or the v25.12 names %s, %s)"
                % (KUBELET_PLUGIN["namespace"], KUBELET_PLUGIN["label_selector"], KUBELET_PLUGIN["legacy_namespace"],
                   KUBELET_PLUGIN["legacy_label_selector"])]
    if not ready:
        return ["the DRA kubelet-plugin pod is not Running and Ready (%s)" % ", ".join(
            "%s %s" % (_name(pod), (pod.get("status") or {}).get("phase") if isinstance(pod.get("status"), dict)
                       else None) for pod in pods[:3])]
    return []


def compliance_check(node_name, node, slices, smi_text, mode=MODE_DRA):
    """The ``dra`` compliance row's ``(status, expected, actual, items)``: the node's slices present and complete,
    their devices agreeing with ``nvidia-smi -L`` (UUIDs, products, MIG profiles), no double exposure.  ``auto``
    with no slice for the node is a ``skip`` (a device-plugin node)."""
    expected = "ResourceSlices of %s for node %s complete, one device per GPU/MIG device of nvidia-smi -L, no " \
               "device-plugin allocatable" % (DRIVER, node_name)
    if resolve_mode(mode, slices, node_name) == MODE_DEVICE_PLUGIN:
        return "skip", expected, "no ResourceSlice of %s for the node (allocation mode %s: a device-plugin node)" \
            % (DRIVER, mode), []
    status, reasons, details = judge(node_name, node, slices, [], [], parse_smi_list(smi_text), cluster=False)
    if status == PASS:
        published = details.get("published") or {}
        return "pass", expected, "%d ResourceSlice(s), %d GPU(s), MIG %s" % (
            details["slices"], published.get("gpus", 0),
            ", ".join("%s x%d" % (k, v) for k, v in sorted((published.get("migs") or {}).items())) or "none"), []
    return "fail", expected, "; ".join(reasons[:5]), reasons
