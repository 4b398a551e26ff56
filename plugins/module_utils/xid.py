# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA Xid catalog (as data) and a kernel-log parser for NVRM lines.

Catalog
-------
``XID_CATALOG`` maps an Xid number to ``{"action", "description"}`` following
the immediate actions of NVIDIA's Xid catalog.  Actions:

* ``ignore``: informational (63 alone, 92, 93);
* ``restart_app``: the error stayed in the application (13, 31, 43, 45, 94);
* ``reset_gpu``: reset the GPU (46, 62, 64, 95, 109, 110, 119, 120, 136, 140,
  143, 155, 156, 158);
* ``reboot_node``: reboot the node (79, 160);
* ``workflow``: follow the catalog's workflow (48 DBE with 63/64; NVLink 74 and
  144-150; any Xid not in the catalog).  Reported, not fatal unless overridden.

Xid 154 carries its recovery action in the text ("... to 0x1 (GPU Reset
Required)"): see ``xid_154_action``.  ``ACTION_RANK`` orders actions from
weakest to strongest.

Users override actions with ``merge_overrides(overrides)`` (``{xid: action}``,
validated strictly; bad entries raise ``XidCatalogError`` naming the key).

Kernel log
----------
``parse_kernel_log(text)`` reads dmesg (``[secs]``, ``dmesg -T``), syslog or
journal (``Mon dd hh:mm:ss host kernel:``), ISO journal, bare ``kernel:`` or
un-prefixed lines.  It returns::

    events       [{line, timestamp, xid, pci_bus_id, gi, pid, name, message, raw}]
    uuid_map     {pci_bus_id: uuid}         from "NVRM: GPU at PCI:...: GPU-<uuid>"
    bus_errors   [{line, timestamp, pci_bus_id, kind, raw}]  kind: fallen_off_bus | gpu_lost
    driver_loads [line numbers of "NVRM: loading NVIDIA ... Kernel Module"]
    sxid_events  [{line, timestamp, xid, pci_bus_id, message, raw}]  NVSwitch SXids

``pci_bus_id`` is normalised to ``dddd:bb:dd.f`` (the kernel omits the
function, which becomes ``.0``) or None for old lines without one; ``gi`` is
the MIG GPU instance of ``(PCI:... GPU-I:05)`` lines; ``pid`` and ``name`` are
None when absent or ``<unknown>``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpu_native.fleet.plugins.module_utils.pci import (
    PciBusIdError,
    find_bus_id,
    normalize_bus_id,
)

ACTIONS = ("ignore", "restart_app", "workflow", "reset_gpu", "reboot_node")
ACTION_RANK = dict((action, rank) for rank, action in enumerate(ACTIONS))
FATAL_ACTIONS = ("reset_gpu", "reboot_node")
DEFAULT_ACTION = "workflow"


def _entry(action, description):
    return {"action": action, "description": description}


XID_CATALOG = {
    13: _entry("restart_app", "Graphics engine exception (application error)"),
    31: _entry("restart_app", "GPU memory page fault (MMU fault)"),
    43: _entry("restart_app", "GPU stopped processing the channel (application error)"),
    45: _entry("restart_app", "Preemptive cleanup after a previous error"),
    46: _entry("reset_gpu", "GPU stopped processing"),
    48: _entry("workflow", "Double bit ECC error (DBE); see 63/64 for the remap outcome"),
    62: _entry("reset_gpu", "Internal micro-controller halt"),
    63: _entry("ignore", "Row remapping / page retirement recorded; pending until the next GPU reset"),
    64: _entry("reset_gpu", "Row remapping / page retirement recording failure"),
    74: _entry("workflow", "NVLink error (the text says Fatal or Nonfatal)"),
    79: _entry("reboot_node", "GPU has fallen off the bus"),
    92: _entry("ignore", "High single-bit ECC error rate"),
    93: _entry("ignore", "Non-fatal violation of the provisioned InfoROM wear limit"),
    94: _entry("restart_app", "Contained ECC error"),
    95: _entry("reset_gpu", "Uncontained ECC error"),
    109: _entry("reset_gpu", "Context switch timeout"),
    110: _entry("reset_gpu", "Security fault error"),
    119: _entry("reset_gpu", "GSP RPC timeout"),
    120: _entry("reset_gpu", "GSP error"),
    136: _entry("reset_gpu", "GPU reset required (NVIDIA Xid catalog)"),
    140: _entry("reset_gpu", "Unrecovered ECC error"),
    143: _entry("reset_gpu", "GPU reset required (NVIDIA Xid catalog)"),
    144: _entry("workflow", "NVLink error (the text says Fatal or Nonfatal)"),
    145: _entry("workflow", "NVLink error (the text says Fatal or Nonfatal)"),
    146: _entry("workflow", "NVLink error (the text says Fatal or Nonfatal)"),
    147: _entry("workflow", "NVLink error (the text says Fatal or Nonfatal)"),
    148: _entry("workflow", "NVLink error (the text says Fatal or Nonfatal)"),
    149: _entry("workflow", "NVLink error (the text says Fatal or Nonfatal)"),
    150: _entry("workflow", "NVLink error (the text says Fatal or Nonfatal)"),
    154: _entry("workflow", "GPU recovery action changed (the action is in the text)"),
    155: _entry("reset_gpu", "GPU reset required (NVIDIA Xid catalog)"),
    156: _entry("reset_gpu", "GPU reset required (NVIDIA Xid catalog)"),
    158: _entry("reset_gpu", "GPU reset required (NVIDIA Xid catalog)"),
    160: _entry("reboot_node", "Node reboot required (NVIDIA Xid catalog)"),
}

