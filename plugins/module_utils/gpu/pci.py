# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""PCI bus ids and NVIDIA GPU counting from lspci or sysfs.

Every tool spells a PCI address differently:

* nvidia-smi: ``00000000:3B:00.0`` (32-bit domain, upper case);
* the kernel log: ``PCI:0000:3b:00`` (no function; MIG adds `` GPU-I:05``);
* lspci: ``3b:00.0``, or ``0000:3b:00.0`` with ``-D``;
* virtual machines use non-zero domains (``0001:``, ``c941:``).

``normalize_bus_id`` turns every one of them into ``dddd:bb:dd.f``, lower
case (a domain wider than 16 bits keeps its digits), and ``bus_id_key``
gives the numbers to compare, so ``00000000:3B:00.0`` equals ``PCI:0000:3b:00``.

GPUs are counted by PCI class 0302 (3D controller) or 0300 (VGA) with vendor
10de.  NVSwitches are class 0680 (bridge) and are never counted as GPUs.
SR-IOV virtual functions (an RTX PRO 6000 Blackwell Server Edition shows each
VF as another ``3D controller [0302] ... [10de:2bb5]``, tests/fixtures/pci/)
are not GPUs either: sysfs marks them with a ``physfn`` link and they are
skipped; lspci text cannot tell them apart, so ``possible_virtual_functions``
names the GPU-class functions at a PCI function other than 0.

Public API (shared with other modules, keep stable):

* ``PciBusIdError`` (ValueError), ``normalize_bus_id(text)``, ``bus_id_key(text)``,
  ``same_bus_id(a, b)``, ``find_bus_id(text)`` (first id inside free text);
* ``parse_lspci(text)`` -> list of device dicts
  ``{pci_bus_id, class_code, class_name, vendor_id, device_id, description}``
  (``class_code``/``vendor_id``/``device_id`` are 4 lower-case hex digits or None);
* ``read_sysfs_pci_devices(root='/sys/bus/pci/devices')`` -> the same dicts, plus
  ``virtual_function: True`` and ``physfn`` (its physical function) for an SR-IOV VF;
* ``nvidia_gpus(devices)``, ``nvidia_nvswitches(devices)``, ``count_nvidia_gpus(devices)``,
  ``nvidia_virtual_functions(devices)``, ``possible_virtual_functions(devices)``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.lazy_regex import lazy_compile

NVIDIA_VENDOR_ID = "10de"
GPU_CLASS_CODES = ("0302", "0300")
BRIDGE_CLASS_CODE = "0680"

# Class names lspci prints without -nn, mapped to the class code.
_CLASS_NAMES = {
    "3d controller": "0302",
    "vga compatible controller": "0300",
    "bridge": "0680",
    "pci bridge": "0604",
    "host bridge": "0600",
    "isa bridge": "0601",
    "ethernet controller": "0200",
    "infiniband controller": "0207",
    "non-volatile memory controller": "0108",
    "communication controller": "0780",
}

_VENDOR_NAMES = {
    "nvidia corporation": NVIDIA_VENDOR_ID,
}

_HEX = "[0-9a-fA-F]"
_BUS_ID_RE = lazy_compile(
    r"^(?:PCI:)?(?:(?P<domain>%s{1,8}):)?(?P<bus>%s{1,2}):(?P<device>%s{1,2})(?:\.(?P<function>[0-7]))?$"
    % (_HEX, _HEX, _HEX)
)
# Inside free text: require a domain or a function so that times such as
# "11:43:09" are not taken for bus ids.
_BUS_ID_IN_TEXT_RE = lazy_compile(
    r"(?<![0-9a-fA-F:])(?:PCI:)?(?:(%s{4,8}):(%s{2}):(%s{2})(?:\.([0-7]))?|(%s{2}):(%s{2})\.([0-7]))(?![0-9a-fA-F:])"
    % (_HEX, _HEX, _HEX, _HEX, _HEX)
)

_LSPCI_LINE_RE = lazy_compile(
    r"^(?P<slot>(?:%s{4,8}:)?%s{2}:%s{2}\.[0-7])\s+(?P<rest>.+)$" % (_HEX, _HEX, _HEX)
)
_LSPCI_CLASS_NN_RE = lazy_compile(r"^(?P<name>.*?)\s*\[(?P<code>%s{4})\]$" % _HEX)
_LSPCI_IDS_RE = lazy_compile(r"\[(?P<vendor>%s{4}):(?P<device>%s{4})\]" % (_HEX, _HEX))
_LSPCI_NUMERIC_RE = lazy_compile(r"^(?P<code>%s{4}):\s+(?P<vendor>%s{4}):(?P<device>%s{4})" % (_HEX, _HEX, _HEX))
_LSPCI_PLAIN_DEVICE_RE = lazy_compile(r"\bDevice (?P<device>%s{4})\b" % _HEX)


