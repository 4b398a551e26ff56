# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Parsers for every nvidia-smi output the collection reads.

Never judge a GPU by nvidia-smi's exit code: it exits 0 while a GPU shows
``ERR!``.  These parsers report what the output itself says.

Public API (shared with other modules; keep the keys stable)
-----------------------------------------------------------
``parse_query_xml(text)``: ``nvidia-smi -q -x``.  The DOCTYPE is stripped and
never resolved; a document declaring entities is refused.
``parse_query_text(text)``: ``nvidia-smi -q``.  Same result shape.

Both return a dict::

    driver_version   str or None
    cuda_version     str or None
    attached_gpus    int or None (may differ from len(gpus): trimmed logs,
                     GPUs whose handle could not be obtained)
    handle_errors    [{pci_bus_id, message}] "Unable to determine the device
                     handle ..." lines (pci_bus_id normalised, may be None)
    gpus             list of dicts:
        index              position in the document (0-based)
        minor_number       int or None (/dev/nvidiaN)
        pci_bus_id         normalised dddd:bb:dd.f, or None
        pci_device_id      e.g. "0x233010DE" (device-filter form) or None
        uuid               "GPU-..." or None
        product            product name or None
        persistence_mode   "Enabled"/"Disabled"/None
        ecc_mode           current ECC mode, "Enabled"/"Disabled"/None
        ecc_mode_pending   pending ECC mode or None
        mig_mode           current MIG mode, "Enabled"/"Disabled"/None (N/A)
        mig_mode_pending   pending MIG mode or None
        mig_devices        list of {index, gpu_instance_id,
                           compute_instance_id, multiprocessor_count,
                           memory_total_mib}; [] for "None"
        memory_total_mib / memory_used_mib / memory_free_mib   int or None
        temperature_c      number or None
        utilization_gpu_pct number or None
        remapped_rows      None when N/A, else {correctable, uncorrectable,
                           pending (bool), failure (bool)}
        ecc_errors         {volatile_uncorrectable, aggregate_uncorrectable,
                           volatile_correctable, aggregate_correctable}
                           ints or None when not reported
        retired_pages_pending  bool or None
        recovery_action    "None", "GPU Reset", ... or None (driver >= 550)
        reset_required     bool or None
        drain_and_reset_recommended bool or None
        unknown_error_fields  list of field paths that read "Unknown Error"
        unknown_error_health_fields  those of them that speak about health
                           (``HEALTH_SECTIONS``); the others are informational
        lost               True when the GPU section says "GPU is lost"

``parse_table(text)``: the plain ``nvidia-smi`` table.  Returns
``{driver_version, cuda_version, no_driver, handle_errors, gpus, processes}``
where each GPU is ``{index, product, pci_bus_id, persistence_mode, err,
err_fields, memory_used_mib, memory_total_mib, ecc, mig_mode}`` (``err`` is
True when ``ERR!`` appears anywhere in its row) and each process is
``{gpu_index, gi, ci, pid, type, name, memory_mib}``.

``detect_no_driver(text)``: True for "NVIDIA-SMI has failed because it
couldn't communicate with the NVIDIA driver".

One field table (``GPU_FIELDS`` and its sections) drives both the ``-q -x``
and the ``-q`` parser: each report becomes the same small tree first.

Every parser raises ``NvidiaSmiParseError`` (one line) on input it cannot read,
including input past the limits: ``MAX_INPUT_CHARS`` characters, ``MAX_DEPTH``
levels of nesting, ``MAX_GPUS`` GPUs (also the bound on ``attached_gpus``).
A DOCTYPE is removed by a linear scan (never a regex over the document);
lone surrogates (``lookup('file')`` of invalid UTF-8) become U+FFFD.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.lazy_regex import lazy_compile
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import (
    MAX_OUTPUT_BYTES,
    NO_DRIVER_MARKERS,
    decode_output,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.pci import (
    PciBusIdError,
    normalize_bus_id,
)

UNKNOWN_ERROR = "unknown error"

#: Top-level ``-q``/``-q -x`` sections that speak about health: a field under
#: one of them reading "Unknown Error" makes the GPU unhealthy; the same text
#: anywhere else (Addressing Mode, Driver Model, Inforom Version, ...) is a
#: note.  Names as nvidia-smi prints them, the XML tag and the ``-q`` title
#: lower-cased with spaces as ``_`` (real outputs: tests/fixtures/nvidia/01_...
#: (``-q -x``, DTD v12) and 03_... (``-q``, 565.57.01)).  Issue 28, item 2.
HEALTH_SECTIONS = frozenset((
    "ecc_mode", "ecc_errors", "retired_pages", "remapped_rows",
    "gpu_recovery_action", "gpu_reset_status",
    "temperature", "gpu_power_readings", "power_readings", "module_power_readings", "gpu_memory_power_readings",
    "clocks_event_reasons", "clocks_throttle_reasons",
    "fb_memory_usage", "bar1_memory_usage", "cc_protected_memory_usage", "conf_compute_protected_memory_usage",
    "pci", "fabric",
))


#: ``Clocks Event Reasons`` (``Clocks Throttle Reasons`` before R535; XML ``clocks_event_reasons`` /
#: ``clocks_throttle_reasons`` with ``clocks_event_reason_<name>`` children) as the reason names NVML gives them.
CLOCKS_EVENT_SECTIONS = ("clocks_event_reasons", "clocks_throttle_reasons")
_CLOCKS_EVENT_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")


def _clocks_event_reasons(node):
    """The reasons that read ``Active`` (``idle``, ``hw_slowdown``, ``hw_power_brake_slowdown`` ...), sorted."""
    active = []
    # only the descendants of the GPU's clocks-event section(s), in the order of a walk of the whole GPU
    for section in node.children:
        if section.key.strip().lower().replace(" ", "_") in CLOCKS_EVENT_SECTIONS:
            _clocks_active(section, active)
    return sorted(active)


def _clocks_active(section, active):
    for _path, child in section.walk():
        if (child.value or "").strip().lower() != "active":
            continue
        name = child.key.strip().lower().replace(" ", "_")
        for prefix in _CLOCKS_EVENT_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix):]
        if name and name not in active and len(active) < 32:
            active.append(name[:64])


