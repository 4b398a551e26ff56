# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig-parted configs: strict schema, exact feasibility, placement, drift.

mig-parted itself checks only the schema of a config; whether a layout fits a
GPU is found out on the hardware when instance creation fails.  This module
decides it offline and exactly:

* ``schema_errors(document)``: the strict v1 schema, as mig-parted enforces
  it (unknown keys are errors, with their path).
* ``find_placement(layout, model_data)``: a complete search over the allowed
  start slots (``mig_geometry``).  A layout is feasible if and only if some
  non-overlapping placement of all its instances exists; the placement is
  returned, or the reason there is none.
* ``evaluate(document, gpus, ...)``: every config (or one) against a node's
  GPUs: per device entry the concrete placement per GPU, and one-line errors
  naming config, entry, GPU, model and profile.
* ``compare(evaluation, actual)``: drift of a node's actual MIG state from a
  config, with a per-GPU apply plan (``nvidia-smi mig -cgi <id>:<start>``).
* Parsers for ``nvidia-smi mig -lgip``, ``-lgipp``, ``-lgi`` and ``-lci``.

Standard library only; Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig_geometry import (
    GEOMETRY,
    MEDIA_EXTENSION_LIMIT,
    PROFILE_NAME_RE,
    GeometryError,
    GeometryIndex,
    normalize_device_id,
)

SCHEMA_VERSION = "v1"
TOP_LEVEL_KEYS = ("version", "mig-configs")
ENTRY_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")
MIG_STRATEGIES = ("none", "single", "mixed")

# Default compute instance profile id for a GPU instance with N compute slices
# (what ``-cgi ... -C`` creates: one CI spanning the whole GI).
DEFAULT_CI_PROFILE_ID = {1: 0, 2: 1, 3: 2, 4: 3, 6: 5, 7: 4, 8: 7}


class MigParseError(ValueError):
    """nvidia-smi MIG output that cannot be read."""


# --------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------

def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _entry_schema_errors(entry, path):
    errors = []
    if not isinstance(entry, dict):
        return ["%s: a device entry must be a mapping with devices, mig-enabled and mig-devices" % path]
    for key in entry:
        if key not in ENTRY_KEYS:
            errors.append("%s.%s: unknown key (allowed: %s)" % (path, key, ", ".join(ENTRY_KEYS)))
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
                where = "%s.mig-devices.%s" % (path, name)
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
            result[None].append("%s: unknown key (allowed: %s)" % (key, ", ".join(TOP_LEVEL_KEYS)))
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
            path = "mig-configs.%s" % name
            errors = result.setdefault(name, [])
            if not isinstance(entries, list) or not entries:
                errors.append("%s: must be a non-empty list of device entries" % path)
                continue
            for position, entry in enumerate(entries):
                errors.extend(_entry_schema_errors(entry, "%s[%d]" % (path, position)))
    return result


# --------------------------------------------------------------------------
# Feasibility and placement
# --------------------------------------------------------------------------

class Infeasible:
    """Why a layout cannot be placed; ``kind`` is one of the constants below."""

    UNKNOWN_PROFILE = "unknown_profile"
    TOO_MANY = "too_many"
    SLOTS_EXHAUSTED = "slots_exhausted"
    CONFLICT = "conflict"

    def __init__(self, kind, profile, message):
        self.kind = kind
        self.profile = profile
        self.message = message

    def as_dict(self):
        return {"kind": self.kind, "profile": self.profile, "message": self.message}


def _mask(start, size):
    return ((1 << size) - 1) << start


def max_instances(profile, memory_slots):
    """How many instances of one profile fit alone (``-lgip`` Total)."""
    used = 0
    count = 0
    for start in sorted(profile["starts"]):
        mask = _mask(start, profile["size"])
        if start + profile["size"] <= memory_slots and not used & mask:
            used |= mask
            count += 1
    if profile.get("media_extensions"):
        count = min(count, MEDIA_EXTENSION_LIMIT)
    return count


def _fmt_starts(starts):
    return "{%s}" % ",".join(str(s) for s in starts)