# Xid 154 recovery action codes, from the driver's message text.
RECOVERY_ACTION_CODES = {
    0x0: None,
    0x1: "reset_gpu",
    0x2: "reboot_node",
    0x4: "reset_gpu",  # drain and reset
}

_RECOVERY_RE = re.compile(r"\bto\s+0x([0-9a-fA-F]+)\s*(?:\(([^)]*)\))?", re.IGNORECASE)


class XidCatalogError(ValueError):
    """An invalid Xid action override."""


def merge_overrides(overrides, catalog=None):
    """Return a catalog copy with ``{xid: action}`` overrides applied.

    Keys may be ints or digit strings (YAML keys arrive as strings from some
    inventories).  Raises ``XidCatalogError`` naming ``xid_actions.<key>``.
    """
    merged = dict((xid, dict(entry)) for xid, entry in (catalog or XID_CATALOG).items())
    for key, action in (overrides or {}).items():
        try:
            xid = int(str(key).strip())
            if xid <= 0:
                raise ValueError(key)
        except ValueError:
            raise XidCatalogError(
                "xid_actions.%s: the key is not an Xid number. Fix: use positive integers such as 13 or 79." % (key,)
            )
        if action not in ACTIONS:
            raise XidCatalogError(
                "xid_actions.%s: %r is not an action. Fix: use one of %s." % (key, action, ", ".join(ACTIONS))
            )
        description = merged.get(xid, {}).get("description", "Not in the built-in catalog")
        merged[xid] = {"action": action, "description": description, "overridden": True}
    return merged


def xid_154_action(message):
    """Recovery action named by an Xid 154 line.

    Returns ``(action, cleared)``: ``("reset_gpu", False)`` for "to 0x1 (GPU
    Reset Required)", ``("reboot_node", False)`` for 0x2, ``("reset_gpu",
    False)`` for 0x4 (drain and reset), ``(None, True)`` for "to 0x0 (None)"
    and ``("workflow", False)`` for anything unreadable.
    """
    match = _RECOVERY_RE.search(message or "")
    if not match:
        return DEFAULT_ACTION, False
    code = int(match.group(1), 16)
    if code == 0:
        return None, True
    if code in RECOVERY_ACTION_CODES:
        return RECOVERY_ACTION_CODES[code], False
    text = (match.group(2) or "").lower()
    if "reboot" in text:
        return "reboot_node", False
    if "reset" in text:
        return "reset_gpu", False
    return DEFAULT_ACTION, False


def classify(xid, message=None, catalog=None):
    """Action for one Xid line: the catalog's, or the text's for Xid 154.

    An override of 154 in ``catalog`` (``overridden``) wins over the text.
    """
    catalog = catalog if catalog is not None else XID_CATALOG
    entry = catalog.get(xid)
    if xid == 154 and not (entry and entry.get("overridden")):
        action, cleared = xid_154_action(message)
        return action if not cleared else "ignore"
    if entry is None:
        return DEFAULT_ACTION
    return entry["action"]


def describe(xid, catalog=None):
    entry = (catalog if catalog is not None else XID_CATALOG).get(xid)
    return entry["description"] if entry else "Not in the built-in catalog"