def is_health_field(path):
    """True when a ``-q``/``-q -x`` field path lies under a section in ``HEALTH_SECTIONS``."""
    first = str(path).split("/", 1)[0].strip().lower().replace(" ", "_")
    return first in HEALTH_SECTIONS


#: Input limits (docs/DEVELOPING.md "Input limits").  The runner keeps at most
#: MAX_OUTPUT_BYTES per stream; a captured text gets the same bound here.
MAX_INPUT_CHARS = MAX_OUTPUT_BYTES
#: nvidia-smi's XML is 5 levels deep and its -q text 4 indents; 32 is generous.
MAX_DEPTH = 32
#: More GPUs than any node holds (an NVL72 rack is 72 GPUs over 18 nodes).
MAX_GPUS = 1024
#: Table rows are about 90-120 characters; longer lines are not table rows.
MAX_TABLE_LINE = 1024

_HANDLE_ERROR_RE = lazy_compile(
    r"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<bus>[0-9A-Fa-f:.]{1,32})\s*:\s*(?P<msg>.*)$"
)
# At most 15 integer digits: a longer "count" is not one (and float() of it loses precision).
_NUMBER_RE = lazy_compile(r"^\s*([-+]?\d{1,15}(?:\.\d{1,12})?)(?![\d.])")
_NA_VALUES = ("n/a", "[n/a]", "not supported", "[not supported]", "")
_DOCTYPE_START_RE = lazy_compile(r"<!DOCTYPE", re.IGNORECASE)
_ENTITY_RE = lazy_compile(r"<!ENTITY", re.IGNORECASE)
_QUERY_GPU_HEADER_RE = lazy_compile(r"^GPU\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$")


class NvidiaSmiParseError(FleetError, ValueError):
    """nvidia-smi output that cannot be parsed."""


# ---------------------------------------------------------------------------
# value helpers
# ---------------------------------------------------------------------------
def clean_value(value):
    """Strip a field value; ``N/A``, ``[N/A]`` and ``Not Supported`` become None."""
    if value is None:
        return None
    value = value.strip()
    if value.lower() in _NA_VALUES:
        return None
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1].strip()
    return value


def parse_number(value):
    """Leading number of a value with units (``"19968 MiB"`` -> 19968, ``"67.03 W"`` -> 67.03).

    None for N/A, for text that does not start with a number, and for numbers
    of more than 15 digits (no nvidia-smi field holds one)."""
    value = clean_value(value)
    if value is None:
        return None
    match = _NUMBER_RE.match(value)
    if not match:
        return None
    if "." in match.group(1):
        return float(match.group(1))
    return int(match.group(1))


def _parse_int(value):
    number = parse_number(value)
    return int(number) if number is not None else None


def _yes_no(value):
    value = clean_value(value)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("yes", "true", "enabled", "active"):
        return True
    if lowered in ("no", "false", "disabled", "not active"):
        return False
    return None


def _normalize_bus(value):
    value = clean_value(value)
    if value is None or len(value) > 64:
        return None
    try:
        return normalize_bus_id(value)
    except PciBusIdError:
        return None


def _device_id(value):
    """``20B210DE`` or ``0x20B210DE`` -> ``0x20B210DE`` (mig-parted device-filter form)."""
    value = clean_value(value)
    if value is None:
        return None
    if value.lower().startswith("0x"):
        value = value[2:]
    if not re.match(r"^[0-9A-Fa-f]{1,16}$", value):
        return None
    return "0x" + value.upper()


