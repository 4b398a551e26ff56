# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""NVIDIA Xid catalog (NVIDIA's own, as data) and a kernel-log parser for NVRM lines.

Catalog
-------
The data is NVIDIA's Xid catalog for Ampere and newer GPUs (Table 1 and the
"XID 144-150 Decode" table of "Analyzing Xid Errors with the Xid Catalog"),
generated into ``xid_catalog`` from the TSVs under tests/fixtures/nvidia/.
NVIDIA's immediate-action buckets map to the collection's actions
(``BUCKET_ACTIONS``)::

    RESTART_APP -> restart_app     RESET_GPU -> reset_gpu     RESTART_BM -> reboot_node
    IGNORE      -> ignore          CONTACT_SUPPORT, any other bucket, no bucket -> workflow

Workflow buckets are resolved from the line's text and its neighbours:

* ``WORKFLOW_XID_45`` (45): "caused by previous Xid N" (the driver appends it,
  open-gpu-kernel-modules 595.45.04 src/nvidia/src/kernel/gpu/rc/kernel_rc.c)
  -> ignore, linked to N (``caused_by``), and the verdict follows N; with no
  cause named but other Xids on the same GPU, also ignore, linked to the GPU's
  previous Xid (catalog: "Not Solo: IGNORE (follow other Xid)"; gpu_health
  links it); alone -> workflow ("Solo: RESTART_FM");
* ``WORKFLOW_XID_48`` (48): reset_gpu alone, drain and reset with 63/64;
  171/172 are its companions (they follow a 48 of the same GPU);
* ``WORKFLOW_NVLINK_ERR`` (74): a line that says fatal is at least reset_gpu,
  otherwise workflow;
* ``WORKFLOW_NVLINK5_ERR`` (144-150): decoded with ``decode_nvlink5``;
* ``XID_154`` (154): the recovery action is in the text (``xid_154_action``).

Actions, weakest first (``ACTIONS``): ignore, restart_app, workflow,
drain_p2p, reset_gpu, reboot_node.  ``NOT_READY_ACTIONS`` (drain_p2p and
stronger) make a GPU unhealthy while pending; ``FATAL_ACTIONS`` (reset_gpu,
reboot_node) are the ones the fatal-Xid alert pages for.

Users override actions with ``merge_overrides(overrides)`` (``{xid: action}``,
validated strictly; bad entries raise ``XidCatalogError`` naming the key).
An override replaces the judgement by text and by neighbours for that Xid.

