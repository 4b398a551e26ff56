# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
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
        lost               True when the GPU section says "GPU is lost"

``parse_table(text)``: the plain ``nvidia-smi`` table.  Returns
``{driver_version, cuda_version, no_driver, handle_errors, gpus, processes}``
where each GPU is ``{index, product, pci_bus_id, persistence_mode, err,
err_fields, memory_used_mib, memory_total_mib, ecc, mig_mode}`` (``err`` is
True when ``ERR!`` appears anywhere in its row) and each process is
``{gpu_index, gi, ci, pid, type, name, memory_mib}``.

``parse_query_csv(text, fields=None)``: ``--query-gpu=... --format=csv[,noheader][,nounits]``.
Returns a list of dicts keyed by the canonical field name (units dropped from
the header).  ``[N/A]``/``[Not Supported]`` become None; values keep their
units (use ``parse_number``).

``detect_no_driver(text)``: True for "NVIDIA-SMI has failed because it
couldn't communicate with the NVIDIA driver".

Every parser raises ``NvidiaSmiParseError`` (one line) on input it cannot read.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from xml.etree import ElementTree

from ansible_collections.gpu_native.fleet.plugins.module_utils.pci import (
    PciBusIdError,
    find_bus_id,
    normalize_bus_id,
)

NO_DRIVER_MARKERS = (
    "couldn't communicate with the nvidia driver",
    "could not communicate with the nvidia driver",
    "nvml: driver not loaded",
    "driver/library version mismatch",
)
UNKNOWN_ERROR = "unknown error"

_DOCTYPE_RE = re.compile(r"<!DOCTYPE\s[^>\[]*(?:\[.*?\])?\s*>", re.DOTALL | re.IGNORECASE)
_HANDLE_ERROR_RE = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<bus>[0-9A-Fa-f:.]+)\s*:\s*(?P<msg>.*)$"
)
_NUMBER_RE = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)")
_NA_VALUES = ("n/a", "[n/a]", "not supported", "[not supported]", "")


class NvidiaSmiParseError(ValueError):
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
    """Leading number of a value with units (``"19968 MiB"`` -> 19968, ``"67.03 W"`` -> 67.03)."""
    value = clean_value(value)
    if value is None:
        return None
    match = _NUMBER_RE.match(value)
    if not match:
        return None
    number = float(match.group(1))
    if number.is_integer() and "." not in match.group(1):
        return int(number)
    return number


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
    if value is None:
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
    return "0x" + value.upper()


def detect_no_driver(text):
    """True when the output says nvidia-smi could not reach the driver."""
    lowered = (text or "").lower()
    return any(marker in lowered for marker in NO_DRIVER_MARKERS)


def parse_handle_errors(text):
    """Every "Unable to determine the device handle for GPU ..." line."""
    errors = []
    for line in (text or "").splitlines():
        match = _HANDLE_ERROR_RE.search(line)
        if match:
            errors.append({"pci_bus_id": _normalize_bus(match.group("bus").rstrip(":")), "message": line.strip()})
    return errors


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
        "lost": False,
    }


def _add_counts(total, value):
    if value is None:
        return total
    return (total or 0) + value


# ---------------------------------------------------------------------------
# nvidia-smi -q -x
# ---------------------------------------------------------------------------
def _strip_doctype(text):
    if "<!ENTITY" in text.upper():
        raise NvidiaSmiParseError("nvidia-smi XML declares entities; refusing to parse it")
    return _DOCTYPE_RE.sub("", text, count=1)


def _xtext(element, *paths):
    """Text of the first existing path (tag names changed between driver versions)."""
    if element is None:
        return None
    for path in paths:
        found = element.find(path)
        if found is not None:
            if len(found):
                return None  # a section, not a scalar
            return found.text if found.text is not None else ""
    return None