def detect_no_driver(text):
    """True when the output says nvidia-smi could not reach the driver."""
    lowered = (text or "").lower()
    return any(marker in lowered for marker in NO_DRIVER_MARKERS)


def parse_handle_errors(text):
    """Every "Unable to determine the device handle for GPU ..." line."""
    errors = []
    if "nable to determine the device handle" not in (text or ""):
        return errors
    for line in text.splitlines():
        match = _HANDLE_ERROR_RE.search(line[:MAX_TABLE_LINE])
        if match:
            errors.append({"pci_bus_id": _normalize_bus(match.group("bus").rstrip(":")),
                           "message": line.strip()[:MAX_TABLE_LINE]})
    return errors


def _check_input(text, what):
    """Decoded, bounded text (lone surrogates from a ``lookup('file')`` become U+FFFD)."""
    if text is None or not text.strip():
        raise NvidiaSmiParseError("%s output is empty" % what)
    if len(text) > MAX_INPUT_CHARS:
        raise NvidiaSmiParseError("%s output is longer than %d MiB; no nvidia-smi prints that much"
                                  % (what, MAX_INPUT_CHARS // (1024 * 1024)))
    return decode_output(text)


def _gpu_count(value, what):
    text = clean_value(value)
    if text is None:
        return None
    count = _parse_int(text)
    if count is None or not 0 <= count <= MAX_GPUS or not re.match(r"^\d+$", text):
        raise NvidiaSmiParseError("%s says %s attached GPUs, which is not a GPU count (0 to %d)"
                                  % (what, text[:40], MAX_GPUS))
    return count


# ---------------------------------------------------------------------------
# one tree for both reports
# ---------------------------------------------------------------------------
class _Node(object):
    """A key with a scalar value (None for a section) and children.

    Both ``-q -x`` (tags) and ``-q`` (indented ``Key : Value`` lines) become
    this tree, so one field table (:data:`GPU_FIELDS`) reads both."""

    __slots__ = ("key", "value", "children", "folded")

    def __init__(self, key, value):
        self.key = key
        self.value = value
        self.children = []
        # the key lowercased once: every lookup compares it (a few thousand comparisons per 8-GPU report)
        self.folded = key.lower()

    def find(self, path):
        node = self
        for part in path.split("/"):
            part = part.lower()
            for child in node.children:
                if child.folded == part:
                    node = child
                    break
            else:
                return None
        return node

    def get(self, *paths):
        """Value of the first path that exists (a section reads as None)."""
        for path in paths:
            node = self.find(path)
            if node is not None:
                return node.value
        return None

    def walk(self):
        """``(path, node)`` for every descendant, depth first, without recursion."""
        stack = [("", self)]
        while stack:
            prefix, node = stack.pop()
            for child in reversed(node.children):
                path = prefix + child.key
                yield path, child
                stack.append((path + "/", child))


class _XmlTree(object):
    """``nvidia-smi -q -x`` text -> :class:`_Node` tree, with the C expat parser (``xml.parsers.expat``) directly.

    What ``xml.etree.ElementTree.fromstring`` followed by the element walk did, without importing ElementTree
    (with weakref, contextlib, copy and ElementPath: about 4 % of a readiness-agent run, issue #32) and without
    building the elements first: tags as ElementTree names them (``{uri}name`` in a namespace), a leaf's text
    (entity and character references resolved, CDATA included), a section's value None, comments and processing
    instructions skipped.  A parse error is ElementTree's (expat's message with its line and column, an undefined
    entity named as ElementTree names it); nesting beyond :data:`MAX_DEPTH` is refused once the whole text parsed,
    as before."""

    def __init__(self):
        self.root = None
        self.stack = []  # open nodes
        self.texts = []  # character data of the innermost open node
        self.gpu_ids = []  # the id attribute of each <gpu> under the root (what ElementTree's findall gave)
        self.skipped = 0  # open elements deeper than MAX_DEPTH allows (not kept)
        self.too_deep = False
        self.error = None

    def start(self, tag, attributes):
        if "}" in tag:
            tag = "{" + tag
        stack = self.stack
        if self.skipped or len(stack) > MAX_DEPTH + 1:
            self.too_deep = True
            self.skipped += 1
            return
        node = _Node(tag, None)
        if stack:
            parent = stack[-1]
            parent.children.append(node)
            if len(stack) == 1 and tag == "gpu":
                self.gpu_ids.append(attributes.get("id"))
        else:
            self.root = node
        stack.append(node)
        self.texts = []

    def end(self, _tag):
        if self.skipped:
            self.skipped -= 1
            return
        node = self.stack.pop()
        if not node.children:
            node.value = "".join(self.texts)
        self.texts = []

    def data(self, text):
        self.texts.append(text)

    def default(self, text):
        # ElementTree's parser reports an entity it does not know through expat's default handler
        if text[:1] == "&" and self.error is None:
            self.error = "undefined entity %s: line %d, column %d" % (
                text, self.parser.CurrentLineNumber, self.parser.CurrentColumnNumber)
            raise _UndefinedEntity(self.error)

    def parse(self, text):
        from xml.parsers import expat  # pylint: disable=import-outside-toplevel
        self.parser = parser = expat.ParserCreate(None, "}")
        parser.buffer_text = True
        parser.StartElementHandler = self.start
        parser.EndElementHandler = self.end
        parser.CharacterDataHandler = self.data
        parser.DefaultHandlerExpand = self.default
        try:
            parser.Parse(text, True)
        except _UndefinedEntity:
            raise NvidiaSmiParseError("nvidia-smi -q -x output is not valid XML: %s" % self.error)
        except expat.ExpatError as exc:
            raise NvidiaSmiParseError("nvidia-smi -q -x output is not valid XML: %s" % exc)
        finally:
            parser.StartElementHandler = parser.EndElementHandler = parser.CharacterDataHandler = None
            parser.DefaultHandlerExpand = None
            self.parser = None
        if self.too_deep:
            raise NvidiaSmiParseError("nvidia-smi -q -x output nests deeper than %d levels" % MAX_DEPTH)
        return self.root


class _UndefinedEntity(FleetError):
    """Raised from the expat handler to stop at an unknown entity (the message is in _XmlTree.error)."""


def _text_tree(lines):
    """Indented ``Key : Value`` lines -> :class:`_Node` (depth bounded)."""
    root = _Node("", None)
    stack = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if stripped.endswith(" :"):
            node = _Node(stripped[:-1].strip(), "")
        elif " : " in stripped:
            key, value = stripped.split(" : ", 1)
            node = _Node(key.strip(), value.strip())
        else:
            node = _Node(stripped, None)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if len(stack) > MAX_DEPTH:
            raise NvidiaSmiParseError("nvidia-smi -q output nests deeper than %d levels" % MAX_DEPTH)
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


# ---------------------------------------------------------------------------
# the field table: result key, -q -x paths, -q paths, converter
# ---------------------------------------------------------------------------
TOP_FIELDS = (
    ("driver_version", ("driver_version",), ("Driver Version",), clean_value),
    ("cuda_version", ("cuda_version",), ("CUDA Version",), clean_value),
)
ATTACHED_GPUS = (("attached_gpus",), ("Attached GPUs",))

GPU_FIELDS = (
    ("product", ("product_name", "name"), ("Product Name",), clean_value),
    ("uuid", ("uuid",), ("GPU UUID", "UUID"), clean_value),
    ("minor_number", ("minor_number",), ("Minor Number",), _parse_int),
    ("pci_device_id", ("pci/pci_device_id",), ("PCI/Device Id",), _device_id),
    ("persistence_mode", ("persistence_mode",), ("Persistence Mode",), clean_value),
    ("ecc_mode", ("ecc_mode/current_ecc", "ecc_mode/current"), ("ECC Mode/Current",), clean_value),
    ("ecc_mode_pending", ("ecc_mode/pending_ecc", "ecc_mode/pending"), ("ECC Mode/Pending",), clean_value),
    ("mig_mode", ("mig_mode/current_mig", "mig_mode/current"), ("MIG Mode/Current",), clean_value),
    ("mig_mode_pending", ("mig_mode/pending_mig", "mig_mode/pending"), ("MIG Mode/Pending",), clean_value),
    ("memory_total_mib", ("fb_memory_usage/total", "memory_usage/total"), ("FB Memory Usage/Total",), _parse_int),
    ("memory_used_mib", ("fb_memory_usage/used", "memory_usage/used"), ("FB Memory Usage/Used",), _parse_int),
    ("memory_free_mib", ("fb_memory_usage/free", "memory_usage/free"), ("FB Memory Usage/Free",), _parse_int),
    ("temperature_c", ("temperature/gpu_temp",), ("Temperature/GPU Current Temp", "Temperature/GPU Current"),
     parse_number),
    ("utilization_gpu_pct", ("utilization/gpu_util",), ("Utilization/Gpu",), parse_number),
    ("retired_pages_pending", ("retired_pages/pending_retirement",),
     ("Retired Pages/Pending Page Retirement", "Retired Pages/Pending"), _yes_no),
    ("recovery_action", ("gpu_recovery_action",), ("GPU Recovery Action",), clean_value),
    ("reset_required", ("gpu_reset_status/reset_required",), ("GPU Reset Status/Reset Required",), _yes_no),
    ("drain_and_reset_recommended", ("gpu_reset_status/drain_and_reset_recommended",),
     ("GPU Reset Status/Drain and Reset Recommended",), _yes_no),
)

PCI_BUS_ID = (("pci/pci_bus_id",), ("PCI/Bus Id",))

#: ``remapped_rows``: section, then its fields.
REMAPPED_ROWS = (("remapped_rows",), ("Remapped Rows",))
REMAPPED_FIELDS = (
    ("correctable", ("remapped_row_corr", "correctable"), ("Correctable Error",), _parse_int),
    ("uncorrectable", ("remapped_row_unc", "uncorrectable"), ("Uncorrectable Error",), _parse_int),
    ("pending", ("remapped_row_pending", "pending"), ("Pending",), _yes_no),
    ("failure", ("remapped_row_failure", "failure_occurred"), ("Remapping Failure Occurred",), _yes_no),
)

#: ``mig_devices``: section, one entry's key, then its fields.
MIG_DEVICES = (("mig_devices",), ("MIG Devices",))
MIG_DEVICE = ("mig_device", "MIG Device")
MIG_DEVICE_FIELDS = (
    ("index", ("index",), ("Index",), _parse_int),
    ("gpu_instance_id", ("gpu_instance_id",), ("GPU Instance ID",), _parse_int),
    ("compute_instance_id", ("compute_instance_id",), ("Compute Instance ID",), _parse_int),
    ("multiprocessor_count", ("device_attributes/shared/multiprocessor_count",),
     ("Device Attributes/Shared/Multiprocessor count",), _parse_int),
    ("memory_total_mib", ("fb_memory_usage/total",), ("FB Memory Usage/Total",), _parse_int),
)

#: ``ecc_errors``: section, scopes, and the DTD <= v11 totals that override the sums.
ECC_ERRORS = (("ecc_errors",), ("ECC Errors",))
ECC_SCOPES = (("volatile", ("volatile",), ("Volatile",)), ("aggregate", ("aggregate",), ("Aggregate",)))
ECC_TOTALS = (("uncorrectable", ("double_bit/total",), ("Double Bit/Total",)),
              ("correctable", ("single_bit/total",), ("Single Bit/Total",)))

_XML, _TEXT = 1, 2


def _fields(node, table, form):
    result = {}
    for key, xml_paths, text_paths, convert in table:
        result[key] = convert(node.get(*(xml_paths if form == _XML else text_paths)))
    return result


def _section(node, paths, form):
    for path in paths[form - 1]:
        found = node.find(path)
        if found is not None:
            return found
    return None


def _new_gpu(index):
    return {
        "index": index,
        "minor_number": None,
        "pci_bus_id": None,
        "pci_device_id": None,
        "uuid": None,
        "product": None,
        "persistence_mode": None,
        "ecc_mode": None,
        "ecc_mode_pending": None,
        "mig_mode": None,
        "mig_mode_pending": None,
        "mig_devices": [],
        "memory_total_mib": None,
        "memory_used_mib": None,
        "memory_free_mib": None,
        "temperature_c": None,
        "utilization_gpu_pct": None,
        "remapped_rows": None,
        "ecc_errors": {
            "volatile_uncorrectable": None,
            "aggregate_uncorrectable": None,
            "volatile_correctable": None,
            "aggregate_correctable": None,
        },
        "retired_pages_pending": None,
        "recovery_action": None,
        "reset_required": None,
        "drain_and_reset_recommended": None,
        "unknown_error_fields": [],
        "unknown_error_health_fields": [],
        "lost": False,
        "clocks_event_reasons_active": [],
    }


def _add_counts(total, value):
    if value is None:
        return total
    return (total or 0) + value


def _ecc_errors(node, form):
    counts = _new_gpu(0)["ecc_errors"]
    errors = _section(node, ECC_ERRORS, form)
    if errors is None:
        return counts
    for scope, xml_path, text_path in ECC_SCOPES:
        part = _section(errors, (xml_path, text_path), form)
        if part is None:
            continue
        sums = {"uncorrectable": None, "correctable": None}
        for _path, leaf in part.walk():
            if leaf.children:
                continue
            key = leaf.folded
            kind = "uncorrectable" if "uncorrectable" in key else "correctable" if "correctable" in key else None
            if kind:
                sums[kind] = _add_counts(sums[kind], _parse_int(leaf.value))
        for kind, xml_paths, text_paths in ECC_TOTALS:
            total = _parse_int(part.get(*(xml_paths if form == _XML else text_paths)))
            if total is not None:
                sums[kind] = total
        counts["%s_uncorrectable" % scope] = sums["uncorrectable"]
        counts["%s_correctable" % scope] = sums["correctable"]
    return counts


def _remapped_rows(node, form):
    section = _section(node, REMAPPED_ROWS, form)
    if section is None or not section.children:
        return None  # absent, or the scalar N/A
    return _fields(section, REMAPPED_FIELDS, form)


def _mig_devices(node, form):
    devices = []
    section = _section(node, MIG_DEVICES, form)
    if section is None:
        return devices
    wanted = MIG_DEVICE[form - 1].lower()
    for position, device in enumerate(c for c in section.children if c.folded == wanted):
        entry = _fields(device, MIG_DEVICE_FIELDS, form)
        if entry["index"] is None:
            entry["index"] = position
        devices.append(entry)
    return devices


def _gpu(index, node, form, header_bus=None):
    """One GPU's dict from its tree (``form`` says which column of the field table applies)."""
    gpu = _new_gpu(index)
    gpu.update(_fields(node, GPU_FIELDS, form))
    gpu["pci_bus_id"] = _normalize_bus(node.get(*PCI_BUS_ID[form - 1])) or _normalize_bus(header_bus)
    gpu["mig_devices"] = _mig_devices(node, form)
    gpu["remapped_rows"] = _remapped_rows(node, form)
    gpu["ecc_errors"] = _ecc_errors(node, form)
    unknown = []
    lost = False
    for path, child in node.walk():
        value = (child.value or "").lower()
        if UNKNOWN_ERROR in value:
            unknown.append(path)
        if "gpu is lost" in value or "gpu is lost" in child.folded:
            lost = True
    gpu["unknown_error_fields"] = unknown
    gpu["unknown_error_health_fields"] = [path for path in unknown if is_health_field(path)]
    gpu["lost"] = lost
    gpu["clocks_event_reasons_active"] = _clocks_event_reasons(node)
    return gpu


def _report(top, gpus, handle_errors, form, what):
    report = dict((key, convert(top.get(*(xml_paths if form == _XML else text_paths))))
                  for key, xml_paths, text_paths, convert in TOP_FIELDS)
    report["attached_gpus"] = _gpu_count(top.get(*ATTACHED_GPUS[form - 1]), what)
    report["handle_errors"] = handle_errors
    report["gpus"] = gpus
    return report


# ---------------------------------------------------------------------------
# nvidia-smi -q -x
# ---------------------------------------------------------------------------
def _strip_doctype(text):
    """Drop the DOCTYPE (never resolved).  Linear: no regex over the document."""
    start = _plain_doctype(text)
    if start == -1:
        return text
    if start is None:
        if _ENTITY_RE.search(text):
            raise NvidiaSmiParseError("nvidia-smi XML declares entities; refusing to parse it")
        match = _DOCTYPE_START_RE.search(text)
        if match is None:
            return text
        start = match.start()
    end = text.find(">", start + 9)
    if end < 0:
        raise NvidiaSmiParseError("nvidia-smi XML has an unterminated DOCTYPE")
    if "[" in text[start + 9:end]:
        raise NvidiaSmiParseError("nvidia-smi XML has an internal DTD subset; refusing to parse it")
    return text[:start] + text[end + 1:]


def _plain_doctype(text):
    """Where the two patterns above would find ``<!DOCTYPE`` (and no ``<!ENTITY``), without compiling them: when
    every ``<!`` is followed by the upper-case ``DOCTYPE`` as nvidia-smi prints it, or by a character that no
    case-insensitive D or E matches (a comment's ``-``, a CDATA's ``[``), the first upper-case ``<!DOCTYPE``, or -1
    when there is none.  None: some ``<!`` needs the patterns' own case-insensitive judgement."""
    found = -1
    at = text.find("<!")
    while at >= 0:
        if text.startswith("DOCTYPE", at + 2):
            if found < 0:
                found = at
        elif text[at + 2:at + 3] in ("d", "D", "e", "E"):
            return None
        at = text.find("<!", at + 2)
    return found


def parse_query_xml(text):
    """Parse ``nvidia-smi -q -x`` (see the module docstring for the result)."""
    text = _check_input(text, "nvidia-smi -q -x")
    handle_errors = parse_handle_errors(text)
    start = text.find("<")
    if start < 0:
        raise NvidiaSmiParseError("nvidia-smi -q -x output holds no XML: %s" % text.strip().splitlines()[0][:200])
    builder = _XmlTree()
    tree = builder.parse(_strip_doctype(text[start:]).strip())
    if tree.key != "nvidia_smi_log":
        raise NvidiaSmiParseError("nvidia-smi -q -x output has root <%s>, expected <nvidia_smi_log>"
                                  % str(tree.key)[:80])
    ids = builder.gpu_ids
    if len(ids) > MAX_GPUS:
        raise NvidiaSmiParseError("nvidia-smi -q -x output describes %d GPUs, more than %d" % (len(ids), MAX_GPUS))
    sections = [c for c in tree.children if c.key == "gpu"]
    gpus = [_gpu(index, node, _XML, header_bus) for index, (node, header_bus) in enumerate(zip(sections, ids))]
    return _report(tree, gpus, handle_errors, _XML, "nvidia-smi -q -x")


# ---------------------------------------------------------------------------
# nvidia-smi -q (text)
# ---------------------------------------------------------------------------
def parse_query_text(text):
    """Parse ``nvidia-smi -q`` (text); same result shape as ``parse_query_xml``."""
    text = _check_input(text, "nvidia-smi -q")
    top_lines = []
    sections = []  # (header, [lines])
    for line in text.splitlines():
        if line.startswith("GPU ") and len(line) < 64 and _QUERY_GPU_HEADER_RE.match(line):
            if len(sections) >= MAX_GPUS:
                raise NvidiaSmiParseError("nvidia-smi -q output describes more than %d GPUs" % MAX_GPUS)
            sections.append((line.strip(), []))
        elif sections and (line.startswith(" ") or not line.strip()):
            sections[-1][1].append(line)
        else:
            top_lines.append(line)
    top = _text_tree(top_lines)
    handle_errors = parse_handle_errors(text)
    if top.get("Driver Version") is None and not sections and not detect_no_driver(text) and not handle_errors:
        raise NvidiaSmiParseError("nvidia-smi -q output has no 'Driver Version' and no GPU section")
    gpus = [_gpu(index, _text_tree(body), _TEXT, header.split(None, 1)[1])
            for index, (header, body) in enumerate(sections)]
    return _report(top, gpus, handle_errors, _TEXT, "nvidia-smi -q")


# ---------------------------------------------------------------------------
# plain nvidia-smi table
# ---------------------------------------------------------------------------
_TABLE_HEADER_RE = lazy_compile(
    r"Driver Version:\s*(?P<driver>\S+)(?:\s+CUDA Version:\s*(?P<cuda>\S+))?"
)
_TABLE_GPU_RE = lazy_compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>.*?)\s+(?P<persist>On|Off|ERR!|N/A)?\s*\|"
    r"\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+(?P<disp>\S+)\s*\|"
    r"\s*(?P<ecc>.*?)\s*\|\s*$"
)
_TABLE_MEMORY_RE = lazy_compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")
_TABLE_PROCESS_RE = lazy_compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+"
    r"(?P<name>.+?)\s+(?P<mem>\d+MiB|N/A)\s*\|\s*$"
)
_TABLE_OLD_PROCESS_RE = lazy_compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+(?P<name>.+?)\s+(?P<mem>\d+MiB|N/A)\s*\|\s*$"
)


