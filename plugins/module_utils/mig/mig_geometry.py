# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""MIG geometry per GPU model, as data.

Every MIG-capable model cuts its GPU into compute slices (7; the A30 has 4)
and memory slots (8; the A30 has 4).  A GPU instance profile may start only
at certain memory slots and covers ``size`` slots from there; this is what
``nvidia-smi mig -lgipp`` prints as ``{allowed starts}:size``.  Two instances
on one GPU must not overlap, and at most one ``+me`` (all media engines)
instance exists per GPU.

The table below is the single source of truth for the collection.  It holds
for each model: PCI device ids (``0xDDDD10DE``, the mig-parted
``device-filter`` form), nvidia-smi product names, slice and slot counts,
and per profile: the GPU instance profile id, compute slices, allowed starts,
size in memory slots, memory in GiB as ``-lgip`` prints it, and the
``+me`` flag.

Sources: the domain brief (profiles, starts, device ids) and real
``nvidia-smi mig -lgip``/``-lgipp`` captures (tests/fixtures/nvidia/09_nvsmi_mig_tables_part.txt).
Each model says where its ``memory_gib`` figures come from in ``memory_source``:
``capture`` (A100 40GB, A100 80GB, H100 80GB: the capture above) or ``derived``
(H100 NVL, H200, B200, A30: not checked against any capture kept here), with ``memory_note``.  NVIDIA's MIG user guide
("Supported MIG Profiles", docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html)
gives each profile's memory as a *fraction* (1/8, 2/8, 4/8, Full; 1/4 on the
A30), not in GiB, so the derived figures are not the guide's and are
unconfirmed.  Memory figures only feed reports, never feasibility.

Users extend or override the table with ``merge_geometry(overrides)``; the
``mig_config`` module exposes that as its ``geometry`` option.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

# Starts and sizes shared by every 7-slice model (A100, H100, H200, B200).
_STARTS_1G = [0, 1, 2, 3, 4, 5, 6]
_STARTS_1G_DOUBLE = [0, 2, 4, 6]
_STARTS_2G = [0, 2, 4]
_STARTS_3G = [0, 4]
_STARTS_4G = [0]
_STARTS_7G = [0]


def _p(profile_id, slices, starts, size, memory_gib, media_extensions=False):
    return {
        "id": profile_id,
        "slices": slices,
        "starts": list(starts),
        "size": size,
        "memory_gib": memory_gib,
        "media_extensions": media_extensions,
    }


def _seven_slice_profiles(one, one_me, one_double, two, three, four, seven):
    """Profiles of a 7-slice/8-slot model: each argument is (name, GiB)."""
    profiles = {
        one[0]: _p(19, 1, _STARTS_1G, 1, one[1]),
        one_me[0]: _p(20, 1, _STARTS_1G, 1, one_me[1], media_extensions=True),
        two[0]: _p(14, 2, _STARTS_2G, 2, two[1]),
        three[0]: _p(9, 3, _STARTS_3G, 4, three[1]),
        four[0]: _p(5, 4, _STARTS_4G, 4, four[1]),
        seven[0]: _p(0, 7, _STARTS_7G, 8, seven[1]),
    }
    if one_double is not None:
        profiles[one_double[0]] = _p(15, 1, _STARTS_1G_DOUBLE, 2, one_double[1])
    return profiles


# The MIG user guide gives memory per profile as a fraction of the GPU's memory, never in GiB.
_DERIVED_MEMORY_NOTE = ("derived GiB, unconfirmed: the MIG user guide gives only fractions of memory and no "
                        "nvidia-smi mig -lgip capture of this model was found")
_CAPTURED_MEMORY_NOTE = "memory_gib as nvidia-smi mig -lgip prints it (tests/fixtures/nvidia/09_nvsmi_mig_tables_part.txt)"
# H100 NVL and H200: fixture 09's header names partial published -lgip captures (harvester/pcidevices mig_test.go,
# NVIDIA/gpu-operator#900, NVIDIA/mig-parted#120) that the fixture does not keep, so nothing here checks them.
_UNKEPT_CAPTURE_NOTE = ("unconfirmed here: the MIG user guide gives only fractions of memory; partial published -lgip "
                        "captures exist (fixture 09 header) but are not kept or tested")