def find_placement(layout, model_data):
    """Place ``layout`` ({profile: count}) on one GPU of ``model_data``.

    Returns ``(placement, None)`` where placement is a list of
    ``{profile, profile_id, start, size}`` sorted by start, or
    ``(None, Infeasible)``.  The search is complete: None means no
    non-overlapping placement exists within the allowed starts.
    """
    profiles = model_data["profiles"]
    slots = model_data["memory_slots"]
    slices = model_data["slices"]
    wanted = [(name, count) for name, count in sorted(layout.items()) if count]
    for name, _count in wanted:
        if name not in profiles:
            return None, Infeasible(
                Infeasible.UNKNOWN_PROFILE, name,
                "profile %s does not exist on this model (profiles: %s)"
                % (name, ", ".join(sorted(profiles, key=lambda n: (profiles[n]["slices"], profiles[n]["size"], n)))))
    media = sum(count for name, count in wanted if profiles[name].get("media_extensions"))
    if media > MEDIA_EXTENSION_LIMIT:
        names = [name for name, _c in wanted if profiles[name].get("media_extensions")]
        return None, Infeasible(
            Infeasible.TOO_MANY, names[0],
            "%d +me instances requested (%s) but at most %d fits: +me takes every media engine"
            % (media, ", ".join(names), MEDIA_EXTENSION_LIMIT))
    for name, count in wanted:
        limit = max_instances(profiles[name], slots)
        if count > limit:
            return None, Infeasible(
                Infeasible.TOO_MANY, name,
                "%s: %d requested but at most %d fit on one GPU (starts %s, size %d of %d memory slots)"
                % (name, count, limit, _fmt_starts(profiles[name]["starts"]), profiles[name]["size"], slots))
    need_slots = sum(profiles[name]["size"] * count for name, count in wanted)
    need_slices = sum(profiles[name]["slices"] * count for name, count in wanted)
    detail = ", ".join("%s x%d" % (name, count) for name, count in wanted)
    if need_slots > slots:
        return None, Infeasible(
            Infeasible.SLOTS_EXHAUSTED, wanted[-1][0],
            "slots exhausted: %s need %d memory slots, the GPU has %d" % (detail, need_slots, slots))
    if need_slices > slices:
        return None, Infeasible(
            Infeasible.SLOTS_EXHAUSTED, wanted[-1][0],
            "slots exhausted: %s need %d compute slices, the GPU has %d" % (detail, need_slices, slices))

    # Most constrained first: fewest starts, then largest.
    instances = []
    for name, count in sorted(wanted, key=lambda item: (len(profiles[item[0]]["starts"]), -profiles[item[0]]["size"], item[0])):
        instances.extend([name] * count)
    chosen = []
    best = {"depth": -1, "chosen": []}
    failed = set()

    def search(depth, used, min_start):
        if depth == len(instances):
            return True
        key = (depth, used, min_start)
        if key in failed:
            return False
        if depth > best["depth"]:
            best["depth"] = depth
            best["chosen"] = list(chosen)
        name = instances[depth]
        profile = profiles[name]
        for start in profile["starts"]:
            if start < min_start:
                continue  # identical instances are placed in increasing order
            mask = _mask(start, profile["size"])
            if used & mask:
                continue
            chosen.append((name, start))
            following_same = depth + 1 < len(instances) and instances[depth + 1] == name
            if search(depth + 1, used | mask, start + 1 if following_same else 0):
                return True
            chosen.pop()
        failed.add(key)
        return False

    if search(0, 0, 0):
        placement = [
            {"profile": name, "profile_id": profiles[name]["id"], "start": start, "size": profiles[name]["size"]}
            for name, start in chosen
        ]
        placement.sort(key=lambda item: (item["start"], item["profile"]))
        return placement, None

    # Explain with the deepest partial placement the search reached.
    stuck = instances[best["depth"]]
    profile = profiles[stuck]
    conflicts = []
    for start in profile["starts"]:
        mask = _mask(start, profile["size"])
        for name, placed in best["chosen"]:
            if _mask(placed, profiles[name]["size"]) & mask:
                conflicts.append("start %d overlaps %s at %d" % (start, name, placed))
                break
    placed_text = ", ".join("%s@%d" % (n, s) for n, s in best["chosen"]) or "nothing"
    return None, Infeasible(
        Infeasible.CONFLICT, stuck,
        "no placement exists: with %s placed, %s at every allowed start conflicts (%s)"
        % (placed_text, stuck, "; ".join(conflicts)))


