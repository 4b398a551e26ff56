# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""MIG placement: exact, bounded feasibility of a layout on one GPU model.

* ``find_placement(layout, model_data)``: a complete search over the allowed
  start slots (``mig_geometry``).  A layout is feasible if and only if some
  non-overlapping placement of all its instances exists; the placement is
  returned, or the reason there is none.  The search is bounded by
  :data:`MAX_SEARCH_STEPS`; past it the answer is "search limit reached"
  (never a guess, never minutes of CPU).
* ``resolve_gpus(gpus, index)``: a node's GPUs with the geometry model each
  resolves to (device id or product).

Standard library only; Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_geometry import (
    MEDIA_EXTENSION_LIMIT,
    GeometryError,
    GeometryIndex,
    normalize_device_id,
)

#: Placement attempts (one per instance tried at one start) before the search
#: gives up.  Every real geometry (8 memory slots) decides any layout within a
#: few hundred steps; only custom geometries with many slots come near this.
MAX_SEARCH_STEPS = 100000


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


class Infeasible:
    """Why a layout cannot be placed; ``kind`` is one of the constants below."""

    UNKNOWN_PROFILE = "unknown_profile"
    TOO_MANY = "too_many"
    SLOTS_EXHAUSTED = "slots_exhausted"
    CONFLICT = "conflict"
    SEARCH_LIMIT = "search_limit"

    def __init__(self, kind, profile, message):
        self.kind = kind
        self.profile = profile
        self.message = message

    def as_dict(self):
        return {"kind": self.kind, "profile": self.profile, "message": self.message}


class _SearchLimit(FleetError):
    pass


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


def find_placement(layout, model_data, max_steps=MAX_SEARCH_STEPS):
    """Place ``layout`` ({profile: count}) on one GPU of ``model_data``.

    Returns ``(placement, None)`` where placement is a list of
    ``{profile, profile_id, start, size}`` sorted by start, or
    ``(None, Infeasible)``.  The search is complete: None means no
    non-overlapping placement exists within the allowed starts.  After
    ``max_steps`` placement attempts the answer is ``Infeasible.SEARCH_LIMIT``.
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
    steps = [0]

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
            steps[0] += 1
            if steps[0] > max_steps:
                raise _SearchLimit()
            chosen.append((name, start))
            following_same = depth + 1 < len(instances) and instances[depth + 1] == name
            if search(depth + 1, used | mask, start + 1 if following_same else 0):
                return True
            chosen.pop()
        failed.add(key)
        return False

    try:
        found = search(0, 0, 0)
    except _SearchLimit:
        return None, Infeasible(
            Infeasible.SEARCH_LIMIT, instances[0],
            "search limit reached: %s on %d memory slots was not decided within %d placement steps; "
            "treat it as invalid (use fewer instances or a real GPU geometry)" % (detail, slots, max_steps))
    if found:
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


def gpu_label(gpu):
    """``GPU 0 (H100-80GB, 0x233010DE)`` for messages."""
    ident = gpu["device_id"] or gpu["product"]
    return "GPU %d (%s, %s)" % (gpu["index"], gpu["model"] or "not MIG-capable", ident)