GEOMETRY = {
    "A100-40GB": {
        "description": "NVIDIA A100 40GB (SXM4 and PCIe; A800 40GB)",
        # 0x20B0 per the brief; 0x20B1/0x20F1/0x20F6 share this geometry in
        # mig-parted's config-default.yaml.
        "device_ids": ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"],
        "products": ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A800-SXM4-40GB"],
        "memory_source": "capture",
        "memory_note": _CAPTURED_MEMORY_NOTE,
        "slices": 7,
        "memory_slots": 8,
        "profiles": _seven_slice_profiles(
            ("1g.5gb", 4.75), ("1g.5gb+me", 4.75), ("1g.10gb", 9.75), ("2g.10gb", 9.75),
            ("3g.20gb", 19.62), ("4g.20gb", 19.62), ("7g.40gb", 39.50)),
    },
    "A100-80GB": {
        "description": "NVIDIA A100 80GB (SXM4 and PCIe; A800 80GB)",
        "device_ids": ["0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"],
        "products": ["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe"],
        "memory_source": "capture",
        "memory_note": _CAPTURED_MEMORY_NOTE,
        "slices": 7,
        "memory_slots": 8,
        # 1g.20gb (ID 15) appears with R525+ drivers; 515 lacks it.
        "profiles": _seven_slice_profiles(
            ("1g.10gb", 9.50), ("1g.10gb+me", 9.50), ("1g.20gb", 19.50), ("2g.20gb", 19.50),
            ("3g.40gb", 39.25), ("4g.40gb", 39.25), ("7g.80gb", 79.00)),
    },
    "H100-80GB": {
        "description": "NVIDIA H100 80GB (SXM5 HBM3 and PCIe; H800 80GB)",
        "device_ids": ["0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"],
        "products": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H800", "NVIDIA H800 PCIe"],
        "memory_source": "capture",
        "memory_note": _CAPTURED_MEMORY_NOTE,
        "slices": 7,
        "memory_slots": 8,
        "profiles": _seven_slice_profiles(
            ("1g.10gb", 9.75), ("1g.10gb+me", 9.75), ("1g.20gb", 19.62), ("2g.20gb", 19.62),
            ("3g.40gb", 39.50), ("4g.40gb", 39.50), ("7g.80gb", 79.25)),
    },
    "H100-NVL": {
        "description": "NVIDIA H100 NVL 94GB (H800 NVL)",
        "device_ids": ["0x232110DE", "0x233A10DE"],
        "products": ["NVIDIA H100 NVL", "NVIDIA H800 NVL"],
        "memory_source": "derived",
        "memory_note": _UNKEPT_CAPTURE_NOTE,
        "slices": 7,
        "memory_slots": 8,
        "profiles": _seven_slice_profiles(
            ("1g.12gb", 10.75), ("1g.12gb+me", 10.75), ("1g.24gb", 21.62), ("2g.24gb", 21.62),
            ("3g.47gb", 46.38), ("4g.47gb", 46.38), ("7g.94gb", 93.12)),
    },
    "H200-141GB": {
        "description": "NVIDIA H200 141GB (SXM and NVL)",
        "device_ids": ["0x233510DE", "0x233B10DE"],
        "products": ["NVIDIA H200", "NVIDIA H200 NVL"],
        "memory_source": "derived",
        "memory_note": _UNKEPT_CAPTURE_NOTE,
        "slices": 7,
        "memory_slots": 8,
        "profiles": _seven_slice_profiles(
            ("1g.18gb", 16.00), ("1g.18gb+me", 16.00), ("1g.35gb", 32.50), ("2g.35gb", 32.50),
            ("3g.71gb", 69.50), ("4g.71gb", 69.50), ("7g.141gb", 140.00)),
    },
    "B200": {
        "description": "NVIDIA B200 180GB",
        "device_ids": ["0x290110DE"],
        "products": ["NVIDIA B200"],
        "memory_source": "derived",
        "memory_note": _DERIVED_MEMORY_NOTE,
        "slices": 7,
        "memory_slots": 8,
        "profiles": _seven_slice_profiles(
            ("1g.23gb", 21.75), ("1g.23gb+me", 21.75), ("1g.45gb", 44.00), ("2g.45gb", 44.00),
            ("3g.90gb", 89.25), ("4g.90gb", 89.25), ("7g.180gb", 178.50)),
    },
    "A30": {
        "description": "NVIDIA A30 24GB",
        "device_ids": ["0x20B710DE"],
        "products": ["NVIDIA A30"],
        "memory_source": "derived",
        "memory_note": _DERIVED_MEMORY_NOTE,
        "slices": 4,
        "memory_slots": 4,
        "profiles": {
            "1g.6gb": _p(14, 1, [0, 1, 2, 3], 1, 5.81),
            "1g.6gb+me": _p(21, 1, [0, 1, 2, 3], 1, 5.81, media_extensions=True),
            "2g.12gb": _p(5, 2, [0, 2], 2, 11.69),
            "2g.12gb+me": _p(6, 2, [0, 2], 2, 11.69, media_extensions=True),
            "4g.24gb": _p(0, 4, [0], 4, 23.44),
        },
    },
}