class PlacementCache:
    """Memoises ``find_placement`` per (model, layout) for one geometry table."""

    def __init__(self, geometry):
        self.geometry = geometry
        self._cache = {}

    def place(self, model, layout, layout_key=None):
        if layout_key is None:
            layout_key = layout_signature(layout)
        key = (model, layout_key)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = find_placement(layout, self.geometry[model])
        return found


def layout_signature(layout):
    """A hashable form of a layout ({profile: count}), zero counts dropped."""
    return tuple(sorted((n, c) for n, c in layout.items() if c))


# --------------------------------------------------------------------------
# GPUs of a node
# --------------------------------------------------------------------------

def resolve_gpus(gpus, index=None):
    """Attach a model to each GPU ``{index, device_id | product}``.

    Returns ``(resolved, errors)``; each resolved GPU is
    ``{index, device_id, product, model, pci_bus_id}`` where ``model`` is None
    for a GPU that is not MIG-capable (or unknown to the geometry).
    """
    index = index or GeometryIndex()
    resolved = []
    errors = []
    seen = set()
    for position, gpu in enumerate(gpus or []):
        where = "gpus[%d]" % position
        if not isinstance(gpu, dict):
            errors.append("%s: must be a mapping with index and device_id or product" % where)
            continue
        unknown = [k for k in gpu if k not in ("index", "device_id", "product", "pci_bus_id")]
        if unknown:
            errors.append("%s.%s: unknown key (allowed: index, device_id, product, pci_bus_id)" % (where, unknown[0]))
            continue
        gpu_index = gpu.get("index")
        if isinstance(gpu_index, str) and gpu_index.isdigit():
            gpu_index = int(gpu_index)
        if not _is_int(gpu_index) or gpu_index < 0:
            errors.append("%s.index: %r must be a non-negative integer" % (where, gpu.get("index")))
            continue
        if gpu_index in seen:
            errors.append("%s.index: GPU index %d is given twice" % (where, gpu_index))
            continue
        seen.add(gpu_index)
        device_id = gpu.get("device_id")
        product = gpu.get("product")
        if device_id is None and product is None:
            errors.append("%s: give device_id (0x2330, 0x233010DE or 10de:2330) or product" % where)
            continue
        model = None
        if device_id is not None:
            try:
                device_id = normalize_device_id(device_id)
            except GeometryError as exc:
                errors.append("%s.device_id: %s" % (where, exc))
                continue
            model = index.model_for_device_id(device_id)
            if product is not None and index.model_for_product(product) not in (None, model):
                errors.append("%s: device_id %s (%s) and product %r (%s) disagree"
                              % (where, device_id, model, product, index.model_for_product(product)))
                continue
        else:
            model = index.model_for_product(product)
        resolved.append({
            "index": gpu_index,
            "device_id": device_id,
            "product": product,
            "model": model,
            "pci_bus_id": gpu.get("pci_bus_id"),
        })
    resolved.sort(key=lambda g: g["index"])
    return resolved, errors


def _gpu_label(gpu):
    ident = gpu["device_id"] or gpu["product"]
    return "GPU %d (%s, %s)" % (gpu["index"], gpu["model"] or "not MIG-capable", ident)


def _entry_matches(entry, gpu, filter_models, filter_ids):
    """Whether the entry's device-filter takes this GPU (``devices`` is checked by the caller)."""
    if filter_ids is None:
        return True
    if gpu["device_id"] is not None:
        return gpu["device_id"] in filter_ids
    return gpu["model"] is not None and gpu["model"] in filter_models