#: Input limits (docs/DEVELOPING.md "Input limits"): lspci prints one short
#: line per function (about 100 characters); a longer line is not a device
#: line, and no node has output anywhere near the size bound.
MAX_LSPCI_CHARS = 32 * 1024 * 1024
MAX_LSPCI_LINE = 1024


class PciBusIdError(FleetError, ValueError):
    """A text is not a PCI bus id in any known spelling."""


class LspciParseError(FleetError, ValueError):
    """lspci output that cannot be read (past the size bound)."""


def bus_id_key(text):
    """Return ``(domain, bus, device, function)`` as integers.

    A missing domain is 0 and a missing function (kernel log form) is 0.
    Raises ``PciBusIdError`` for anything else.
    """
    if text is None:
        raise PciBusIdError("PCI bus id is missing")
    candidate = str(text).strip()
    match = _BUS_ID_RE.match(candidate)
    if not match:
        raise PciBusIdError("%r is not a PCI bus id (expected forms such as 0000:3b:00.0)" % (candidate,))
    if match.group("domain") is None and match.group("function") is None:
        # "3b:00" is neither the kernel's form (which has a domain) nor lspci's (which has a function)
        raise PciBusIdError("%r is not a PCI bus id (expected forms such as 0000:3b:00.0)" % (candidate,))
    domain = int(match.group("domain") or "0", 16)
    return (
        domain,
        int(match.group("bus"), 16),
        int(match.group("device"), 16),
        int(match.group("function") or "0", 16),
    )


def format_bus_id(key):
    """Format a ``bus_id_key`` tuple as ``dddd:bb:dd.f``."""
    domain, bus, device, function = key
    return "%04x:%02x:%02x.%x" % (domain, bus, device, function)


def normalize_bus_id(text):
    """Normalise any spelling of a PCI address to ``dddd:bb:dd.f`` (lower case)."""
    return format_bus_id(bus_id_key(text))


def same_bus_id(first, second):
    """Compare two bus ids as numbers; False when either cannot be parsed."""
    try:
        return bus_id_key(first) == bus_id_key(second)
    except PciBusIdError:
        return False


def find_bus_id(text):
    """Return the first PCI bus id found in free text, normalised, or None."""
    if not text:
        return None
    match = _BUS_ID_IN_TEXT_RE.search(text)
    if not match:
        return None
    if match.group(1) is not None:
        key = (int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16), int(match.group(4) or "0", 16))
    else:
        key = (0, int(match.group(5), 16), int(match.group(6), 16), int(match.group(7), 16))
    return format_bus_id(key)


def _device(bus_id, class_code, class_name, vendor_id, device_id, description):
    return {
        "pci_bus_id": bus_id,
        "class_code": class_code,
        "class_name": class_name,
        "vendor_id": vendor_id,
        "device_id": device_id,
        "description": description,
    }


def _parse_lspci_line(slot, rest):
    numeric = _LSPCI_NUMERIC_RE.match(rest)
    if numeric:  # lspci -n: "0302: 10de:2330 (rev a1)"
        return _device(
            normalize_bus_id(slot), numeric.group("code").lower(), None,
            numeric.group("vendor").lower(), numeric.group("device").lower(), rest.strip(),
        )
    if ": " not in rest:
        return None
    class_part, description = rest.split(": ", 1)
    class_match = _LSPCI_CLASS_NN_RE.match(class_part.strip())
    if class_match:
        class_name = class_match.group("name").strip()
        class_code = class_match.group("code").lower()
    else:
        class_name = class_part.strip()
        class_code = _CLASS_NAMES.get(class_name.lower())
    vendor_id = device_id = None
    ids = None
    for ids in _LSPCI_IDS_RE.finditer(description):
        pass  # the last [vvvv:dddd] is the id pair; names may hold brackets too
    if ids is not None:
        vendor_id = ids.group("vendor").lower()
        device_id = ids.group("device").lower()
    else:
        for vendor_name, vendor in _VENDOR_NAMES.items():
            if description.lower().startswith(vendor_name):
                vendor_id = vendor
                plain = _LSPCI_PLAIN_DEVICE_RE.search(description)
                if plain:
                    device_id = plain.group("device").lower()
                break
    return _device(normalize_bus_id(slot), class_code, class_name, vendor_id, device_id, description.strip())