# At most this many +me instances exist on one GPU: they take every media engine.
MEDIA_EXTENSION_LIMIT = 1

# "1g.10gb", "7g.141gb", "1g.10gb+me"; Blackwell adds "-me" (no media
# engine), "+me.all" (every media engine) and "+gfx" (graphics), as the
# RTX PRO 6000 Blackwell advertises them (1g.24gb-me, 2g.48gb+me.all,
# 4g.96gb+gfx).  mig-parted's compute-instance form "1c.2g.10gb" is
# recognised so that it can be reported clearly.  ``media_extensions`` (at
# most one per GPU) is implied by "+me" and "+me.all".
PROFILE_NAME_RE = re.compile(r"^(?:(?P<ci>[1-9])c\.)?(?P<slices>[1-9])g\.(?P<memory>[1-9][0-9]*)gb"
                             r"(?:(?P<me>\+me(?:\.all)?)|-me|\+gfx)?$")

# MIG-capable products whose profile ids and placements we could not confirm
# from NVIDIA's MIG user guide or mig-parted's config-default.yaml (only their
# profile names are public in what we could check).  A GPU whose product name
# starts with one of these is refused with a clear message instead of a guess;
# a ``geometry`` override that names its device id or product makes it usable.
UNVERIFIED_PRODUCTS = ("gh200", "gb200", "gb300", "b300", "rtx pro 6000 blackwell")


def unverified_product(product):
    """The product name when it is a known MIG GPU without a verified geometry, else None."""
    if not product:
        return None
    text = re.sub(r"\s+", " ", str(product).strip()).lower()
    if text.startswith("nvidia "):
        text = text[len("nvidia "):]
    return product if any(text.startswith(prefix) for prefix in UNVERIFIED_PRODUCTS) else None


_DEVICE_ID_RE = (
    re.compile(r"^0x(?P<device>[0-9a-fA-F]{4})(?P<vendor>[0-9a-fA-F]{4})$"),   # 0x233010DE
    re.compile(r"^(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})$"),    # 10de:2330
    re.compile(r"^0x(?P<device>[0-9a-fA-F]{4})$"),                            # 0x2330
    re.compile(r"^(?P<device>[0-9a-fA-F]{4})(?P<vendor>[0-9a-fA-F]{4})$"),     # 233010DE (nvidia-smi -q -x)
)
NVIDIA_VENDOR = "10de"


def display_key(value):
    """A key as it appears in an error path: plain when printable, else its repr (never a newline)."""
    if isinstance(value, str) and value and value.isprintable() and len(value) <= MAX_TEXT_KEY:
        return value
    return repr(value)[:MAX_TEXT_KEY]


MAX_TEXT_KEY = 80


class GeometryError(FleetError, ValueError):
    """A geometry override or a device id is malformed."""


_DEVICE_ID_CACHE = {}


def normalize_device_id(text):
    """Return a PCI device id in mig-parted's ``0xDDDD10DE`` form (upper case).

    Accepts ``0x2330``, ``0x233010DE``, ``233010DE`` (nvidia-smi ``-q -x``) and
    ``10de:2330`` (lspci).  A vendor other than NVIDIA's is kept as given.
    Raises ``GeometryError`` for anything else.
    """
    cached = _DEVICE_ID_CACHE.get(text)  # configs repeat the same few ids thousands of times
    if cached is not None:
        return cached
    candidate = str(text).strip()
    for pattern in _DEVICE_ID_RE:
        match = pattern.match(candidate)
        if match:
            vendor = (match.groupdict().get("vendor") or NVIDIA_VENDOR)
            result = "0x%s%s" % (match.group("device").upper(), vendor.upper())
            if isinstance(text, str) and len(_DEVICE_ID_CACHE) < 4096:
                _DEVICE_ID_CACHE[text] = result
            return result
    raise GeometryError(
        "%r is not a PCI device id; use 0x2330, 0x233010DE or 10de:2330" % (candidate,))


def _normal_product(name):
    text = re.sub(r"\s+", " ", str(name).strip()).lower()
    if text.startswith("nvidia "):
        text = text[len("nvidia "):]
    return text