def _filter_ids(entry):
    if "device-filter" not in entry:
        return None
    value = entry["device-filter"]
    values = value if isinstance(value, list) else [value]
    ids = set()
    for item in values:
        try:
            ids.add(normalize_device_id(item))
        except (GeometryError, TypeError):
            pass
    return ids


# --------------------------------------------------------------------------
# Evaluation of a document against a node
# --------------------------------------------------------------------------

def evaluate(document, gpus, geometry=None, select=None, mig_strategy=None, cache=None):
    """Validate every config (or ``select``) of ``document`` for ``gpus``.

    ``gpus`` are resolved GPUs (see ``resolve_gpus``).  Returns::

        {valid, errors, configs: {name: {valid, errors, placements}}}

    ``placements`` holds one list per device entry, each with one item per
    GPU the entry applies to: ``{index, model, mig_enabled, instances}``
    (``instances``: the placement).  Models named only by an entry's
    ``device-filter`` (no such GPU given) are checked too and appear with
    ``index: None``.
    """
    geometry = GEOMETRY if geometry is None else geometry
    index = GeometryIndex(geometry)
    cache = cache or PlacementCache(geometry)
    schema = schema_errors(document)
    result = {"valid": True, "errors": list(schema[None]), "configs": {}}
    configs = document.get("mig-configs") if isinstance(document, dict) else None
    if not isinstance(configs, dict):
        result["valid"] = False
        return result
    names = list(configs)
    if select is not None:
        if select not in configs:
            result["errors"].append("select: config %r is not in mig-configs (configs: %s)"
                                    % (select, ", ".join(sorted(str(n) for n in configs))))
            result["valid"] = False
            return result
        names = [select]
    for name in names:
        errors = list(schema.get(name, []))
        placements = []
        if not errors:
            errors, placements = _evaluate_config(name, configs[name], gpus, index, cache, mig_strategy)
        config_valid = not errors
        result["configs"][name] = {"valid": config_valid, "errors": errors, "placements": placements}
        result["errors"].extend(errors)
    result["valid"] = not result["errors"]
    return result


def _evaluate_config(name, entries, gpus, index, cache, mig_strategy):
    errors = []
    placements = []
    claimed = {}
    gpu_indexes = set(g["index"] for g in gpus)
    enabled_layouts = {}
    for position, entry in enumerate(entries):
        prefix = "config %s entry %d" % (name, position)
        entry_placements = []
        placements.append(entry_placements)
        filter_ids = _filter_ids(entry)
        filter_models = set()
        if filter_ids:
            for device_id in filter_ids:
                model = index.model_for_device_id(device_id)
                if model:
                    filter_models.add(model)
        if isinstance(entry.get("devices"), list) and gpus:
            for gpu_index in entry["devices"]:
                if gpu_index not in gpu_indexes:
                    errors.append("%s: devices lists GPU %d but the node has GPUs %s"
                                  % (prefix, gpu_index, ", ".join(str(i) for i in sorted(gpu_indexes))))
        layout = entry.get("mig-devices") or {}
        layout_key = layout_signature(layout)
        enabled = entry.get("mig-enabled")
        covered_models = set()
        by_model = {}
        devices = entry.get("devices")
        wanted = None if devices == "all" else set(devices or [])
        matching = [gpu for gpu in gpus
                    if (wanted is None or gpu["index"] in wanted) and _entry_matches(entry, gpu, filter_models, filter_ids)]
        for gpu in matching:
            if gpu["index"] in claimed:
                errors.append("%s: %s is already configured by entry %d; entries must not overlap"
                              % (prefix, _gpu_label(gpu), claimed[gpu["index"]]))
                continue
            claimed[gpu["index"]] = position
            item = {"index": gpu["index"], "model": gpu["model"], "mig_enabled": enabled, "instances": []}
            entry_placements.append(item)
            if not enabled:
                continue
            enabled_layouts[gpu["index"]] = (gpu, layout)
            if gpu["model"] is None:
                errors.append("%s: %s: MIG is not supported on this GPU (device id unknown to the MIG geometry); "
                              "exclude it with devices or device-filter" % (prefix, _gpu_label(gpu)))
                continue
            covered_models.add(gpu["model"])
            if gpu["model"] not in by_model:
                by_model[gpu["model"]] = cache.place(gpu["model"], layout, layout_key)
            placement, reason = by_model[gpu["model"]]
            if reason is not None:
                errors.append("%s: %s: %s" % (prefix, _gpu_label(gpu), reason.message))
            else:
                item["instances"] = placement
        if enabled:
            for model in sorted(filter_models - covered_models):
                placement, reason = cache.place(model, layout, layout_key)
                item = {"index": None, "model": model, "mig_enabled": True, "instances": placement or []}
                entry_placements.append(item)
                if reason is not None:
                    errors.append("%s: model %s (device-filter): %s" % (prefix, model, reason.message))
    if mig_strategy == "single":
        errors.extend(_single_strategy_errors(name, gpus, claimed, enabled_layouts))
    return errors, placements