def _xml_ecc_errors(gpu_element):
    counts = _new_gpu(0)["ecc_errors"]
    errors = gpu_element.find("ecc_errors")
    if errors is None:
        return counts
    for scope in ("volatile", "aggregate"):
        section = errors.find(scope)
        if section is None:
            continue
        uncorrectable = correctable = None
        for leaf in section.iter():
            if len(leaf) or leaf is section:
                continue
            tag = leaf.tag.lower()
            value = _parse_int(leaf.text)
            if "uncorrectable" in tag:
                uncorrectable = _add_counts(uncorrectable, value)
            elif "correctable" in tag:
                correctable = _add_counts(correctable, value)
        # DTD <= v11: <double_bit><total> (uncorrectable) and <single_bit><total>
        double_total = _parse_int(_xtext(section, "double_bit/total"))
        single_total = _parse_int(_xtext(section, "single_bit/total"))
        if double_total is not None:
            uncorrectable = double_total
        if single_total is not None:
            correctable = single_total
        counts["%s_uncorrectable" % scope] = uncorrectable
        counts["%s_correctable" % scope] = correctable
    return counts


def _xml_remapped_rows(gpu_element):
    section = gpu_element.find("remapped_rows")
    if section is None or not len(section):
        return None  # absent, or the scalar <remapped_rows>N/A</remapped_rows>
    return {
        "correctable": _parse_int(_xtext(section, "remapped_row_corr", "correctable")),
        "uncorrectable": _parse_int(_xtext(section, "remapped_row_unc", "uncorrectable")),
        "pending": _yes_no(_xtext(section, "remapped_row_pending", "pending")),
        "failure": _yes_no(_xtext(section, "remapped_row_failure", "failure_occurred")),
    }


def _xml_mig_devices(gpu_element):
    devices = []
    section = gpu_element.find("mig_devices")
    if section is None:
        return devices
    for position, device in enumerate(section.findall("mig_device")):
        index = _parse_int(_xtext(device, "index"))
        devices.append({
            "index": index if index is not None else position,
            "gpu_instance_id": _parse_int(_xtext(device, "gpu_instance_id")),
            "compute_instance_id": _parse_int(_xtext(device, "compute_instance_id")),
            "multiprocessor_count": _parse_int(_xtext(device, "device_attributes/shared/multiprocessor_count")),
            "memory_total_mib": _parse_int(_xtext(device, "fb_memory_usage/total")),
        })
    return devices


def _unknown_error_paths(element, prefix=""):
    paths = []
    for child in element:
        path = prefix + child.tag
        if len(child):
            paths.extend(_unknown_error_paths(child, path + "/"))
        elif child.text and UNKNOWN_ERROR in child.text.lower():
            paths.append(path)
    return paths


def _xml_gpu(index, element):
    gpu = _new_gpu(index)
    gpu["product"] = clean_value(_xtext(element, "product_name", "name"))
    gpu["uuid"] = clean_value(_xtext(element, "uuid"))
    gpu["minor_number"] = _parse_int(_xtext(element, "minor_number"))
    gpu["pci_bus_id"] = _normalize_bus(_xtext(element, "pci/pci_bus_id") or element.get("id"))
    gpu["pci_device_id"] = _device_id(_xtext(element, "pci/pci_device_id"))
    gpu["persistence_mode"] = clean_value(_xtext(element, "persistence_mode"))
    gpu["ecc_mode"] = clean_value(_xtext(element, "ecc_mode/current_ecc", "ecc_mode/current"))
    gpu["ecc_mode_pending"] = clean_value(_xtext(element, "ecc_mode/pending_ecc", "ecc_mode/pending"))
    gpu["mig_mode"] = clean_value(_xtext(element, "mig_mode/current_mig", "mig_mode/current"))
    gpu["mig_mode_pending"] = clean_value(_xtext(element, "mig_mode/pending_mig", "mig_mode/pending"))
    gpu["mig_devices"] = _xml_mig_devices(element)
    for key, tag in (("memory_total_mib", "total"), ("memory_used_mib", "used"), ("memory_free_mib", "free")):
        gpu[key] = _parse_int(_xtext(element, "fb_memory_usage/" + tag, "memory_usage/" + tag))
    gpu["temperature_c"] = parse_number(_xtext(element, "temperature/gpu_temp"))
    gpu["utilization_gpu_pct"] = parse_number(_xtext(element, "utilization/gpu_util"))
    gpu["remapped_rows"] = _xml_remapped_rows(element)
    gpu["ecc_errors"] = _xml_ecc_errors(element)
    gpu["retired_pages_pending"] = _yes_no(_xtext(element, "retired_pages/pending_retirement"))
    gpu["recovery_action"] = clean_value(_xtext(element, "gpu_recovery_action"))
    gpu["reset_required"] = _yes_no(_xtext(element, "gpu_reset_status/reset_required"))
    gpu["drain_and_reset_recommended"] = _yes_no(_xtext(element, "gpu_reset_status/drain_and_reset_recommended"))
    gpu["unknown_error_fields"] = _unknown_error_paths(element)
    gpu["lost"] = "gpu is lost" in ElementTree.tostring(element, encoding="unicode").lower()
    return gpu