def _cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_table(text):
    """Parse the plain ``nvidia-smi`` table (see the module docstring)."""
    text = _check_input(text, "nvidia-smi")
    result = {
        "driver_version": None,
        "cuda_version": None,
        "no_driver": detect_no_driver(text),
        "handle_errors": parse_handle_errors(text),
        "gpus": [],
        "processes": [],
    }
    current = None
    in_processes = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if len(line) > MAX_TABLE_LINE:
            continue  # not a table line; keeps the row regexes linear
        header = _TABLE_HEADER_RE.search(line)
        if header and result["driver_version"] is None:
            result["driver_version"] = header.group("driver")
            result["cuda_version"] = clean_value(header.group("cuda"))
            continue
        if "Processes:" in line:
            in_processes = True
            current = None
            continue
        if in_processes:
            match = _TABLE_PROCESS_RE.match(line) or _TABLE_OLD_PROCESS_RE.match(line)
            if match:
                groups = match.groupdict()
                result["processes"].append({
                    "gpu_index": int(groups["gpu"]),
                    "gi": _parse_int(groups.get("gi")),
                    "ci": _parse_int(groups.get("ci")),
                    "pid": int(groups["pid"]),
                    "type": groups["type"],
                    "name": groups["name"].strip(),
                    "memory_mib": _parse_int(groups["mem"].replace("MiB", "")),
                })
            continue
        match = _TABLE_GPU_RE.match(line)
        if match:
            name = match.group("name").strip()
            current = {
                "index": int(match.group("index")),
                "product": None if name == "ERR!" else name,
                "pci_bus_id": normalize_bus_id(match.group("bus")),
                "persistence_mode": match.group("persist"),
                "err": "ERR!" in line,
                "err_fields": [],
                "memory_used_mib": None,
                "memory_total_mib": None,
                "ecc": clean_value(match.group("ecc")),
                "mig_mode": None,
                "_row": 0,
            }
            if "ERR!" in line:
                current["err_fields"].extend(_err_fields(line, 0))
            if len(result["gpus"]) >= MAX_GPUS:
                raise NvidiaSmiParseError("nvidia-smi output lists more than %d GPUs" % MAX_GPUS)
            result["gpus"].append(current)
            continue
        if current is None:
            continue
        if line.startswith("+") or line.startswith("|=") or not line.startswith("|"):
            current.pop("_row", None)
            current = None
            continue
        current["_row"] += 1
        if "ERR!" in line:
            current["err"] = True
            current["err_fields"].extend(_err_fields(line, current["_row"]))
        memory = _TABLE_MEMORY_RE.search(line)
        if memory and current["memory_total_mib"] is None:
            current["memory_used_mib"] = int(memory.group("used"))
            current["memory_total_mib"] = int(memory.group("total"))
        cells = _cells(line)
        if current["_row"] == 2 and len(cells) >= 3 and cells[-1]:
            current["mig_mode"] = clean_value(cells[-1])
    for gpu in result["gpus"]:
        gpu.pop("_row", None)
    if not result["gpus"] and result["driver_version"] is None and not result["no_driver"] and not result["handle_errors"]:
        raise NvidiaSmiParseError("nvidia-smi output holds neither a GPU table nor a known error: %s"
                                  % text.strip().splitlines()[0][:200])
    return result


