# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""mig-parted configs: the strict v1 schema, as mig-parted enforces it.

``schema_errors(document)`` returns every schema error with its path
(unknown keys are errors).  Placement is in ``mig_placement``, the plan and
drift in ``mig_plan``, the nvidia-smi MIG table parsers in ``mig_tables``.

Standard library only; Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_geometry import (
    PROFILE_NAME_RE,
    GeometryError,
    display_key,
    normalize_device_id,
)

SCHEMA_VERSION = "v1"
TOP_LEVEL_KEYS = ("version", "mig-configs")
ENTRY_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _entry_schema_errors(entry, path):
    errors = []
    if not isinstance(entry, dict):
        return ["%s: a device entry must be a mapping with devices, mig-enabled and mig-devices" % path]
    for key in entry:
        if key not in ENTRY_KEYS:
            errors.append("%s.%s: unknown key (allowed: %s)" % (path, display_key(key), ", ".join(ENTRY_KEYS)))
    if "devices" not in entry:
        errors.append("%s.devices: required (all or a list of GPU indexes)" % path)
    else:
        devices = entry["devices"]
        if isinstance(devices, list):
            if not devices:
                errors.append("%s.devices: the list of GPU indexes is empty" % path)
            seen = set()
            for position, index in enumerate(devices):
                if not _is_int(index) or index < 0:
                    errors.append("%s.devices[%d]: %r is not a GPU index (a non-negative integer)"
                                  % (path, position, index))
                elif index in seen:
                    errors.append("%s.devices[%d]: GPU index %d is listed twice" % (path, position, index))
                else:
                    seen.add(index)
        elif devices != "all":
            errors.append("%s.devices: %r must be 'all' or a list of GPU indexes" % (path, devices))
    if "device-filter" in entry:
        device_filter = entry["device-filter"]
        values = device_filter if isinstance(device_filter, list) else [device_filter]
        if isinstance(device_filter, list) and not device_filter:
            errors.append("%s.device-filter: the list is empty" % path)
        for position, value in enumerate(values):
            where = "%s.device-filter[%d]" % (path, position) if isinstance(device_filter, list) else "%s.device-filter" % path
            if not isinstance(value, str):
                errors.append("%s: %r must be a string such as 0x233010DE" % (where, value))
                continue
            try:
                normalize_device_id(value)
            except GeometryError as exc:
                errors.append("%s: %s" % (where, exc))
    if "mig-enabled" not in entry:
        errors.append("%s.mig-enabled: required (true or false)" % path)
    elif not isinstance(entry["mig-enabled"], bool):
        errors.append("%s.mig-enabled: %r must be true or false" % (path, entry["mig-enabled"]))
    enabled = entry.get("mig-enabled")
    if enabled is True and "mig-devices" not in entry:
        errors.append("%s.mig-devices: required when mig-enabled is true (use {} for no instances)" % path)
    if enabled is False and "mig-devices" in entry:
        errors.append("%s.mig-devices: forbidden when mig-enabled is false" % path)
    if "mig-devices" in entry and enabled is not False:
        devices_map = entry["mig-devices"]
        if not isinstance(devices_map, dict):
            errors.append("%s.mig-devices: must be a mapping of profile name to count" % path)
        else:
            counts = []
            for name, count in devices_map.items():
                where = "%s.mig-devices.%s" % (path, display_key(name))
                match = PROFILE_NAME_RE.match(str(name))
                if not match:
                    errors.append("%s: %r is not a MIG profile name (such as 1g.10gb or 1g.10gb+me)" % (where, name))
                elif match.group("ci"):
                    errors.append("%s: compute-instance profiles (%s) are not supported; "
                                  "name the GPU instance profile (%sg.%sgb)"
                                  % (where, name, match.group("slices"), match.group("memory")))
                if not _is_int(count) or count < 0:
                    errors.append("%s: count %r must be a non-negative integer" % (where, count))
                else:
                    counts.append(count)
            if devices_map and counts and len(counts) == len(devices_map) and not any(counts):
                errors.append("%s.mig-devices: every count is 0; give at least one instance or use {}" % path)
    return errors


def schema_errors(document):
    """All schema errors of a mig-parted document, each with its path.

    Returns a dict ``{None: [document-level errors], name: [errors]}`` so that
    callers can attribute errors to configs.
    """
    result = {None: []}
    if not isinstance(document, dict):
        result[None].append("config: the document must be a mapping with version and mig-configs")
        return result
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            result[None].append("%s: unknown key (allowed: %s)" % (display_key(key), ", ".join(TOP_LEVEL_KEYS)))
    if "version" not in document:
        result[None].append("version: required (v1)")
    elif document["version"] != SCHEMA_VERSION:
        result[None].append("version: %r is not supported (v1)" % (document["version"],))
    configs = document.get("mig-configs")
    if "mig-configs" not in document:
        result[None].append("mig-configs: required")
    elif not isinstance(configs, dict) or not configs:
        result[None].append("mig-configs: must be a non-empty mapping of config name to device entries")
    else:
        for name, entries in configs.items():
            path = "mig-configs.%s" % display_key(name)
            errors = result.setdefault(name, [])
            if not isinstance(entries, list) or not entries:
                errors.append("%s: must be a non-empty list of device entries" % path)
                continue
            for position, entry in enumerate(entries):
                errors.extend(_entry_schema_errors(entry, "%s[%d]" % (path, position)))
    return result