def _single_strategy_errors(name, gpus, claimed, enabled_layouts):
    """migStrategy single: every MIG-enabled GPU carries one and the same profile."""
    errors = []
    prefix = "config %s (device plugin migStrategy single)" % name
    profiles_seen = {}
    for gpu_index in sorted(enabled_layouts):
        gpu, layout = enabled_layouts[gpu_index]
        used = sorted(p for p, c in layout.items() if c)
        if len(used) != 1:
            errors.append("%s: entry %d, %s: needs exactly one profile per GPU, found %s"
                          % (prefix, claimed[gpu_index], _gpu_label(gpu), ", ".join(used) or "none"))
            continue
        profiles_seen.setdefault(used[0], []).append(gpu_index)
    if len(profiles_seen) > 1:
        detail = "; ".join("%s on GPU %s" % (p, ",".join(str(i) for i in idx)) for p, idx in sorted(profiles_seen.items()))
        errors.append("%s: every MIG-enabled GPU must use the same profile, found %s; use migStrategy mixed or one profile"
                      % (prefix, detail))
    mig_off = [g["index"] for g in gpus if g["index"] in claimed and g["index"] not in enabled_layouts]
    if enabled_layouts and mig_off:
        errors.append("%s: GPUs %s have MIG disabled while GPUs %s have it enabled; the single strategy needs all or none"
                      % (prefix, ",".join(str(i) for i in mig_off), ",".join(str(i) for i in sorted(enabled_layouts))))
    return errors


# --------------------------------------------------------------------------
# Drift and apply plan
# --------------------------------------------------------------------------

def _enabled(value):
    return str(value or "").strip().lower() == "enabled"