#: Table fields whose ERR! is a sensor nvidia-smi could not read on a GPU that
#: otherwise answers (a fan, the temperature, the power draw or cap); an ERR!
#: anywhere else (name, bus, memory, utilisation, ECC, MIG) is not a sensor.
SENSOR_FIELDS = frozenset(("fan", "temperature", "power_usage", "power_cap"))


_PAIR_RE = lazy_compile(r"\s+/\s+")


def _split_pair(cell):
    """``"61W / 400W"`` -> ``("61W", "400W")``; the slash of ``N/A`` has no spaces around it."""
    parts = _PAIR_RE.split(cell, 1)
    return (parts[0], parts[1]) if len(parts) == 2 else (cell, "")


def _err_fields(line, row):
    """Which fields of a table row read ``ERR!`` (for the reason text).

    Read cell by cell, as nvidia-smi lays the row out (R4xx-R5xx layouts,
    tests/fixtures/nvidia/): row 0 is ``index name persistence | bus disp |
    ecc``, row 1 ``fan temp perf power_usage / power_cap | used / total |
    util compute``, row 2 the MIG mode.  ``N/A`` stays one value (splitting
    on ``/`` made ``N/A / ERR!`` read as the memory total).
    """
    cells = _cells(line)
    fields = []
    if row == 0:
        if cells:
            words = cells[0].split()
            if len(words) >= 2 and words[-1] == "ERR!":
                fields.append("persistence_mode")
                words = words[:-1]
            if "ERR!" in words[1:]:
                fields.append("name")
        if len(cells) > 1 and "ERR!" in cells[1].split()[1:]:
            fields.append("display_active")
        if len(cells) > 2 and "ERR!" in cells[2]:
            fields.append("volatile_uncorrectable_ecc")
        return fields
    if row == 2:
        return ["mig_mode"] if "ERR!" in line else []
    if row != 1:
        return ["row_%d" % row] if "ERR!" in line else []
    if cells:
        left, cap = _split_pair(cells[0])
        words = left.split()
        names = ("fan", "temperature", "perf")
        for position, word in enumerate(words):
            if word == "ERR!":
                fields.append("power_usage" if position == len(words) - 1 and len(words) > 3
                              else names[position] if position < len(names) else "field_%d" % position)
        if "ERR!" in cap:
            fields.append("power_cap")
    if len(cells) > 1:
        used, total = _split_pair(cells[1])
        if "ERR!" in used:
            fields.append("memory_used")
        if "ERR!" in total:
            fields.append("memory_total")
    if len(cells) > 2:
        words = cells[2].split()
        for position, word in enumerate(words):
            if word == "ERR!":
                fields.append(("gpu_util", "compute_mode")[position] if position < 2 else "field_%d" % position)
    return fields