#: Bounds on geometry overrides: no GPU has more than 8 memory slots or 7
#: compute slices; these leave room for any future model and keep the
#: placement search small.
MAX_MEMORY_SLOTS = 32
MAX_SLICES = 32
MAX_MODELS = 64
MAX_PROFILES = 64
MAX_LIST_ITEMS = 64
MAX_TEXT = 200
MODEL_KEYS = ("description", "device_ids", "products", "slices", "memory_slots", "profiles", "memory_source", "memory_note")
# Where a model's memory_gib figures come from: a real nvidia-smi capture, or derived (unconfirmed).
MEMORY_SOURCES = ("capture", "derived")
PROFILE_KEYS = ("id", "slices", "starts", "size", "memory_gib", "media_extensions")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_text(value, path):
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
        raise GeometryError("%s: %r must be a non-empty string of at most %d characters" % (path, value, MAX_TEXT))


def _check_int(value, path, low, high):
    if not _is_int(value) or not low <= value <= high:
        raise GeometryError("%s: %r must be an integer from %d to %d" % (path, value, low, high))


def check_model(model, data, path=None):
    """Validate one complete model (the built-in table and merged overrides alike).

    Raises ``GeometryError`` naming the path of the first problem.
    """
    path = path or "geometry.%s" % display_key(model)
    if not isinstance(data, dict):
        raise GeometryError("%s must be a mapping" % path)
    for key in data:
        if key not in MODEL_KEYS:
            raise GeometryError("%s.%s is not a known key (known: %s)" % (path, display_key(key), ", ".join(MODEL_KEYS)))
    _check_text(data.get("description", model), "%s.description" % path)
    if data.get("memory_source") is not None and data["memory_source"] not in MEMORY_SOURCES:
        raise GeometryError("%s.memory_source: %r must be one of %s" % (path, data["memory_source"], ", ".join(MEMORY_SOURCES)))
    if data.get("memory_note") is not None:
        _check_text(data["memory_note"], "%s.memory_note" % path)
    _check_int(data.get("memory_slots"), "%s.memory_slots" % path, 1, MAX_MEMORY_SLOTS)
    _check_int(data.get("slices"), "%s.slices" % path, 1, MAX_SLICES)
    for key in ("device_ids", "products"):
        items = data.get(key, [])
        if not isinstance(items, list) or len(items) > MAX_LIST_ITEMS:
            raise GeometryError("%s.%s must be a list of at most %d strings" % (path, key, MAX_LIST_ITEMS))
        for position, item in enumerate(items):
            _check_text(item, "%s.%s[%d]" % (path, key, position))
            if key == "device_ids":
                try:
                    normalize_device_id(item)
                except GeometryError as exc:
                    raise GeometryError("%s.%s[%d]: %s" % (path, key, position, exc))
    profiles = data.get("profiles")
    if not isinstance(profiles, dict) or not profiles or len(profiles) > MAX_PROFILES:
        raise GeometryError("%s.profiles must be a mapping of 1 to %d profile names to profiles" % (path, MAX_PROFILES))
    ids = {}
    for name, profile in profiles.items():
        ppath = "%s.profiles.%s" % (path, display_key(name))
        if not isinstance(name, str) or not PROFILE_NAME_RE.match(name):
            raise GeometryError("%s: profile names look like 1g.10gb or 1g.10gb+me" % ppath)
        if not isinstance(profile, dict):
            raise GeometryError("%s must be a mapping" % ppath)
        for key in profile:
            if key not in PROFILE_KEYS:
                raise GeometryError("%s.%s is not a known key (known: %s)" % (ppath, display_key(key), ", ".join(PROFILE_KEYS)))
        for key in ("id", "starts", "size"):
            if key not in profile:
                raise GeometryError("%s.%s is required" % (ppath, key))
        _check_int(profile["id"], "%s.id" % ppath, 0, 255)
        if profile["id"] in ids:
            raise GeometryError("%s.id: %d is also the id of %s" % (ppath, profile["id"], ids[profile["id"]]))
        ids[profile["id"]] = name
        _check_int(profile.get("slices"), "%s.slices" % ppath, 1, data["slices"])
        _check_int(profile["size"], "%s.size" % ppath, 1, data["memory_slots"])
        starts = profile["starts"]
        if not isinstance(starts, list) or not starts or len(starts) > data["memory_slots"]:
            raise GeometryError("%s.starts must be a non-empty list of at most %d slots"
                                % (ppath, data["memory_slots"]))
        for position, start in enumerate(starts):
            if not _is_int(start) or start < 0 or start + profile["size"] > data["memory_slots"]:
                raise GeometryError(
                    "%s.starts[%d]: %r must be a slot with start + size <= %d"
                    % (ppath, position, start, data["memory_slots"]))
        if len(set(starts)) != len(starts):
            raise GeometryError("%s.starts lists a slot twice" % ppath)
        memory = profile.get("memory_gib")
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory < 0):
            raise GeometryError("%s.memory_gib: %r must be a non-negative number or null" % (ppath, memory))
        if not isinstance(profile.get("media_extensions"), bool):
            raise GeometryError("%s.media_extensions: %r must be true or false" % (ppath, profile.get("media_extensions")))