# --- kernel log ------------------------------------------------------------
_TIMESTAMP_RES = (
    re.compile(r"^\[\s*(?P<ts>[+]?\d+\.\d+)\]"),  # dmesg [secs.usec] / dmesg -T relative [  +6.01]
    re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]"),  # dmesg -T
    re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s"),  # ISO / journalctl -o short-iso
    re.compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)\s"),  # syslog / journalctl short
)
_XID_RE = re.compile(
    r"(?<![S\w])NVRM: Xid\s*(?:\((?P<where>[^)]*)\))?\s*:?\s*(?P<xid>\d+)\s*(?:,\s*(?P<rest>.*))?$"
)
_SXID_RE = re.compile(r"SXid\s*\((?P<where>[^)]*)\)\s*:?\s*(?P<xid>\d+)\s*(?:,\s*(?P<rest>.*))?$")
_GI_RE = re.compile(r"GPU-I:\s*(?P<gi>\d+)", re.IGNORECASE)
_PID_RE = re.compile(r"^pid=(?P<pid>'[^']*'|[^,]*)(?:,\s*|$)")
_NAME_RE = re.compile(r"^name=(?P<name>.*?)(?:,\s+|,$|$)")
_UUID_MAP_RE = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<bus>[0-9A-Fa-f:.]+):\s*(?P<uuid>GPU-[0-9a-fA-F-]{36})")
_DRIVER_LOAD_RE = re.compile(r"NVRM: loading NVIDIA .*Kernel Module")


def _timestamp(line):
    for regex in _TIMESTAMP_RES:
        match = regex.match(line)
        if match:
            return match.group("ts").strip()
    return None


def _where_bus(where):
    """Bus id from the parenthesised part: 'PCI:0000:2b:00', '0000:2b:00', 'PCI:0000:01:00 GPU-I:05'."""
    if not where:
        return None, None
    gi_match = _GI_RE.search(where)
    gi = int(gi_match.group("gi")) if gi_match else None
    candidate = _GI_RE.sub("", where).strip()
    try:
        return normalize_bus_id(candidate), gi
    except PciBusIdError:
        return find_bus_id(candidate), gi


def _unknown(value):
    if value is None:
        return None
    value = value.strip().strip("'\"")
    if not value or value.lower() in ("<unknown>", "unknown"):
        return None
    return value


def _split_pid_name(rest):
    pid = name = None
    rest = rest or ""
    match = _PID_RE.match(rest)
    if match:
        pid = _unknown(match.group("pid"))
        rest = rest[match.end():]
    match = _NAME_RE.match(rest)
    if match:
        name = _unknown(match.group("name"))
        rest = rest[match.end():]
    if pid is not None:
        try:
            pid = int(pid)
        except ValueError:
            pass
    return pid, name, rest.strip()


def parse_kernel_log(text):
    """Parse NVRM lines from any kernel-log text (see the module docstring)."""
    result = {"events": [], "uuid_map": {}, "bus_errors": [], "driver_loads": [], "sxid_events": []}
    for number, raw in enumerate((text or "").splitlines(), start=1):
        line = raw.rstrip()
        if "NVRM" not in line and "SXid" not in line and "fallen off the bus" not in line and "GPU is lost" not in line:
            continue
        timestamp = _timestamp(line.lstrip()) if line.strip() else None
        sxid = _SXID_RE.search(line)
        if sxid:
            bus, _gi = _where_bus(sxid.group("where"))
            result["sxid_events"].append({
                "line": number, "timestamp": timestamp, "xid": int(sxid.group("xid")), "pci_bus_id": bus,
                "message": (sxid.group("rest") or "").strip(), "raw": line.strip(),
            })
            continue
        mapping = _UUID_MAP_RE.search(line)
        if mapping:
            try:
                result["uuid_map"][normalize_bus_id(mapping.group("bus"))] = mapping.group("uuid")
            except PciBusIdError:
                pass
            continue
        if _DRIVER_LOAD_RE.search(line):
            result["driver_loads"].append(number)
            continue
        xid_match = _XID_RE.search(line)
        bus = gi = None
        if xid_match:
            bus, gi = _where_bus(xid_match.group("where"))
            pid, name, message = _split_pid_name(xid_match.group("rest"))
            result["events"].append({
                "line": number,
                "timestamp": timestamp,
                "xid": int(xid_match.group("xid")),
                "pci_bus_id": bus,
                "gi": gi,
                "pid": pid,
                "name": name,
                "message": message,
                "raw": line.strip(),
            })
        lowered = line.lower()
        for marker, kind in (("fallen off the bus", "fallen_off_bus"), ("gpu is lost", "gpu_lost")):
            if marker in lowered:
                where = bus
                if where is None:
                    after = line.split("NVRM:", 1)[-1]
                    where = find_bus_id(after)
                result["bus_errors"].append({
                    "line": number, "timestamp": timestamp, "pci_bus_id": where, "kind": kind, "raw": line.strip(),
                })
    return result