def parse_query_xml(text):
    """Parse ``nvidia-smi -q -x`` (see the module docstring for the result)."""
    if not text or not text.strip():
        raise NvidiaSmiParseError("nvidia-smi -q -x output is empty")
    handle_errors = parse_handle_errors(text)
    start = text.find("<")
    if start < 0:
        raise NvidiaSmiParseError("nvidia-smi -q -x output holds no XML: %s" % text.strip().splitlines()[0][:200])
    try:
        root = ElementTree.fromstring(_strip_doctype(text[start:]).strip())
    except ElementTree.ParseError as exc:
        raise NvidiaSmiParseError("nvidia-smi -q -x output is not valid XML: %s" % exc)
    if root.tag != "nvidia_smi_log":
        raise NvidiaSmiParseError("nvidia-smi -q -x output has root <%s>, expected <nvidia_smi_log>" % root.tag)
    return {
        "driver_version": clean_value(_xtext(root, "driver_version")),
        "cuda_version": clean_value(_xtext(root, "cuda_version")),
        "attached_gpus": _parse_int(_xtext(root, "attached_gpus")),
        "handle_errors": handle_errors,
        "gpus": [_xml_gpu(index, element) for index, element in enumerate(root.findall("gpu"))],
    }


# ---------------------------------------------------------------------------
# nvidia-smi -q (text)
# ---------------------------------------------------------------------------
class _Node(object):
    __slots__ = ("key", "value", "children")

    def __init__(self, key, value):
        self.key = key
        self.value = value
        self.children = []

    def find(self, path):
        node = self
        for part in path.split("/"):
            for child in node.children:
                if child.key.lower() == part.lower():
                    node = child
                    break
            else:
                return None
        return node

    def get(self, *paths):
        for path in paths:
            node = self.find(path)
            if node is not None:
                return node.value
        return None


def _text_tree(lines):
    """Build a tree from indented ``Key : Value`` lines."""
    root = _Node("", None)
    stack = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if " : " in stripped or stripped.endswith(" :"):
            key, value = stripped.split(":", 1) if stripped.endswith(" :") else stripped.split(" : ", 1)
            node = _Node(key.strip(), value.strip())
        else:
            node = _Node(stripped, None)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _text_unknown_errors(node, prefix=""):
    paths = []
    for child in node.children:
        path = prefix + child.key
        if child.value and UNKNOWN_ERROR in child.value.lower():
            paths.append(path)
        paths.extend(_text_unknown_errors(child, path + "/"))
    return paths


def _text_ecc_errors(node):
    counts = _new_gpu(0)["ecc_errors"]
    section = node.find("ECC Errors")
    if section is None:
        return counts
    for scope in ("Volatile", "Aggregate"):
        part = section.find(scope)
        if part is None:
            continue
        uncorrectable = correctable = None
        for child in part.children:
            key = child.key.lower()
            value = _parse_int(child.value)
            if "uncorrectable" in key:
                uncorrectable = _add_counts(uncorrectable, value)
            elif "correctable" in key:
                correctable = _add_counts(correctable, value)
        double_total = _parse_int(part.get("Double Bit/Total"))
        single_total = _parse_int(part.get("Single Bit/Total"))
        if double_total is not None:
            uncorrectable = double_total
        if single_total is not None:
            correctable = single_total
        counts["%s_uncorrectable" % scope.lower()] = uncorrectable
        counts["%s_correctable" % scope.lower()] = correctable
    return counts