def merge_geometry(overrides=None, base=None):
    """Return a deep copy of ``base`` (default ``GEOMETRY``) with ``overrides``.

    ``overrides`` maps model name to a model dict.  A known model is merged
    key by key (``profiles`` profile by profile); a new model must be complete.
    Every model touched is then checked by ``check_model``, the schema the
    built-in table passes too.  Raises ``GeometryError`` naming the path of
    the first problem.
    """
    merged = copy.deepcopy(GEOMETRY if base is None else base)
    if not overrides:
        return merged
    if not isinstance(overrides, dict):
        raise GeometryError("geometry must be a mapping of model name to model data")
    if len(overrides) > MAX_MODELS:
        raise GeometryError("geometry: %d models given, at most %d are accepted" % (len(overrides), MAX_MODELS))
    for model, data in overrides.items():
        path = "geometry.%s" % display_key(model)
        if not isinstance(model, str) or not model.isprintable():
            raise GeometryError("%s: a model name must be a printable string" % path)
        _check_text(model, "geometry: model name")
        if not isinstance(data, dict):
            raise GeometryError("%s must be a mapping" % path)
        for key in data:
            if key not in MODEL_KEYS:
                raise GeometryError("%s.%s is not a known key (known: %s)" % (path, display_key(key), ", ".join(MODEL_KEYS)))
        target = merged.setdefault(model, {"description": model, "device_ids": [], "products": [], "profiles": {}})
        for key in ("description", "slices", "memory_slots", "memory_source", "memory_note"):
            if key in data:
                target[key] = data[key]
        for key in ("device_ids", "products"):
            if key in data:
                if not isinstance(data[key], list):
                    raise GeometryError("%s.%s must be a list" % (path, key))
                target[key] = list(data[key])
        profiles = data.get("profiles")
        if profiles is not None and not isinstance(profiles, dict):
            raise GeometryError("%s.profiles must be a mapping of profile name to profile" % path)
        for name, profile in (profiles or {}).items():
            ppath = "%s.profiles.%s" % (path, display_key(name))
            if not isinstance(name, str) or not PROFILE_NAME_RE.match(name):
                raise GeometryError("%s: profile names look like 1g.10gb or 1g.10gb+me" % ppath)
            if not isinstance(profile, dict):
                raise GeometryError("%s must be a mapping" % ppath)
            entry = dict(target["profiles"].get(name) or {})
            entry.update(profile)
            match = PROFILE_NAME_RE.match(name)
            entry.setdefault("slices", int(match.group("slices")))
            entry.setdefault("media_extensions", bool(match.group("me")))
            entry.setdefault("memory_gib", None)
            target["profiles"][name] = entry
        check_model(model, target, path)
        target["device_ids"] = [normalize_device_id(d) for d in target.get("device_ids", [])]
    return merged


class GeometryIndex:
    """Lookups over one geometry table (device id or product -> model)."""

    def __init__(self, geometry=None):
        self.geometry = GEOMETRY if geometry is None else geometry
        self._by_device = {}
        self._by_product = {}
        for model, data in self.geometry.items():
            for device_id in data.get("device_ids", []):
                self._by_device[normalize_device_id(device_id)] = model
            for product in data.get("products", []):
                self._by_product[_normal_product(product)] = model

    def model_for_device_id(self, device_id):
        """Model name for a device id in any accepted spelling, or None."""
        try:
            return self._by_device.get(normalize_device_id(device_id))
        except GeometryError:
            return None

    def model_for_product(self, product):
        """Model name for an nvidia-smi product name (case and ``NVIDIA `` prefix ignored), or None."""
        if product is None:
            return None
        return self._by_product.get(_normal_product(product))

    def profile(self, model, name):
        """The profile dict, or None when the model has no such profile."""
        data = self.geometry.get(model)
        if data is None:
            return None
        return data["profiles"].get(name)

    def profile_by_id(self, model, profile_id):
        """(name, profile) for a GPU instance profile id, or (None, None)."""
        data = self.geometry.get(model) or {}
        for name, profile in data.get("profiles", {}).items():
            if profile["id"] == profile_id:
                return name, profile
        return None, None

    def models(self):
        return sorted(self.geometry)