#: ``--query-*`` CSV rows read at most (one per GPU or compute process).
MAX_CSV_ROWS = 65536


def parse_query_csv(text, fields=None):
    """Parse ``--query-gpu=...``/``--query-compute-apps=... --format=csv`` (with or without ``noheader``/``nounits``).

    ``fields`` names the columns when the output has no header.  Bounded like
    the other parsers: input size, line length and row count.
    """
    if text is None or not text.strip():
        return []  # no GPU process (or no row) is an empty answer, not an error
    text = _check_input(text, "nvidia-smi --query CSV output")
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_CSV_ROWS + 1:
        raise NvidiaSmiParseError("nvidia-smi CSV output has more than %d rows" % MAX_CSV_ROWS)
    if not lines:
        return []
    if fields is None:
        fields = [re.sub(r"\s*\[[^\]]*\]$", "", name.strip()) for name in lines[0].split(",")]
        lines = lines[1:]
    else:
        fields = [name.strip() for name in fields]
    rows = []
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_TABLE_LINE:
            raise NvidiaSmiParseError("nvidia-smi CSV row %d is longer than %d characters" % (number, MAX_TABLE_LINE))
        if detect_no_driver(line):
            raise NvidiaSmiParseError("nvidia-smi could not reach the driver: %s" % line.strip())
        values = [value.strip() for value in line.split(", ")]
        if len(values) != len(fields):
            values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            raise NvidiaSmiParseError("nvidia-smi CSV row %d has %d values for %d fields: %s" % (
                number, len(values), len(fields), line.strip()[:200]))
        rows.append(dict((name, clean_value(value)) for name, value in zip(fields, values)))
    return rows