def parse_lspci(text):
    """Parse ``lspci``, ``lspci -nn``, ``-nnD``, ``-Dnn`` or ``-n`` output.

    Lines that do not start with a slot (shell prompts, comments, ``-v``
    detail lines) are skipped, and so are lines longer than
    :data:`MAX_LSPCI_LINE`; input past :data:`MAX_LSPCI_CHARS` raises
    ``LspciParseError``.  Without ``-nn`` the class and vendor are
    read from their names, which is enough to count NVIDIA GPUs.
    """
    if text and len(text) > MAX_LSPCI_CHARS:
        raise LspciParseError("lspci output is longer than %d MiB; no lspci prints that much"
                              % (MAX_LSPCI_CHARS // (1024 * 1024)))
    devices = []
    for line in (text or "").splitlines():
        if len(line) > MAX_LSPCI_LINE:
            continue  # not a device line; keeps the class regex linear
        match = _LSPCI_LINE_RE.match(line.strip())
        if not match:
            continue
        device = _parse_lspci_line(match.group("slot"), match.group("rest"))
        if device is not None:
            devices.append(device)
    return devices


def _read_hex_file(path):
    try:
        with open(path) as handle:
            value = handle.read().strip()
    except (IOError, OSError):
        return None
    if value.lower().startswith("0x"):
        value = value[2:]
    return value.lower() or None


def read_sysfs_pci_devices(root="/sys/bus/pci/devices"):
    """Read PCI devices from sysfs (``root`` is injectable for tests).

    Each entry is a directory named by its bus id holding ``class``
    (``0x030200``), ``vendor`` (``0x10de``) and ``device`` files.
    Returns ``[]`` when ``root`` does not exist.
    """
    devices = []
    try:
        names = sorted(os.listdir(root))
    except (IOError, OSError):
        return devices
    for name in names:
        try:
            bus_id = normalize_bus_id(name)
        except PciBusIdError:
            continue
        path = os.path.join(root, name)
        class_value = _read_hex_file(os.path.join(path, "class"))
        device = _device(
            bus_id,
            class_value[:4] if class_value and len(class_value) >= 4 else class_value,
            None,
            _read_hex_file(os.path.join(path, "vendor")),
            _read_hex_file(os.path.join(path, "device")),
            None,
        )
        # An SR-IOV virtual function has a "physfn" link to its physical function
        # (Linux drivers/pci/iov.c, pci_iov_sysfs_link); it is not a GPU of its own.
        physfn = os.path.join(path, "physfn")
        if os.path.islink(physfn):
            device["virtual_function"] = True
            try:
                device["physfn"] = normalize_bus_id(os.path.basename(os.readlink(physfn)))
            except (OSError, PciBusIdError):
                device["physfn"] = None
        devices.append(device)
    return devices


def possible_virtual_functions(devices):
    """NVIDIA GPU-class functions that are likely SR-IOV virtual functions although lspci text cannot say so:
    those at a PCI function other than 0.  A GPU is function 0 of its device (its other functions are audio,
    USB or UCSI controllers); VFs fill the functions after it (``0001:04:00.2``, ``0000:8c:03.3``, ...).
    A VF at function 0 of a later device is not caught here, but its siblings are."""
    return [d for d in nvidia_gpus(devices) if d.get("pci_bus_id") and not d["pci_bus_id"].endswith(".0")]


def nvidia_gpus(devices):
    """NVIDIA GPUs: vendor 10de with class 0302 or 0300 (NVSwitches and SR-IOV virtual functions excluded)."""
    return [d for d in devices if d.get("vendor_id") == NVIDIA_VENDOR_ID and d.get("class_code") in GPU_CLASS_CODES
            and not d.get("virtual_function")]


def nvidia_virtual_functions(devices):
    """NVIDIA GPU-class SR-IOV virtual functions (known only from sysfs: ``physfn``)."""
    return [d for d in devices if d.get("vendor_id") == NVIDIA_VENDOR_ID and d.get("class_code") in GPU_CLASS_CODES
            and d.get("virtual_function")]


def nvidia_nvswitches(devices):
    """NVIDIA bridges (class 0680): NVSwitches on HGX boards."""
    return [d for d in devices if d.get("vendor_id") == NVIDIA_VENDOR_ID and d.get("class_code") == BRIDGE_CLASS_CODE]


def count_nvidia_gpus(devices):
    """Number of NVIDIA GPUs among ``devices`` (see ``nvidia_gpus``)."""
    return len(nvidia_gpus(devices))