def compare(config_result, actual_gpus, gpus):
    """Compare a valid config's placements with the actual MIG state.

    ``actual_gpus``: ``{index: {mig_mode, mig_mode_pending, instances}}``
    where ``instances`` is a list of ``{profile, profile_id, gpu_instance_id,
    start, size, compute_instances}``.  Returns ``(drift, plan)``: ``drift``
    is a list of ``{index, kind, expected, actual, message}``; ``plan`` holds
    one item per GPU that drifts, with what to do.
    """
    drift = []
    plan = []
    by_index = dict((g["index"], g) for g in gpus)
    for entry in config_result["placements"]:
        for item in entry:
            gpu_index = item["index"]
            if gpu_index is None:
                continue
            gpu = by_index.get(gpu_index, {})
            actual = actual_gpus.get(gpu_index) or {"mig_mode": None, "mig_mode_pending": None, "instances": []}
            want_enabled = bool(item["mig_enabled"])
            current = _enabled(actual.get("mig_mode"))
            pending_value = actual.get("mig_mode_pending")
            pending = _enabled(pending_value) if pending_value not in (None, "") else current
            gpu_drift = []
            expected_mode = "Enabled" if want_enabled else "Disabled"
            if current != want_enabled:
                gpu_drift.append({
                    "index": gpu_index, "kind": "mig_mode", "expected": expected_mode,
                    "actual": actual.get("mig_mode") or "Unknown",
                    "message": "GPU %d: MIG mode is %s, the config wants %s"
                               % (gpu_index, actual.get("mig_mode") or "unknown", expected_mode),
                })
            if pending != current:
                gpu_drift.append({
                    "index": gpu_index, "kind": "mig_mode_pending", "expected": actual.get("mig_mode"),
                    "actual": pending_value,
                    "message": "GPU %d: MIG mode change to %s is pending a GPU reset" % (gpu_index, pending_value),
                })
            want_counts = {}
            for inst in item["instances"]:
                want_counts[inst["profile"]] = want_counts.get(inst["profile"], 0) + 1
            have_counts = {}
            missing_ci = []
            for inst in actual.get("instances") or []:
                have_counts[inst["profile"]] = have_counts.get(inst["profile"], 0) + 1
                if not inst.get("compute_instances"):
                    missing_ci.append(inst.get("gpu_instance_id"))
            if want_enabled and want_counts != have_counts:
                gpu_drift.append({
                    "index": gpu_index, "kind": "instances", "expected": want_counts, "actual": have_counts,
                    "message": "GPU %d: instances %s, the config wants %s"
                               % (gpu_index, _counts_text(have_counts), _counts_text(want_counts)),
                })
            if want_enabled and missing_ci and want_counts == have_counts:
                gpu_drift.append({
                    "index": gpu_index, "kind": "compute_instances", "expected": "one per GPU instance",
                    "actual": "none in GPU instances %s" % ",".join(str(i) for i in missing_ci),
                    "message": "GPU %d: GPU instances %s have no compute instance"
                               % (gpu_index, ",".join(str(i) for i in missing_ci)),
                })
            if not gpu_drift:
                continue
            drift.extend(gpu_drift)
            instances = item["instances"] if want_enabled else []
            plan.append({
                "index": gpu_index,
                "pci_bus_id": gpu.get("pci_bus_id"),
                "model": item["model"],
                "mig_enabled": want_enabled,
                "mode_change": current != want_enabled or pending != want_enabled,
                "destroy": bool(actual.get("instances")),
                "create": ",".join("%d:%d" % (i["profile_id"], i["start"]) for i in instances),
                "instances": instances,
            })
    return drift, plan


def _counts_text(counts):
    if not counts:
        return "none"
    return ", ".join("%s x%d" % (name, counts[name]) for name in sorted(counts))


def actual_state(query_gpus, gi_rows, ci_rows):
    """Join ``parse_query_xml`` GPUs with ``-lgi``/``-lci`` rows by GPU index."""
    state = {}
    for gpu in query_gpus:
        state[gpu["index"]] = {
            "mig_mode": gpu.get("mig_mode"),
            "mig_mode_pending": gpu.get("mig_mode_pending"),
            "instances": [],
        }
    for row in gi_rows:
        gpu = state.setdefault(row["gpu"], {"mig_mode": None, "mig_mode_pending": None, "instances": []})
        gpu["instances"].append({
            "profile": row["profile"],
            "profile_id": row["profile_id"],
            "gpu_instance_id": row["instance_id"],
            "start": row["start"],
            "size": row["size"],
            "compute_instances": [],
        })
    for row in ci_rows:
        for inst in state.get(row["gpu"], {}).get("instances", []):
            if inst["gpu_instance_id"] == row["gpu_instance_id"]:
                inst["compute_instances"].append({"profile_id": row["profile_id"], "instance_id": row["instance_id"]})
    for gpu in state.values():
        gpu["instances"].sort(key=lambda i: (i["start"], i["gpu_instance_id"]))
    return state


# --------------------------------------------------------------------------
# nvidia-smi MIG table parsers
# --------------------------------------------------------------------------

_EMPTY_MARKERS = (
    "no gpu instances found",
    "no compute instances found",
    "no mig-enabled devices found",
    "no mig-supported devices found",
    "no devices were found",
    "no gpu instance profiles found",
)