def _text_mig_devices(node):
    devices = []
    section = node.find("MIG Devices")
    if section is None:
        return devices
    for position, device in enumerate(c for c in section.children if c.key.lower() == "mig device"):
        index = _parse_int(device.get("Index"))
        devices.append({
            "index": index if index is not None else position,
            "gpu_instance_id": _parse_int(device.get("GPU Instance ID")),
            "compute_instance_id": _parse_int(device.get("Compute Instance ID")),
            "multiprocessor_count": _parse_int(device.get("Device Attributes/Shared/Multiprocessor count")),
            "memory_total_mib": _parse_int(device.get("FB Memory Usage/Total")),
        })
    return devices


def _text_gpu(index, header, node):
    gpu = _new_gpu(index)
    gpu["pci_bus_id"] = _normalize_bus(node.get("PCI/Bus Id")) or _normalize_bus(header.split(None, 1)[1] if " " in header else None)
    gpu["product"] = clean_value(node.get("Product Name"))
    gpu["uuid"] = clean_value(node.get("GPU UUID", "UUID"))
    gpu["minor_number"] = _parse_int(node.get("Minor Number"))
    gpu["pci_device_id"] = _device_id(node.get("PCI/Device Id"))
    gpu["persistence_mode"] = clean_value(node.get("Persistence Mode"))
    gpu["ecc_mode"] = clean_value(node.get("ECC Mode/Current"))
    gpu["ecc_mode_pending"] = clean_value(node.get("ECC Mode/Pending"))
    gpu["mig_mode"] = clean_value(node.get("MIG Mode/Current"))
    gpu["mig_mode_pending"] = clean_value(node.get("MIG Mode/Pending"))
    gpu["mig_devices"] = _text_mig_devices(node)
    for key, field in (("memory_total_mib", "Total"), ("memory_used_mib", "Used"), ("memory_free_mib", "Free")):
        gpu[key] = _parse_int(node.get("FB Memory Usage/" + field))
    gpu["temperature_c"] = parse_number(node.get("Temperature/GPU Current Temp", "Temperature/GPU Current"))
    gpu["utilization_gpu_pct"] = parse_number(node.get("Utilization/Gpu"))
    remapped = node.find("Remapped Rows")
    if remapped is not None and remapped.children:
        gpu["remapped_rows"] = {
            "correctable": _parse_int(remapped.get("Correctable Error")),
            "uncorrectable": _parse_int(remapped.get("Uncorrectable Error")),
            "pending": _yes_no(remapped.get("Pending")),
            "failure": _yes_no(remapped.get("Remapping Failure Occurred")),
        }
    gpu["ecc_errors"] = _text_ecc_errors(node)
    gpu["retired_pages_pending"] = _yes_no(node.get("Retired Pages/Pending Page Retirement", "Retired Pages/Pending"))
    gpu["recovery_action"] = clean_value(node.get("GPU Recovery Action"))
    gpu["reset_required"] = _yes_no(node.get("GPU Reset Status/Reset Required"))
    gpu["drain_and_reset_recommended"] = _yes_no(node.get("GPU Reset Status/Drain and Reset Recommended"))
    gpu["unknown_error_fields"] = _text_unknown_errors(node)
    return gpu


def parse_query_text(text):
    """Parse ``nvidia-smi -q`` (text); same result shape as ``parse_query_xml``."""
    if not text or not text.strip():
        raise NvidiaSmiParseError("nvidia-smi -q output is empty")
    lines = text.splitlines()
    top_lines = []
    sections = []  # (header, [lines])
    for line in lines:
        if re.match(r"^GPU\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$", line):
            sections.append((line.strip(), []))
        elif sections and (line.startswith(" ") or not line.strip()):
            sections[-1][1].append(line)
        else:
            top_lines.append(line)
    top = _text_tree(top_lines)
    if top.get("Driver Version") is None and not sections and not detect_no_driver(text):
        if not parse_handle_errors(text):
            raise NvidiaSmiParseError("nvidia-smi -q output has no 'Driver Version' and no GPU section")
    gpus = []
    for index, (header, body) in enumerate(sections):
        gpu = _text_gpu(index, header, _text_tree(body))
        gpu["lost"] = any("gpu is lost" in line.lower() for line in body)
        gpus.append(gpu)
    return {
        "driver_version": clean_value(top.get("Driver Version")),
        "cuda_version": clean_value(top.get("CUDA Version")),
        "attached_gpus": _parse_int(top.get("Attached GPUs")),
        "handle_errors": parse_handle_errors(text),
        "gpus": gpus,
    }


