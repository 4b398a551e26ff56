# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""MIG plan and drift: a mig-parted document evaluated against a node's GPUs.

* ``evaluate(document, gpus, ...)``: every config (or one) against a node's
  GPUs: per device entry the concrete placement per GPU, and one-line errors
  naming config, entry, GPU, model and profile.
* ``compare(evaluation, actual, gpus)``: drift of a node's actual MIG state
  from a config, with a per-GPU apply plan (``nvidia-smi mig -cgi <id>:<start>``).
* ``actual_state(query_gpus, gi_rows, ci_rows)``: the node's MIG state from
  ``nvidia-smi -q -x``, ``mig -lgi`` and ``mig -lci``.
* ``layout_text(...)``: one line per GPU, for diffs.

Both ``mig_config`` (read-only) and ``mig_layout`` (apply) plan through here.

Standard library only; Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_geometry import (
    GEOMETRY,
    GeometryError,
    GeometryIndex,
    display_key,
    normalize_device_id,
    unverified_product,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_parted import schema_errors
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.device_counts import refusal as plugin_refusal
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_placement import (
    PlacementCache,
    gpu_label as _gpu_label,
    layout_signature,
)


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
        prefix = "config %s entry %d" % (display_key(name), position)
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
                if unverified_product(gpu.get("product")):
                    errors.append("%s: %s: no verified MIG geometry for %s; pass geometry overrides (the placements "
                                  "nvidia-smi mig -lgipp prints on that GPU)" % (prefix, _gpu_label(gpu), gpu["product"]))
                    continue
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
    prefix = "config %s (device plugin migStrategy single)" % display_key(name)
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


def single_strategy_refusal(config_result):
    """Why the device plugin refuses ``migStrategy: single`` for this layout (MIG on and off GPUs), or None."""
    gpus = [{"mig_enabled": bool(item["mig_enabled"])} for entry in config_result["placements"] for item in entry
            if item["index"] is not None]
    return plugin_refusal("single", gpus)


def expected_resources(config_result, strategy):
    """The extended resources the NVIDIA device plugin advertises for a config's placements.

    ``mixed``: ``nvidia.com/mig-<profile>`` per instance profile, and
    ``nvidia.com/gpu`` for the GPUs with MIG disabled.  ``single``:
    ``nvidia.com/gpu`` counts every MIG instance (all of one profile); a layout
    with MIG on some GPUs and off on others is None under ``single``: the
    device plugin refuses to start there (``single_strategy_refusal``).  Any
    other strategy: None (the plugin's answer depends on more than the layout).
    Only GPUs with an index (present on the node) count.
    """
    if strategy not in ("single", "mixed"):
        return None
    if strategy == "single" and single_strategy_refusal(config_result):
        return None
    resources = {}

    def add(name, count=1):
        resources[name] = resources.get(name, 0) + count

    for entry in config_result["placements"]:
        for item in entry:
            if item["index"] is None:
                continue
            if not item["mig_enabled"]:
                add("nvidia.com/gpu")
                continue
            for inst in item["instances"]:
                add("nvidia.com/gpu" if strategy == "single" else "nvidia.com/mig-%s" % inst["profile"])
    return dict((name, str(count)) for name, count in sorted(resources.items()))
