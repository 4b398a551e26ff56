# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Expected device-plugin resources of a node, counted the way the NVIDIA device plugin exposes them.

``expected_resources(plugin_config, gpus, mig_layout=None)`` reads the device
plugin's config (api ``v1``, the shape roles/device_plugin_config renders:
``flags.migStrategy`` and ``sharing.timeSlicing`` / ``sharing.mps`` with
``renameByDefault`` and ``resources: [{name, replicas, rename, devices}]``)
and the node's GPUs (``[{"mig_enabled": bool, "mig_devices": int}]``; ``mig_enabled``
None for a GPU nvidia-smi counts but does not describe), and
returns ``{"expected": {resource: count}, "unknown": {resource: why},
"notes": [...], "refused": why or None}``:

* ``migStrategy: none`` -> every GPU is one ``nvidia.com/gpu``;
* ``single`` -> each MIG device (or each GPU with MIG off) is one ``nvidia.com/gpu``;
  with some GPUs in MIG mode and some not the plugin refuses to start
  (``refused`` says so; no count is expected);
* ``mixed`` -> GPUs with MIG off are ``nvidia.com/gpu``; MIG devices are
  ``nvidia.com/mig-<profile>``, counted per profile from ``mig_layout``
  (``{"1g.10gb": 7, ...}``, the node's total) when given, else as one total
  under ``nvidia.com/mig-*``;
* sharing (time-slicing or MPS) multiplies a resource by ``replicas`` and, with
  ``rename`` or ``renameByDefault``, moves it to ``<name>.shared`` (or the
  given name).  A resource shared for only some ``devices`` is reported as
  unknown (its count depends on which devices the plugin picks), never guessed.

``compare(expected, actual)`` lines the expectation up with the node's
allocatable (``{resource: count}``, the ``nvidia.com/`` keys) per resource.

Bad configs raise ``DeviceCountError`` naming the key path and the fix.
Shared by gpu_health (module and readiness agent); the preflight gate can reuse it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import parse_int
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
MIG_ANY = "nvidia.com/mig-*"
STRATEGIES = ("none", "single", "mixed")
# NVIDIA/k8s-device-plugin internal/rm/device_map.go (buildDeviceMapFromConfigResources, v0.17.0 to v0.20.0):
# under migStrategy single, GPUs with MIG on and GPUs with MIG off on one node make the plugin fail to build its
# device map, so it starts no server and exposes nothing.
MIXED_MIG_MODES_ERROR = "all devices on the node must be configured with the same migEnabled value"
_SHARING_KEYS = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_RESOURCE_KEYS = ("name", "rename", "replicas", "devices")


class DeviceCountError(FleetError, ValueError):
    """A device-plugin config or MIG layout the expectation cannot be computed from."""


def _fail(path, problem, fix):
    raise DeviceCountError("device_plugin_config.%s %s. Fix: %s" % (path, problem, fix))


def _int(value, path, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = parse_int(str(value), path, signed=True)
        except ValueError:
            _fail(path, "is %r, not a whole number" % (value,), "use a whole number of at least %d." % minimum)
    if value < minimum:
        _fail(path, "is %d" % value, "use a whole number of at least %d." % minimum)
    return value


def _strategy(config, notes):
    flags = config.get("flags")
    if flags is None:
        if "migStrategy" in config:
            notes.append("device_plugin_config has migStrategy at the top level, not under flags (a mis-indented "
                         "config): the plugin then uses its default, none")
        return "none"
    if not isinstance(flags, dict):
        _fail("flags", "is not a mapping", "write flags as a mapping, e.g. flags: {migStrategy: none}.")
    strategy = flags.get("migStrategy", "none")
    if strategy not in STRATEGIES:
        _fail("flags.migStrategy", "is %r" % (strategy,), "use one of %s." % ", ".join(STRATEGIES))
    return strategy


def _sharing(config):
    """[(kind, rename_by_default, resource dict, path)] for timeSlicing and mps."""
    sharing = config.get("sharing")
    if sharing is None:
        return []
    if not isinstance(sharing, dict):
        _fail("sharing", "is not a mapping", "write sharing as a mapping with timeSlicing or mps.")
    entries = []
    for kind in sorted(sharing):
        if kind not in ("timeSlicing", "mps"):
            _fail("sharing.%s" % kind, "is not a sharing kind", "use timeSlicing or mps.")
        block = sharing[kind]
        if block is None:
            continue
        if not isinstance(block, dict):
            _fail("sharing.%s" % kind, "is not a mapping", "write it as {renameByDefault: ..., resources: [...]}.")
        for key in block:
            if key not in _SHARING_KEYS:
                _fail("sharing.%s.%s" % (kind, key), "is not a known key", "use %s." % ", ".join(_SHARING_KEYS))
        resources = block.get("resources") or []
        if not isinstance(resources, list):
            _fail("sharing.%s.resources" % kind, "is not a list", "list the resources as [{name, replicas}].")
        for position, resource in enumerate(resources):
            path = "sharing.%s.resources[%d]" % (kind, position)
            if not isinstance(resource, dict):
                _fail(path, "is not a mapping", "write {name: nvidia.com/gpu, replicas: 4}.")
            for key in resource:
                if key not in _RESOURCE_KEYS:
                    _fail("%s.%s" % (path, key), "is not a known key", "use %s." % ", ".join(_RESOURCE_KEYS))
            name = resource.get("name")
            if not isinstance(name, str) or not (name == GPU or name.startswith(MIG_PREFIX)):
                _fail(path + ".name", "is %r" % (name,), "use nvidia.com/gpu or nvidia.com/mig-<profile>.")
            if "replicas" not in resource:
                _fail(path + ".replicas", "is missing", "give the number of replicas (2 or more).")
            entries.append((kind, bool(block.get("renameByDefault")), resource, path))
    return entries


def refusal(strategy, gpus):
    """Why the device plugin refuses to start with this strategy on these GPUs, or None."""
    full = [g for g in gpus if g.get("mig_enabled") is False]
    mig = [g for g in gpus if g.get("mig_enabled")]
    if strategy == "single" and full and mig:
        return ("migStrategy single with %d GPU(s) in MIG mode and %d not: the NVIDIA device plugin refuses to start "
                "(\"%s\", k8s-device-plugin internal/rm/device_map.go) and exposes no nvidia.com/gpu. Fix: enable MIG "
                "on every GPU of the node or on none, or use migStrategy mixed" % (len(mig), len(full), MIXED_MIG_MODES_ERROR))
    return None


def _base_counts(strategy, gpus, mig_layout, notes):
    expected = {}
    full = [g for g in gpus if not g.get("mig_enabled")]
    mig = [g for g in gpus if g.get("mig_enabled")]
    mig_total = sum(int(g.get("mig_devices") or 0) for g in mig)
    if strategy == "none":
        expected[GPU] = len(gpus)
        if mig:
            notes.append("migStrategy none with %d MIG-enabled GPU(s): the plugin exposes them as whole GPUs" % len(mig))
    elif strategy == "single":
        expected[GPU] = len(full) + mig_total
    else:
        expected[GPU] = len(full)
        if mig_layout:
            layout_total = 0
            for profile, count in sorted(mig_layout.items()):
                if not isinstance(profile, str) or not profile.strip():
                    raise DeviceCountError("mig_layout has the key %r. Fix: use MIG profile names such as 1g.10gb."
                                           % (profile,))
                count = _int(count, "mig_layout.%s" % profile, 0)
                expected[MIG_PREFIX + profile.strip()] = count
                layout_total += count
            if mig and layout_total != mig_total:
                notes.append("mig_layout names %d MIG devices but nvidia-smi lists %d" % (layout_total, mig_total))
        elif mig:
            expected[MIG_ANY] = mig_total
    return expected


def expected_resources(plugin_config, gpus, mig_layout=None):
    """The node's expected allocatable per resource (see the module docstring)."""
    notes = []
    unknown = {}
    config = plugin_config or {}
    if not isinstance(config, dict):
        raise DeviceCountError("device_plugin_config is not a mapping. Fix: pass the device plugin's config "
                               "(version: v1, flags, sharing) as a mapping.")
    version = config.get("version", "v1")
    if version != "v1":
        _fail("version", "is %r" % (version,), "use version: v1 (the only config api the plugin reads).")
    if mig_layout is not None and not isinstance(mig_layout, dict):
        raise DeviceCountError("mig_layout is not a mapping. Fix: pass {profile: count}, e.g. {1g.10gb: 7}.")
    strategy = _strategy(config, notes)
    refused = refusal(strategy, gpus)
    if refused:
        _sharing(config)  # a bad sharing block is still reported
        return {"strategy": strategy, "expected": {}, "unknown": {}, "notes": notes, "refused": refused}
    expected = _base_counts(strategy, gpus, mig_layout, notes)
    undescribed = [g for g in gpus if g.get("mig_enabled") is None]
    if strategy == "single" and undescribed and any(g.get("mig_enabled") for g in gpus):
        expected.pop(GPU, None)
        unknown[GPU] = ("migStrategy single with MIG on some GPUs and %d GPU(s) nvidia-smi counts but does not describe: "
                        "if any has MIG off the device plugin refuses to start, else they add MIG devices"
                        % len(undescribed))
    for kind, rename_by_default, resource, path in _sharing(config):
        name = resource["name"]
        replicas = _int(resource["replicas"], path + ".replicas", 1)
        target = resource.get("rename") or (name + ".shared" if rename_by_default else name)
        devices = resource.get("devices", "all")
        if name not in expected:
            if name.startswith(MIG_PREFIX) and MIG_ANY in expected:
                unknown[target] = ("%s shares %s, but the MIG layout per profile is unknown: pass mig_layout"
                                   % (path, name))
            else:
                notes.append("%s shares %s, which this node does not expose" % (path, name))
            continue
        if devices != "all":
            base = expected.pop(name)
            unknown[target] = ("%s shares only the devices %r of %d: the split between %s and %s depends on the "
                               "plugin's choice of devices" % (path, devices, base, name, target))
            if target != name:
                unknown[name] = unknown[target]
            continue
        count = expected.pop(name)
        expected[target] = expected.get(target, 0) + count * replicas
    return {"strategy": strategy, "expected": expected, "unknown": unknown, "notes": notes, "refused": None}


def compare(expected, actual):
    """Per resource ``{resource, expected, actual, matches}``, sorted by resource.

    ``actual`` is the node's allocatable (``{resource: count}``; only
    ``nvidia.com/`` keys are read; a missing resource counts 0).  ``expected``
    is ``expected_resources()``'s result.  ``matches`` is None for a resource
    whose expectation is unknown.  When the plugin refuses to start
    (``expected["refused"]``) no count is right: one ``nvidia.com/gpu`` row with
    ``expected`` None, ``matches`` False and ``why_refused``.
    """
    if not isinstance(actual or {}, dict):
        raise DeviceCountError("device_plugin_resources is not a mapping. Fix: pass the node's allocatable, "
                               "e.g. {nvidia.com/gpu: 8}.")
    counts = {}
    for key, value in (actual or {}).items():
        if not str(key).startswith("nvidia.com/"):
            continue
        try:
            counts[str(key)] = parse_int(value if isinstance(value, int) else str(value), str(key), signed=True)
        except ValueError:
            raise DeviceCountError("device_plugin_resources.%s is %r, not a count. Fix: pass whole numbers, as in the "
                                   "node's allocatable." % (key, value))
        if counts[str(key)] < 0:
            raise DeviceCountError("device_plugin_resources.%s is %s. Fix: use a count of 0 or more." % (key, value))
    actual = counts
    if expected.get("refused"):
        return [{"resource": GPU, "expected": None, "actual": actual.get(GPU, 0), "matches": False,
                 "why_refused": expected["refused"]}]
    rows = []
    names = set(expected["expected"]) | set(expected["unknown"]) | set(actual)
    mig_actual = sum(v for k, v in actual.items() if k.startswith(MIG_PREFIX))
    for name in sorted(names):
        if name.startswith(MIG_PREFIX) and MIG_ANY in expected["expected"] and name != MIG_ANY:
            continue  # counted under the nvidia.com/mig-* total
        if name == MIG_ANY:
            have = mig_actual
        else:
            have = actual.get(name, 0)
        if name in expected["unknown"]:
            rows.append({"resource": name, "expected": None, "actual": have, "matches": None,
                         "why_unknown": expected["unknown"][name]})
            continue
        want = expected["expected"].get(name, 0)
        rows.append({"resource": name, "expected": want, "actual": have, "matches": want == have})
    return rows