# |   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
_LGIP_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<memory>[\d.]+)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|$")
_LGIP_CONT = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|$")
# GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1   (also "Placement :")
_LGIPP_ROW = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile\s+ID\s+(?P<id>\d+)\s+Placements?\s*:\s*\{(?P<starts>[\d,\s]*)\}:(?P<size>\d+)")
# |   0  MIG 1g.10gb         19        7          0:1     |
_LGI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<instance>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s*\|$")
# |   0      7       MIG 1g.10gb          0         0          0:1     |
_LCI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<instance>\d+)\s+"
    r"(?P<start>\d+):(?P<size>\d+)\s*\|$")


def _check_unparsed(text, rows, what):
    if rows:
        return
    lowered = (text or "").lower()
    if not lowered.strip() or any(marker in lowered for marker in _EMPTY_MARKERS):
        return
    if re.search(r"^\|\s*(gpu|compute) instance", lowered, re.M) or "gpu instance profiles" in lowered:
        return  # a table header with no rows
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    raise MigParseError("nvidia-smi mig %s output not recognised (first line: %r)" % (what, first[:120]))


def parse_lgip(text):
    """Parse ``nvidia-smi mig -lgip``: one dict per GPU and profile."""
    rows = []
    for line in (text or "").splitlines():
        line = line.strip()
        match = _LGIP_ROW.match(line)
        if match:
            rows.append({
                "gpu": int(match.group("gpu")),
                "profile": match.group("name"),
                "profile_id": int(match.group("id")),
                "instances_free": int(match.group("free")),
                "instances_total": int(match.group("total")),
                "memory_gib": float(match.group("memory")),
                "p2p": match.group("p2p"),
                "sm": int(match.group("sm")),
                "dec": int(match.group("dec")),
                "enc": int(match.group("enc")),
            })
            continue
        cont = _LGIP_CONT.match(line)
        if cont and rows and "ce" not in rows[-1]:
            rows[-1].update({"ce": int(cont.group("ce")), "jpeg": int(cont.group("jpeg")), "ofa": int(cont.group("ofa"))})
    _check_unparsed(text, rows, "-lgip")
    return rows


def parse_lgipp(text):
    """Parse ``nvidia-smi mig -lgipp``: ``{gpu, profile_id, starts, size}``.

    Both spellings, ``Placements:`` and ``Placement :``, are accepted, and
    anything after the ``{..}:size`` field is ignored.
    """
    rows = []
    for line in (text or "").splitlines():
        match = _LGIPP_ROW.match(line.strip())
        if match:
            starts = [int(s) for s in match.group("starts").replace(" ", "").split(",") if s != ""]
            rows.append({
                "gpu": int(match.group("gpu")),
                "profile_id": int(match.group("id")),
                "starts": starts,
                "size": int(match.group("size")),
            })
    if not rows:
        lowered = (text or "").lower()
        if lowered.strip() and not any(marker in lowered for marker in _EMPTY_MARKERS) and "profile id" in lowered:
            raise MigParseError("nvidia-smi mig -lgipp output not recognised")
    return rows


def parse_lgi(text):
    """Parse ``nvidia-smi mig -lgi``: ``{gpu, profile, profile_id, instance_id, start, size}``."""
    rows = []
    for line in (text or "").splitlines():
        match = _LGI_ROW.match(line.strip())
        if match:
            rows.append({
                "gpu": int(match.group("gpu")),
                "profile": match.group("name"),
                "profile_id": int(match.group("id")),
                "instance_id": int(match.group("instance")),
                "start": int(match.group("start")),
                "size": int(match.group("size")),
            })
    _check_unparsed(text, rows, "-lgi")
    return rows


def parse_lci(text):
    """Parse ``nvidia-smi mig -lci``: ``{gpu, gpu_instance_id, profile, profile_id, instance_id, start, size}``."""
    rows = []
    for line in (text or "").splitlines():
        match = _LCI_ROW.match(line.strip())
        if match:
            rows.append({
                "gpu": int(match.group("gpu")),
                "gpu_instance_id": int(match.group("gi")),
                "profile": match.group("name"),
                "profile_id": int(match.group("id")),
                "instance_id": int(match.group("instance")),
                "start": int(match.group("start")),
                "size": int(match.group("size")),
            })
    _check_unparsed(text, rows, "-lci")
    return rows