# ---------------------------------------------------------------------------
# plain nvidia-smi table
# ---------------------------------------------------------------------------
_TABLE_HEADER_RE = re.compile(
    r"Driver Version:\s*(?P<driver>\S+)(?:\s+CUDA Version:\s*(?P<cuda>\S+))?"
)
_TABLE_GPU_RE = re.compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>.*?)\s+(?P<persist>On|Off|ERR!|N/A)?\s*\|"
    r"\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+(?P<disp>\S+)\s*\|"
    r"\s*(?P<ecc>.*?)\s*\|\s*$"
)
_TABLE_MEMORY_RE = re.compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")
_TABLE_PROCESS_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+"
    r"(?P<name>.+?)\s+(?P<mem>\d+MiB|N/A)\s*\|\s*$"
)
_TABLE_OLD_PROCESS_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+(?P<name>.+?)\s+(?P<mem>\d+MiB|N/A)\s*\|\s*$"
)


def _cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_table(text):
    """Parse the plain ``nvidia-smi`` table (see the module docstring)."""
    if text is None or not text.strip():
        raise NvidiaSmiParseError("nvidia-smi output is empty")
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


_ROW_FIELDS = (
    ("name", "persistence_mode", "bus_id", "display_active", "volatile_uncorrectable_ecc"),
    ("fan", "temperature", "perf", "power_usage", "power_cap", "memory_used", "memory_total", "gpu_util", "compute_mode"),
    ("mig_mode",),
)


def _err_fields(line, row):
    """Which columns of a table row read ``ERR!`` (for the reason text)."""
    tokens = [t for t in re.split(r"[|/\s]+", line) if t]
    names = _ROW_FIELDS[row] if row < len(_ROW_FIELDS) else ()
    fields = []
    if row == 0:
        cells = _cells(line)
        if cells and "ERR!" in cells[0]:
            fields.append("name")
        if len(cells) > 2 and "ERR!" in cells[2]:
            fields.append("volatile_uncorrectable_ecc")
        return fields
    if row == 2:
        return ["mig_mode"] if "ERR!" in line else []
    err_positions = [i for i, token in enumerate(tokens) if token == "ERR!"]
    for position in err_positions:
        fields.append(names[position] if position < len(names) else "field_%d" % position)
    return fields


# ---------------------------------------------------------------------------
# --query-gpu ... --format=csv
# ---------------------------------------------------------------------------
_CSV_UNIT_RE = re.compile(r"\s*\[[^\]]*\]\s*$")


def parse_query_csv(text, fields=None):
    """Parse ``--query-gpu=... --format=csv`` (with or without ``noheader``/``nounits``).

    ``fields`` names the columns when the output has no header.
    """
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return []
    if fields is None:
        fields = [_CSV_UNIT_RE.sub("", name.strip()) for name in lines[0].split(",")]
        lines = lines[1:]
    else:
        fields = [name.strip() for name in fields]
    rows = []
    for number, line in enumerate(lines, start=1):
        if detect_no_driver(line):
            raise NvidiaSmiParseError("nvidia-smi could not reach the driver: %s" % line.strip())
        values = [value.strip() for value in line.split(", ")]
        if len(values) != len(fields):
            values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            raise NvidiaSmiParseError(
                "nvidia-smi CSV row %d has %d values for %d fields: %s" % (number, len(values), len(fields), line.strip())
            )
        row = {}
        for name, value in zip(fields, values):
            row[name] = clean_value(value)
        rows.append(row)
    return rows


def bus_id_from_text(text):
    """First PCI bus id in a free-text line (normalised) or None."""
    return find_bus_id(text)