Kernel log
----------
``parse_kernel_log(text)`` reads dmesg (``[secs]``, ``dmesg -T``), syslog or
journal (``Mon dd hh:mm:ss host kernel:``), ISO journal, bare ``kernel:`` or
un-prefixed lines.  Continuation lines of the open kernel module's multi-line
messages (indented ``NVRM:`` lines without a timestamp, e.g. "The NVIDIA GPU
0000:b3:00.0" / "(PCI ID: ...) installed in this system has" / "fallen off the
bus ...") belong to the message above them.  It returns::

    events         [{line, timestamp, xid, pci_bus_id, gi, pid, name, message, raw}]
    uuid_map       {pci_bus_id: uuid}         from "NVRM: GPU at PCI:...: GPU-<uuid>"
    bus_errors     [{line, timestamp, pci_bus_id, kind, raw, at_probe}]  kind: fallen_off_bus | gpu_lost;
                   at_probe: printed by the probe of the driver load whose banner follows it
    driver_loads   [line numbers of "NVRM: loading NVIDIA ... Kernel Module"]
    driver_versions [versions named by those lines, same order]
    sxid_events    [{line, timestamp, xid, pci_bus_id, switch, fatal, link, message, raw}]  NVSwitch SXids
    limits         {chars_dropped, lines_cut}  what the input bounds cut off

Input is bounded (``MAX_KERNEL_LOG_CHARS``, the newest part is kept;
``MAX_LINE_CHARS`` per line) so that hostile text costs linear time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.lazy_regex import lazy_compile
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.pci import (
    PciBusIdError,
    find_bus_id,
    normalize_bus_id,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.xid_catalog import (
    NVLINK5_DECODE,
    XID_ROWS,
)

ACTIONS = ("ignore", "restart_app", "workflow", "drain_p2p", "reset_gpu", "reboot_node")
ACTION_RANK = dict((action, rank) for rank, action in enumerate(ACTIONS))
NOT_READY_ACTIONS = ("drain_p2p", "reset_gpu", "reboot_node")
FATAL_ACTIONS = ("reset_gpu", "reboot_node")
DEFAULT_ACTION = "workflow"

CATALOG_SOURCE = ("NVIDIA, Analyzing Xid Errors with the Xid Catalog "
                  "(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)")

# NVIDIA's immediate-action buckets -> the collection's actions.  Any bucket
# not named here (CONTACT_SUPPORT, CHECK_MECHANICALS, UPDATE_SWFW, RESTART_VM,
# CHECK_UVM, an empty cell) is "workflow": reported, not fatal.
BUCKET_ACTIONS = {
    "RESTART_APP": "restart_app",
    "RESET_GPU": "reset_gpu",
    "RESTART_BM": "reboot_node",
    "IGNORE": "ignore",
    "CONTACT_SUPPORT": "workflow",
}
# Buckets whose action depends on the line and its neighbours; the value is the
# action of the Xid taken alone, before that judgement.
WORKFLOW_BUCKETS = {
    "WORKFLOW_XID_45": "workflow",
    "WORKFLOW_XID_48": "reset_gpu",
    "WORKFLOW_NVLINK_ERR": "workflow",
    "WORKFLOW_NVLINK5_ERR": "workflow",
    "XID_154": "workflow",
    "XID_154_EVAL": "restart_app",
}
# Companions of Xid 48 (the catalog: "Additional to Xid 48 ... follow WORKFLOW_XID_48").
XID_48_COMPANIONS = (171, 172)

# Xid 154 recovery action codes (nvmlDeviceGpuRecoveryAction_t, NVML API reference):
# 0 None, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain P2P and reset the GPU,
# 5 recover the IMEX domain, 6 reset the GPU's PCIe bus, 7 reboot the system.
RECOVERY_ACTION_CODES = {
    0x0: None,
    0x1: "reset_gpu",
    0x2: "reboot_node",
    0x3: "drain_p2p",
    0x4: "reset_gpu",
    0x5: "workflow",
    0x6: "reset_gpu",
    0x7: "reboot_node",
}
RECOVERY_ACTION_NAMES = {
    0x0: "None", 0x1: "GPU Reset Required", 0x2: "Node Reboot Required", 0x3: "Drain P2P",
    0x4: "Drain and Reset", 0x5: "Recover IMEX Domain", 0x6: "Bus Reset", 0x7: "System Reboot",
}

MAX_KERNEL_LOG_CHARS = 8 * 1024 * 1024
MAX_LINE_CHARS = 2048
MAX_CONTINUATION_LINES = 8

_RECOVERY_RE = lazy_compile(r"\bto\s{1,4}0x([0-9a-fA-F]{1,8})\s{0,4}(?:\(([^)]{0,80})\))?", re.IGNORECASE)
_CAUSED_BY_RE = lazy_compile(r"caused by previous Xid\s{0,4}(\d{1,4})", re.IGNORECASE)
_FATAL_WORD_RE = lazy_compile(r"(?<![-\w])fatal\b", re.IGNORECASE)
_NONFATAL_RE = lazy_compile(r"\bnon-?fatal\b", re.IGNORECASE)
# "<sub component> <Fatal|Nonfatal> XC0 i0 Link <n> (<intrInfo> <errorStatus> ...)"
_NVLINK5_RE = lazy_compile(
    r"^\s{0,8}(?P<subcode>[A-Za-z0-9_/]{1,40})\s{1,16}(?P<severity>Fatal|Non-?fatal)\b[^(]{0,80}?"
    r"\bLink\s{1,4}(?P<link>-?\d{1,4})\s{0,4}\(\s{0,4}(?:0x)?(?P<intr>[0-9a-fA-F]{1,8})[\s,]{1,4}"
    r"(?:0x)?(?P<status>[0-9a-fA-F]{1,8})",
    re.IGNORECASE,
)


class XidCatalogError(FleetError, ValueError):
    """An invalid Xid action override."""


def bucket_action(bucket):
    """The collection's action for one of NVIDIA's buckets (workflow when unknown)."""
    if bucket in WORKFLOW_BUCKETS:
        return WORKFLOW_BUCKETS[bucket]
    return BUCKET_ACTIONS.get(bucket or "", DEFAULT_ACTION)


def _build_catalog():
    catalog = {}
    for xid, row in XID_ROWS.items():
        mnemonic, description, _a100, _h100, _b100, _gb200, immediate, investigatory, _linkage = row
        catalog[xid] = {
            "action": bucket_action(immediate),
            "bucket": immediate or None,
            "investigatory": investigatory or None,
            "mnemonic": mnemonic,
            "description": description,
        }
    return catalog


XID_CATALOG = _build_catalog()


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
        entry = merged.get(xid, {})
        merged[xid] = {
            "action": action,
            "bucket": entry.get("bucket"),
            "investigatory": entry.get("investigatory"),
            "mnemonic": entry.get("mnemonic"),
            "description": entry.get("description", "Not in the built-in catalog"),
            "overridden": True,
        }
    return merged


def xid_154_action(message):
    """Recovery action named by an Xid 154 line.

    Returns ``(action, cleared)``: ``("reset_gpu", False)`` for "to 0x1 (GPU
    Reset Required)", ``("reboot_node", False)`` for 0x2, ``("drain_p2p",
    False)`` for 0x3, ``("reset_gpu", False)`` for 0x4 (drain and reset),
    ``(None, True)`` for "to 0x0 (None)" and ``("workflow", False)`` for
    anything unreadable.
    """
    match = _RECOVERY_RE.search((message or "")[:MAX_LINE_CHARS])
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


def driver_generation(version):
    """``"ge_r575"`` for drivers R575 and newer, ``"lt_r575"`` before, None when unknown.

    The split is the one of NVIDIA's "XID 144-150 Decode" table (intrinfo
    patterns "< R575" and ">= R575").
    """
    match = re.match(r"^\s*(?:R)?(\d{3})(?:\.|$)", str(version or ""))
    if not match:
        return None
    return "ge_r575" if int(match.group(1)) >= 575 else "lt_r575"


def _pattern(text):
    """32-character bit pattern -> (mask, value), or None when empty or malformed."""
    if not text or len(text) != 32 or any(c not in "01-" for c in text):
        return None
    mask = value = 0
    for char in text:
        mask <<= 1
        value <<= 1
        if char != "-":
            mask |= 1
            value |= int(char)
    return mask, value


def _status_values(cell):
    """Error-status cell -> set of ints ("0x00000000/0xFFFFFFFF" is two), None for an empty cell (any status)."""
    if not cell:
        return None
    values = set()
    for option in cell.split("/"):
        try:
            values.add(int(option, 16))
        except ValueError:
            continue
    return values


def _compile_decode():
    """Decode rows by Xid, then by error status (None: rows for any status)."""
    rows = {}
    for row in NVLINK5_DECODE:
        xid, subcode, v1, v2, status, immediate, a2v1, a2v2, action2, investigatory, severity = row
        rows.setdefault(xid, []).append({
            "xid": xid, "subcode": subcode, "status": status, "statuses": _status_values(status), "bucket": immediate,
            "investigatory": investigatory or None, "severity": severity, "action2": action2 or None,
            "patterns": {"lt_r575": _pattern(v1), "ge_r575": _pattern(v2)},
            "action2_patterns": {"lt_r575": _pattern(a2v1), "ge_r575": _pattern(a2v2)},
        })
    index = {}
    for xid, xid_rows in rows.items():
        by_status = index.setdefault(xid, {})
        for row in xid_rows:
            for status in (row["statuses"] if row["statuses"] is not None else [None]):
                by_status.setdefault(status, []).append(row)
    return index


# The decode table indexed by Xid and error status, built on the first Xid 144-150 line judged: only those lines
# need it, and building it (380 bit patterns) cost more than the rest of this module's import.
_DECODE_ROWS = {}


def _decode_rows():
    if not _DECODE_ROWS:
        _DECODE_ROWS.update(_compile_decode())
    return _DECODE_ROWS


def _line_severity(message):
    if _NONFATAL_RE.search(message or ""):
        return "Nonfatal"
    if _FATAL_WORD_RE.search(message or ""):
        return "Fatal"
    return None


def decode_nvlink5(xid, message, generation=None):
    """Judge one Xid 144-150 line with NVIDIA's decode table.

    ``generation`` is ``driver_generation()``'s value; when None both intrinfo
    columns are tried.  Returns a dict: ``action`` (a collection action, or
    ``"xid_154_eval"``: follow an Xid 154 of the same GPU, else restart_app),
    ``bucket`` (NVIDIA's bucket of the row, or None), ``subcode``,
    ``severity``, ``intr_info``, ``error_status``, ``generation`` (the
    column(s) tried), ``investigatory`` and ``rule`` (how it was decided).
    """
    text = (message or "")[:MAX_LINE_CHARS]
    match = _NVLINK5_RE.match(text)
    line_severity = _line_severity(text)
    decoded = {
        "subcode": None, "severity": line_severity, "intr_info": None, "error_status": None,
        "generation": generation or "unknown", "bucket": None, "investigatory": None,
    }
    if not match:
        decoded["rule"] = "the line is not in the '<sub> <Fatal|Nonfatal> ... Link <n> (<intrInfo> <errorStatus>' form"
        decoded["action"] = "reset_gpu" if line_severity == "Fatal" else DEFAULT_ACTION
        return decoded
    intr = int(match.group("intr"), 16)
    status = int(match.group("status"), 16)
    decoded.update({
        "subcode": match.group("subcode"),
        "severity": "Nonfatal" if _NONFATAL_RE.match(match.group("severity")) else "Fatal",
        "intr_info": "0x%08x" % intr,
        "error_status": "0x%08x" % status,
    })
    generations = [generation] if generation in ("lt_r575", "ge_r575") else ["lt_r575", "ge_r575"]
    found = []
    by_status = _decode_rows().get(xid, {})
    for row in by_status.get(status, []) + by_status.get(None, []):
        for gen in generations:
            pattern = row["patterns"][gen]
            second_pattern = row["action2_patterns"][gen]
            base = pattern is not None and (intr & pattern[0]) == pattern[1]
            second = second_pattern is not None and (intr & second_pattern[0]) == second_pattern[1]
            if not (base or second):
                continue
            bucket = row["action2"] if (second and row["action2"]) else row["bucket"]
            found.append((row, gen, bucket))
    if not found:
        decoded["rule"] = "no row of the decode table matches; judged by the line's own %s word" % decoded["severity"]
        decoded["action"] = "reset_gpu" if decoded["severity"] == "Fatal" else DEFAULT_ACTION
        return decoded

    def rank(item):
        bucket = item[2]
        return ACTION_RANK["restart_app"] if bucket == "XID_154_EVAL" else ACTION_RANK[bucket_action(bucket)]

    row, gen, bucket = max(found, key=rank)
    decoded.update({
        "table_subcode": row["subcode"], "bucket": bucket, "investigatory": row["investigatory"],
        "table_severity": row["severity"], "generation": gen,
        "action": "xid_154_eval" if bucket == "XID_154_EVAL" else bucket_action(bucket),
    })
    gens = sorted(set(item[1] for item in found))
    buckets = sorted(set(item[2] for item in found))
    decoded["rule"] = "decode table row %s errorStatus %s (%s intrinfo column)" % (
        row["subcode"], row["status"] or "any", "R575+" if gen == "ge_r575" else "before R575")
    if len(buckets) > 1:
        decoded["rule"] += "; rows %s also matched (%s), the strongest is taken" % (
            ", ".join(sorted(set(item[0]["subcode"] for item in found))), ", ".join(buckets))
    if generation is None and len(gens) > 1:
        decoded["rule"] += "; the driver version is unknown and both intrinfo columns matched"
    return decoded


def judge_line(xid, message, catalog=None, generation=None):
    """Judge one Xid line on its own.

    Returns ``{action, bucket, investigatory, caused_by, follows, decode,
    note}``: ``caused_by`` is the Xid a 45 names ("caused by previous Xid N"),
    ``follows`` is 154 when the decode says XID_154_EVAL and 48 for the
    companions 171/172 (resolved by the caller against the GPU's other lines),
    ``decode`` the NVLink5 decode.  ``action`` is None for a 154 "to 0x0
    (None)" line, which clears earlier 154 lines.
    """
    catalog = catalog if catalog is not None else XID_CATALOG
    entry = catalog.get(xid) or {}
    result = {
        "action": entry.get("action", DEFAULT_ACTION), "bucket": entry.get("bucket"),
        "investigatory": entry.get("investigatory"), "caused_by": None, "follows": None, "decode": None,
        "note": None,
    }
    if entry.get("overridden"):
        result["note"] = "action set by xid_actions"
        return result
    message = (message or "")[:MAX_LINE_CHARS]
    bucket = entry.get("bucket")
    if xid == 154:
        action, cleared = xid_154_action(message)
        result["action"] = None if cleared else action
        return result
    if bucket == "WORKFLOW_XID_45":
        cause = _CAUSED_BY_RE.search(message)
        if cause:
            result["action"] = "ignore"
            result["caused_by"] = int(cause.group(1))
            result["note"] = "caused by Xid %d: the verdict follows that Xid" % result["caused_by"]
        else:
            result["action"] = "workflow"
            result["note"] = "Xid 45 alone (no cause named): preemptive cleanup, reported"
        return result
    if bucket == "WORKFLOW_NVLINK_ERR":
        severity = _line_severity(message)
        result["action"] = "reset_gpu" if severity == "Fatal" else "workflow"
        result["note"] = ("the line says fatal: reset the GPU" if severity == "Fatal"
                          else "the line says no fatal error: reported")
        return result
    if bucket == "WORKFLOW_NVLINK5_ERR":
        decoded = decode_nvlink5(xid, message, generation)
        result["decode"] = decoded
        if decoded["action"] == "xid_154_eval":
            result["action"] = "restart_app"
            result["follows"] = 154
        else:
            result["action"] = decoded["action"]
        return result
    if xid in XID_48_COMPANIONS:
        result["action"] = "workflow"
        result["follows"] = 48
        result["note"] = "companion of Xid 48 (DRAM/SRAM detail)"
    return result


def classify(xid, message=None, catalog=None, generation=None):
    """Action for one Xid line taken alone ("ignore" for a 154 that clears)."""
    action = judge_line(xid, message, catalog, generation)["action"]
    return "ignore" if action is None else action


def describe(xid, catalog=None):
    entry = (catalog if catalog is not None else XID_CATALOG).get(xid)
    return entry["description"] if entry else "Not in the built-in catalog"


# --- kernel log ------------------------------------------------------------
# (the pattern needs a line starting with "[", pattern): the dmesg patterns are only tried (and compiled) on such
# lines, so reading a journal never compiles them
_TIMESTAMP_RES = (
    (True, lazy_compile(r"^\[\s{0,12}(?P<ts>[+]?\d{1,12}\.\d{1,9})\]")),  # dmesg [secs.usec] / dmesg -T relative [  +6.01]
    (True, lazy_compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]")),  # dmesg -T
    (False, lazy_compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\s")),  # ISO journal
    (False, lazy_compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)\s")),  # syslog, journalctl short
)
_XID_RE = lazy_compile(
    r"NVRM: Xid\s{0,4}(?:\((?P<where>[^)]{0,80})\))?\s{0,4}:?\s{0,4}(?P<xid>\d{1,5})\b\s{0,4}(?:,\s{0,4}(?P<rest>.*))?$"
)
_SXID_RE = lazy_compile(r"SXid\s{0,4}\((?P<where>[^)]{0,80})\)\s{0,4}:?\s{0,4}(?P<xid>\d{1,6})\b\s{0,4}(?:,\s{0,4}(?P<rest>.*))?$")
_SWITCH_RE = lazy_compile(r"(?P<switch>nvidia-nvswitch\d{1,4})\s{0,4}:\s{0,4}$")
_SXID_SEVERITY_RE = lazy_compile(r"^(?P<severity>Fatal|Non-?fatal)\s{0,4}(?:,|$)", re.IGNORECASE)
_LINK_RE = lazy_compile(r"\bLink\s{1,4}(?P<link>\d{1,4})\b")
_GI_RE = lazy_compile(r"GPU-I:\s{0,4}(?P<gi>\d{1,4})", re.IGNORECASE)
_PID_RE = lazy_compile(r"^pid=(?P<pid>'[^']{0,64}'|[^,]{0,64})(?:,\s*|$)")
_NAME_RE = lazy_compile(r"^name=(?P<name>[^,]{0,128}?)(?:,\s+|,$|$)")
_UUID_MAP_RE = lazy_compile(r"NVRM: GPU at (?:PCI:)?(?P<bus>[0-9A-Fa-f:.]{4,20}):\s{0,4}(?P<uuid>GPU-[0-9a-fA-F-]{36})")
_DRIVER_LOAD_RE = lazy_compile(r"NVRM: loading NVIDIA [^\n]{0,80}?Kernel Module(?:\s+for\s+\S+)?\s+(?P<version>\d{2,4}\.\d{1,4}(?:\.\d{1,4})?)?")
_OPEN_HEADER_RE = lazy_compile(r"NVRM: The NVIDIA GPU\s+\S+\s*$")


def _timestamp(line):
    bracket = line[:1] == "["
    for needs_bracket, regex in _TIMESTAMP_RES:
        if needs_bracket and not bracket:
            continue
        match = regex.match(line)
        if match:
            return match.group("ts").strip()
    return None


def _where_bus(where, cache=None):
    """Bus id from the parenthesised part: 'PCI:0000:2b:00', '0000:2b:00', 'PCI:0000:01:00 GPU-I:05'."""
    if not where:
        return None, None
    if cache is not None:
        if where not in cache:
            cache[where] = _where_bus(where)
        return cache[where]
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


def _is_candidate(line):
    return "NVRM" in line or "SXid" in line or "fallen off the bus" in line or "GPU is lost" in line


def _records(text, limits):
    """Logical kernel-log records ``(line_number, timestamp, text)``, continuation lines joined."""
    records = []
    open_header = 0
    attachable = False  # the previous non-empty line belongs to the last record
    for number, raw in enumerate(text.splitlines(), start=1):
        if len(raw) > MAX_LINE_CHARS:
            raw = raw[:MAX_LINE_CHARS]
            limits["lines_cut"] += 1
        line = raw.rstrip()
        stripped = line.lstrip()
        if not stripped:
            continue
        if not _is_candidate(line):
            open_header = 0
            attachable = False
            continue
        timestamp = _timestamp(stripped)
        continuation = (
            attachable and records[-1][3] < MAX_CONTINUATION_LINES and (
                (timestamp is None and line[:1].isspace() and stripped.startswith("NVRM:"))
                or (open_header and "NVRM:" in line and "NVRM: Xid" not in line)
            )
        )
        if continuation:
            last = records[-1]
            addition = stripped.split("NVRM:", 1)[1].strip() if "NVRM:" in stripped else stripped
            records[-1] = (last[0], last[1], (last[2] + " " + addition)[:MAX_LINE_CHARS], last[3] + 1)
            open_header = open_header - 1 if open_header else 0
            continue
        records.append((number, timestamp, line, 0))
        attachable = True
        # A journal prints each line of a multi-line message with its own prefix:
        # keep "The NVIDIA GPU <bus>" open for its two continuation lines (osapi.c prints
        # exactly three), never for the next message.
        open_header = 2 if "NVRM: The NVIDIA GPU" in line and _OPEN_HEADER_RE.search(line) else 0
    return [(number, timestamp, line) for number, timestamp, line, _count in records]


def parse_kernel_log(text):
    """Parse NVRM lines from any kernel-log text (see the module docstring)."""
    result = {"events": [], "uuid_map": {}, "bus_errors": [], "driver_loads": [], "driver_versions": [],
              "sxid_events": [], "limits": {"chars_dropped": 0, "lines_cut": 0}}
    text = text or ""
    if len(text) > MAX_KERNEL_LOG_CHARS:
        # keep the newest part, from a line start
        cut = len(text) - MAX_KERNEL_LOG_CHARS
        newline = text.find("\n", cut)
        start = newline + 1 if newline >= 0 else len(text)
        result["limits"]["chars_dropped"] = start
        text = text[start:]
    buses = {}
    for number, timestamp, line in _records(text, result["limits"]):
        sxid_at = line.find("SXid")
        sxid = _SXID_RE.match(line, sxid_at) if sxid_at >= 0 else None
        if sxid:
            bus, _gi = _where_bus(sxid.group("where"))
            switch = _SWITCH_RE.search(line[max(0, sxid_at - 40):sxid_at])
            rest = (sxid.group("rest") or "").strip()
            severity = _SXID_SEVERITY_RE.match(rest)
            link = _LINK_RE.search(rest)
            result["sxid_events"].append({
                "line": number, "timestamp": timestamp, "xid": int(sxid.group("xid")), "pci_bus_id": bus,
                "switch": switch.group("switch") if switch else None,
                "fatal": (not _NONFATAL_RE.match(severity.group("severity"))) if severity else None,
                "link": int(link.group("link")) if link else None,
                "message": rest, "raw": line.strip(),
            })
            continue
        mapping = _UUID_MAP_RE.search(line) if "GPU at" in line else None
        if mapping:
            try:
                result["uuid_map"][normalize_bus_id(mapping.group("bus"))] = mapping.group("uuid")
            except PciBusIdError:
                pass
            continue
        load = _DRIVER_LOAD_RE.search(line) if "NVRM: loading" in line else None
        if load:
            result["driver_loads"].append(number)
            result["driver_versions"].append(load.group("version"))
            continue
        xid_at = line.find("NVRM: Xid")
        xid_match = _XID_RE.match(line, xid_at) if xid_at >= 0 else None
        bus = None
        if xid_match:
            bus, gi = _where_bus(xid_match.group("where"), buses)
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
                    # osapi.c prints "The NVIDIA GPU <bus> (PCI ID: ...) installed in this system has fallen off
                    # the bus" while the driver probes, before that load's "NVRM: loading" banner (kernel-open/nvidia/nv.c)
                    "at_probe": "installed in this system has" in line,
                })
    return result
