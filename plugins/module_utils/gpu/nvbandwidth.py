# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Read what NVIDIA's ``nvbandwidth`` prints and judge GPU-to-GPU bandwidth per GPU model.

DCGM measures NVLink/P2P bandwidth but does not judge it against the GPU
model; this module does, with thresholds kept as data (:data:`NVLINK_CATALOG`).

Output shapes (source: NVIDIA/nvbandwidth at v0.8, commit 66746a3b:
``output.cpp``, ``json_output.cpp``, ``inline_common.h``, ``nvbandwidth.cpp``;
real outputs in tests/fixtures/nvbandwidth/):

- text (every version): ``nvbandwidth Version: v0.8``, ``Device 0: NVIDIA H100
  80GB HBM3 (00000000:18:00)`` (v0.4 prints no bus id), then per testcase
  ``Running <name>.``, a description such as ``memcpy CE GPU(row) -> GPU(column)
  bandwidth (GB/s)``, a header of column indexes, one row per GPU, ``SUM <name>
  <value>`` and, from v0.9, ``COEFFICIENT_OF_VARIATION <name> <value>`` (read
  into the testcase's ``coefficient_of_variation``).  v0.10.0 prints no
  ``Device N:`` lines at all and its versions as ``13.2 (13020)`` (real output:
  tests/fixtures/nvbandwidth/h100x8_v0.10.0_d2d_read_write_ce.txt): the GPU
  model and count then come from ``nvidia-smi`` (the gpu_bandwidth module).  A pair
  that was not measured (the diagonal, a pair without peer access) is ``N/A``
  (v0.5+) or ``0.00`` on the diagonal (older).  A testcase that cannot run
  prints ``Waived:`` without its name; an unknown one ``ERROR: Testcase <name>
  not found!`` (and the tool still exits 0); a CUDA/NVML/verification failure
  prints one line on stderr and exits 1.
- JSON (``-j``, v0.5+): ``{"nvbandwidth": {"version", "GPU Device list",
  "testcases": [{"name", "status", "bandwidth_description",
  "bandwidth_matrix": [["N/A", "370.9", ...], ...], "sum"}], "error"}}``;
  the cells are strings.  Some versions leave the device list empty
  (NVIDIA/nvbandwidth issue #66), so the text form is the default.

Only the unidirectional device-to-device testcases are judged (each cell is one
direction of one GPU pair); every off-diagonal pair must reach the threshold.
Hostile input is normal input: sizes are bounded, cut matrices, ``N/A`` where
a pair should have been measured and garbage cells are clear reasons, never a
pass.  Standard library only, Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import IntegerParseError, parse_int
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.json_limits import json_nesting_exceeds

#: Inputs above this are refused (a full run on 8 GPUs prints about 30 KB).
MAX_INPUT_CHARS = 4 * 1024 * 1024
#: At most this many GPUs per matrix (an NVL72 rack under MPI lists 72).
MAX_GPUS = 576
#: At most this many testcases are read.
MAX_TESTCASES = 128
#: A cell above this (GB/s) is not a measurement (NVLink 5 is 900 GB/s per direction).
MAX_GBPS = 100000.0
#: Reasons list at most this many failing pairs (the rest are counted).
MAX_PAIR_REASONS = 8

#: The testcases judged here: each cell is one direction of one GPU pair.
#: ``engine``: copy engine (cuMemcpyAsync) or SM (kernel copy).
JUDGED_TESTCASES = {
    "device_to_device_memcpy_read_ce": {"engine": "CE", "kind": "read"},
    "device_to_device_memcpy_write_ce": {"engine": "CE", "kind": "write"},
    "device_to_device_memcpy_read_sm": {"engine": "SM", "kind": "read"},
    "device_to_device_memcpy_write_sm": {"engine": "SM", "kind": "write"},
}
DEFAULT_TESTCASES = ("device_to_device_memcpy_read_ce",)

#: Our policy (not NVIDIA's): every GPU pair must reach this fraction of the
#: theoretical NVLink bandwidth per direction in a device-to-device memcpy.
#: Measured healthy nodes reach about 82% (H100 SXM5, read CE: 370.9 of 450 GB/s,
#: tests/fixtures/nvbandwidth/h100x8_v0.4_d2d_read_ce.txt) and 92% (the README's
#: 8-GPU run, 276 GB/s); Azure's health checks fail an H200 pair under 335 GB/s
#: (74%, Azure/azurehpc-health-checks conf/nd96isr_h200_v5.conf ``check_gpu_bw 48 335``).
#: 70% leaves room for run-to-run noise and still catches a pair that lost most of
#: its links or fell back to PCIe.  Tune it per model with ``thresholds``.
DEFAULT_FRACTION = 0.70
POLICY = ("gpu_native.fleet policy, not an NVIDIA figure: every GPU pair must reach %s of the theoretical NVLink "
          "bandwidth per direction (half the per-GPU total) in a device-to-device memcpy")

_NVLINK4_SOURCE = ("NVIDIA Hopper architecture page (nvidia.com, technologies/hopper-architecture, read as the en-sg "
                   "edition): fourth-generation NVLink, 900 GB/s bidirectional per GPU in DGX/HGX servers")
#: Theoretical NVLink bandwidth per GPU, both directions together (GB/s), keyed by the
#: product name nvidia-smi and CUDA print.  Only SXM parts whose every GPU pair has
#: NVLink through NVSwitch are listed: PCIe and NVL (bridge) parts reach some peers
#: through PCIe only, and H800/A800 have fewer links; they get no threshold.
NVLINK_CATALOG = {
    "NVIDIA H100 80GB HBM3": {
        "sku": "H100 SXM5 80GB",
        "nvlink": "NVLink 4, 18 links",
        "total_gbps": 900.0,
        "source": _NVLINK4_SOURCE,
    },
    "NVIDIA H200": {
        "sku": "H200 SXM 141GB",
        "nvlink": "NVLink 4, 18 links",
        "total_gbps": 900.0,
        "source": _NVLINK4_SOURCE + "; NVIDIA's MLPerf Inference v4.1 system description H200-SXM-141GBx8 "
                                    "(mlcommons/inference_results_v4.1): '18x 4th Gen NVLink, 900GB/s'",
    },
    "NVIDIA A100-SXM4-80GB": {
        "sku": "A100 SXM4 80GB",
        "nvlink": "NVLink 3, 12 links",
        "total_gbps": 600.0,
        "source": "NVIDIA NVLink page (nvidia.com/de-de/data-center/nvlink): one A100 supports up to twelve "
                  "third-generation NVLink connections, 600 GB/s in total",
    },
    "NVIDIA A100-SXM4-40GB": {
        "sku": "A100 SXM4 40GB",
        "nvlink": "NVLink 3, 12 links",
        "total_gbps": 600.0,
        "source": "NVIDIA NVLink page (nvidia.com/de-de/data-center/nvlink): one A100 supports up to twelve "
                  "third-generation NVLink connections, 600 GB/s in total",
    },
    "NVIDIA B200": {
        "sku": "B200 (HGX B200)",
        "nvlink": "NVLink 5, 18 links",
        "total_gbps": 1800.0,
        "source": "NVIDIA NVLink and NVLink Switch page (nvidia.com, data-center/nvlink; read through resellers' "
                  "verbatim copies): a Blackwell GPU supports up to 18 NVLink 100 GB/s connections, 1.8 TB/s in total",
    },
}

#: Keys a per-model override may set (``thresholds`` option / ``preflight_bandwidth_thresholds``).
OVERRIDE_KEYS = ("min_gbps", "fraction", "total_gbps", "source")

#: A device line (text) or ``GPU Device list`` entry (JSON) longer than this is not one: real ones are under 120
#: characters, and the name patterns below are then matched on bounded text only.
MAX_DEVICE_LINE = 512
_VERSION_RE = re.compile(r"^nvbandwidth Version:\s*(\S+)")
_DEVICE_RE = re.compile(r"^Device ([0-9]{1,4}): (.+?)(?: \(([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\))?\s*$")
_JSON_DEVICE_RE = re.compile(
    r"^([0-9]{1,4}): (.+?)(?: \(([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\))?(?:: \(.*\))?$")
_RUNNING_RE = re.compile(r"^Running (\S+)\.$")
_NOT_FOUND_RE = re.compile(r"^ERROR: Testcase (.+) not found!$")
_HEADER_RE = re.compile(r"^\s*[0-9]+(\s+[0-9]+)*\s*$")
_ROW_RE = re.compile(r"^\s*([0-9]+)\s+(\S.*)$")
_ERROR_RE = re.compile(r"^\s*(\[CUDA_ERROR|\[cuda|NVML_ERROR|ASSERT in|ERROR: Invalid Arguments)")
_ARROW_RE = re.compile(r"GPU\(row\)\s*(<->|->|<-)\s*GPU\(column\)")


class NvbandwidthParseError(FleetError):
    """The output cannot be read as nvbandwidth output."""


class ThresholdError(FleetError):
    """A threshold override that cannot be used (a caller mistake)."""


# ---- thresholds -------------------------------------------------------------
def _number(value, path, low, high, low_open=True):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(str(value).strip())
        except ValueError:
            raise ThresholdError("%s is %r, not a number. Fix: give a number." % (path, value))
    value = float(value)
    if math.isnan(value) or value > high or value < low or (low_open and value == low):
        raise ThresholdError("%s is %s. Fix: give a number %s %s and at most %s." % (
            path, value, "above" if low_open else "of at least", low, high))
    return value


def validate_overrides(overrides, name="thresholds"):
    """``{product: {min_gbps|fraction|total_gbps|source}}`` checked strictly; returns a clean copy."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise ThresholdError("%s must map GPU product names to settings, not %s. Fix: e.g. {'NVIDIA H100 80GB "
                             "HBM3': {fraction: 0.8}}." % (name, type(overrides).__name__))
    clean = {}
    for product, settings in overrides.items():
        path = "%s[%r]" % (name, product)
        if not isinstance(product, str) or not product.strip():
            raise ThresholdError("%s: the key must be a GPU product name as nvidia-smi prints it." % path)
        if not isinstance(settings, dict):
            raise ThresholdError("%s must be a mapping with %s, not %r." % (path, ", ".join(OVERRIDE_KEYS), settings))
        unknown = sorted(str(key) for key in settings if key not in OVERRIDE_KEYS)
        if unknown:
            raise ThresholdError("%s.%s is not a known setting. Fix: use only %s." % (
                path, unknown[0], ", ".join(OVERRIDE_KEYS)))
        entry = {}
        if settings.get("min_gbps") is not None:
            entry["min_gbps"] = _number(settings["min_gbps"], path + ".min_gbps", 0.0, MAX_GBPS)
        if settings.get("fraction") is not None:
            entry["fraction"] = _number(settings["fraction"], path + ".fraction", 0.0, 1.0)
        if settings.get("total_gbps") is not None:
            entry["total_gbps"] = _number(settings["total_gbps"], path + ".total_gbps", 0.0, MAX_GBPS)
        if settings.get("source") is not None:
            entry["source"] = str(settings["source"])[:300]
        if "min_gbps" in entry and "fraction" in entry:
            raise ThresholdError("%s sets both min_gbps and fraction. Fix: keep one (min_gbps is absolute, fraction "
                                 "is of the theoretical bandwidth per direction)." % path)
        if not any(key in entry for key in ("min_gbps", "fraction", "total_gbps")):
            raise ThresholdError("%s sets none of min_gbps, fraction, total_gbps. Fix: set one." % path)
        if "fraction" in entry and "total_gbps" not in entry and product not in NVLINK_CATALOG:
            raise ThresholdError("%s sets a fraction but %s is not in the catalog. Fix: add total_gbps (the "
                                 "theoretical NVLink bandwidth per GPU, both directions) or set min_gbps." % (path, product))
        clean[product] = entry
    return clean


def threshold_for(product, overrides=None):
    """The threshold for ``product``: a dict, or ``None`` when there is none (reason in ``why``).

    Returns ``(threshold, why)``.
    """
    overrides = overrides or {}
    if not product:
        return None, "the GPU model is unknown (pass product, or run nvbandwidth in text form, which lists the GPUs)"
    catalog = NVLINK_CATALOG.get(product)
    override = overrides.get(product)
    if catalog is None and override is None:
        return None, ("no threshold for %s: the catalog covers %s. Fix: set thresholds['%s'] (min_gbps, or "
                      "total_gbps with an optional fraction)" % (product, ", ".join(sorted(NVLINK_CATALOG)), product))
    entry = dict(catalog or {})
    origin = "catalog"
    if override:
        origin = "override" if catalog is None else "catalog+override"
        entry.update(override)
    total = entry.get("total_gbps")
    per_direction = total / 2.0 if total else None
    if "min_gbps" in entry:
        min_gbps = entry["min_gbps"]
        fraction = (min_gbps / per_direction) if per_direction else None
    else:
        fraction = entry.get("fraction", DEFAULT_FRACTION)
        min_gbps = per_direction * fraction
    return {
        "product": product,
        "sku": entry.get("sku"),
        "nvlink": entry.get("nvlink"),
        "total_gbps": total,
        "peak_gbps_per_direction": per_direction,
        "fraction": round(fraction, 4) if fraction is not None else None,
        "min_gbps": round(min_gbps, 2),
        "source": entry.get("source") or ("thresholds override" if origin == "override" else None),
        "origin": origin,
        "policy": POLICY % ("%d%%" % round(fraction * 100) if fraction is not None else "%s GB/s" % min_gbps),
    }, None


# ---- parsing ----------------------------------------------------------------
def _cell(text, where):
    if text == "N/A":
        return None
    try:
        value = float(text)
    except ValueError:
        raise NvbandwidthParseError("%s is %r, not a bandwidth" % (where, text[:40]))
    if math.isnan(value) or math.isinf(value) or value < 0 or value > MAX_GBPS:
        raise NvbandwidthParseError("%s is %r, outside 0-%d GB/s" % (where, text[:40], MAX_GBPS))
    return value


def _index(text, where):
    """A GPU index in a matrix header or row (ASCII digits, at most 4)."""
    try:
        return parse_int(text, where, max_digits=4)
    except IntegerParseError as exc:
        raise NvbandwidthParseError(str(exc))


def _check_size(text):
    if not isinstance(text, str):
        raise NvbandwidthParseError("the output is not text")
    if len(text) > MAX_INPUT_CHARS:
        raise NvbandwidthParseError("the output is larger than %d MiB" % (MAX_INPUT_CHARS // (1024 * 1024)))
    if "\x00" in text:
        raise NvbandwidthParseError("the output holds NUL bytes (binary data)")


def _new_result():
    return {"format": None, "version": None, "devices": [], "testcases": [], "errors": []}


def _add_testcase(result, entry):
    if len(result["testcases"]) >= MAX_TESTCASES:
        raise NvbandwidthParseError("more than %d testcases" % MAX_TESTCASES)
    result["testcases"].append(entry)
    return entry


def parse_text(text):
    """Plain-text output -> ``{format, version, devices, testcases, errors}``.

    Each testcase: ``{name, status (ran|waived|error|not_found|cut), message,
    matrices: [{description, columns, rows}]}``; ``name`` is ``None`` for a
    ``Waived:`` line (the text form does not name it).  Raises
    :class:`NvbandwidthParseError` on a cut or unreadable matrix.
    """
    _check_size(text)
    result = _new_result()
    result["format"] = "text"
    current = None
    matrix = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        stripped = line.strip()
        if matrix is not None:
            if matrix["columns"] is None:
                if _HEADER_RE.match(line):
                    matrix["columns"] = [_index(part, "%s: the column header (line %d)" % (current["name"], number))
                                         for part in line.split()[:MAX_GPUS + 1]]
                    if len(matrix["columns"]) > MAX_GPUS:
                        raise NvbandwidthParseError("%s: the matrix has more than %d columns" % (current["name"], MAX_GPUS))
                    if matrix["columns"] != list(range(len(matrix["columns"]))):
                        raise NvbandwidthParseError("%s: the column header (line %d) is not 0..%d" % (
                            current["name"], number, len(matrix["columns"]) - 1))
                    continue
                raise NvbandwidthParseError("%s: line %d should be the column header, got %r" % (
                    current["name"], number, stripped[:60]))
            row = _ROW_RE.match(line)
            if row and not stripped.startswith(("SUM ", "COEFFICIENT_OF_VARIATION ")):
                index = _index(row.group(1), "%s: the row index (line %d)" % (current["name"], number))
                cells = row.group(2).split()
                where = "%s row %d" % (current["name"], index)
                if index != len(matrix["rows"]):
                    raise NvbandwidthParseError("%s: row %d comes where row %d should (line %d)" % (
                        current["name"], index, len(matrix["rows"]), number))
                if len(cells) != len(matrix["columns"]):
                    raise NvbandwidthParseError("%s has %d cells, the header has %d columns (output cut?)" % (
                        where, len(cells), len(matrix["columns"])))
                if len(matrix["rows"]) >= MAX_GPUS:
                    raise NvbandwidthParseError("%s: the matrix has more than %d rows" % (current["name"], MAX_GPUS))
                matrix["rows"].append([_cell(cell, "%s column %d" % (where, col)) for col, cell in enumerate(cells)])
                continue
            matrix = None  # a blank line, SUM or anything else ends the matrix
            if stripped.startswith(("SUM ", "COEFFICIENT_OF_VARIATION ")):
                _summary_line(current, stripped)
                continue
        if not stripped:
            continue
        version = _VERSION_RE.match(stripped)
        if version:
            result["version"] = version.group(1)
            continue
        device = _DEVICE_RE.match(stripped) if len(stripped) <= MAX_DEVICE_LINE else None
        if device and current is None:
            if len(result["devices"]) >= MAX_GPUS:
                raise NvbandwidthParseError("more than %d devices listed" % MAX_GPUS)
            result["devices"].append({"index": int(device.group(1)), "name": device.group(2).strip(),
                                      "bus_id": device.group(3)})
            continue
        running = _RUNNING_RE.match(stripped)
        if running:
            current = _add_testcase(result, {"name": running.group(1), "status": "cut", "message": "",
                                             "matrices": []})
            continue
        if stripped.startswith("Waived:"):
            current = None
            _add_testcase(result, {"name": None, "status": "waived", "message": stripped[7:].strip(), "matrices": []})
            continue
        not_found = _NOT_FOUND_RE.match(stripped)
        if not_found:
            current = None
            _add_testcase(result, {"name": not_found.group(1), "status": "not_found", "message": stripped,
                                   "matrices": []})
            continue
        if (stripped.startswith("Error:") or stripped.startswith("ERROR:")) and current is not None:
            current["status"] = "error"
            current["message"] = stripped[:300]
            continue
        if _ERROR_RE.match(stripped) or stripped.startswith("ERROR"):
            if len(result["errors"]) < 20:
                result["errors"].append(stripped[:300])
            if current is not None and current["status"] == "cut":
                current["status"] = "error"
                current["message"] = stripped[:300]
            continue
        if current is not None and (stripped.endswith("(GB/s)") or stripped.endswith("(ns)")):
            matrix = {"description": stripped, "columns": None, "rows": []}
            current["matrices"].append(matrix)
            if current["status"] == "cut":
                current["status"] = "ran"
            continue
        if stripped.startswith(("SUM ", "COEFFICIENT_OF_VARIATION ")) and current is not None:
            _summary_line(current, stripped)
            continue
        # Anything else (notes, the host name, verbose MIN/MAX lines) is ignored.
    if matrix is not None and matrix["columns"] is None:
        raise NvbandwidthParseError("%s: the output ends after the matrix description (output cut?)" % current["name"])
    return result


def _summary_line(current, stripped):
    """``SUM <name> <GB/s>`` / ``COEFFICIENT_OF_VARIATION <name> <ratio>`` of the running testcase (a bad value is None)."""
    parts = stripped.split()
    if len(parts) != 3 or parts[1] != current["name"]:
        return
    key = "sum_gbps" if parts[0] == "SUM" else "coefficient_of_variation"
    try:
        value = float(parts[2])
    except ValueError:
        value = None
    if value is not None and (math.isnan(value) or not 0 <= value <= MAX_GBPS * MAX_GPUS):
        value = None
    current[key] = value


_JSON_STATUS = {"passed": "ran", "waived": "waived", "error": "error", "not found": "not_found", "running": "cut"}


def parse_json(text):
    """``nvbandwidth -j`` output -> the same shape as :func:`parse_text`."""
    _check_size(text)
    if json_nesting_exceeds(text, 32):
        raise NvbandwidthParseError("the JSON is nested deeper than 32 levels")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise NvbandwidthParseError("the output is not JSON (%s)" % str(exc)[:120])
    body = data.get("nvbandwidth") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        raise NvbandwidthParseError("the JSON has no 'nvbandwidth' object")
    result = _new_result()
    result["format"] = "json"
    if body.get("version") is not None:
        result["version"] = str(body["version"])[:40]
    if body.get("error"):
        result["errors"].append(" ".join(str(body["error"]).split())[:300])
    devices = body.get("GPU Device list") or []
    if not isinstance(devices, list):
        raise NvbandwidthParseError("'GPU Device list' is not a list")
    for item in devices[:MAX_GPUS + 1]:
        item = str(item).strip()
        match = _JSON_DEVICE_RE.match(item) if len(item) <= MAX_DEVICE_LINE else None
        if not match:
            raise NvbandwidthParseError("'GPU Device list' entry %r is not '<index>: <name> (<bus id>)'" % str(item)[:60])
        result["devices"].append({"index": int(match.group(1)), "name": match.group(2).strip(),
                                  "bus_id": match.group(3)})
    if len(result["devices"]) > MAX_GPUS:
        raise NvbandwidthParseError("more than %d devices listed" % MAX_GPUS)
    testcases = body.get("testcases") or []
    if not isinstance(testcases, list):
        raise NvbandwidthParseError("'testcases' is not a list")
    for index, case in enumerate(testcases):
        if not isinstance(case, dict):
            raise NvbandwidthParseError("testcases[%d] is not an object" % index)
        name = case.get("name")
        status = _JSON_STATUS.get(str(case.get("status", "")).strip().lower(), "error")
        entry = _add_testcase(result, {"name": str(name)[:120] if name is not None else None, "status": status,
                                       "message": " ".join(str(case.get("error") or "").split())[:300],
                                       "matrices": []})
        rows = case.get("bandwidth_matrix")
        if rows is None:
            if status == "ran":
                entry["status"] = "cut"
            continue
        if not isinstance(rows, list) or len(rows) > MAX_GPUS:
            raise NvbandwidthParseError("testcases[%d].bandwidth_matrix is not a list of at most %d rows" % (
                index, MAX_GPUS))
        parsed_rows = []
        width = None
        for row_index, row in enumerate(rows):
            where = "%s row %d" % (entry["name"], row_index)
            if not isinstance(row, list) or len(row) > MAX_GPUS:
                raise NvbandwidthParseError("%s is not a list of at most %d cells" % (where, MAX_GPUS))
            if width is None:
                width = len(row)
            elif len(row) != width:
                raise NvbandwidthParseError("%s has %d cells, row 0 has %d (output cut?)" % (where, len(row), width))
            parsed_rows.append([_cell(str(cell).strip(), "%s column %d" % (where, col)) for col, cell in enumerate(row)])
        entry["matrices"].append({"description": str(case.get("bandwidth_description") or "")[:200],
                                  "columns": list(range(width or 0)), "rows": parsed_rows})
    return result


def parse(text):
    """Text or JSON, told apart by the first character."""
    stripped = (text or "").lstrip()
    if not stripped:
        raise NvbandwidthParseError("the output is empty")
    if stripped.startswith("{"):
        return parse_json(stripped)
    return parse_text(text)


# ---- judging ----------------------------------------------------------------
def name_waived(parsed, requested):
    """Give ``Waived:`` entries (unnamed in the text form) the requested testcase they stand for.

    nvbandwidth runs the ``-t`` testcases in the order given and prints one
    entry per testcase, so the entries line up with ``requested``.
    """
    queue = list(requested)
    for entry in parsed["testcases"]:
        if entry["name"] is None:
            entry["name"] = queue.pop(0) if queue else None
        elif entry["name"] in queue:
            while queue and queue[0] != entry["name"]:
                queue.pop(0)
            if queue:
                queue.pop(0)
    return parsed


def product_of(parsed, product=None):
    """``(product, why_not)``: the option's value, else the one model the output lists."""
    if product:
        return product, None
    names = sorted(set(device["name"] for device in parsed["devices"]))
    if not names:
        return None, "the output lists no GPUs and no product was given"
    if len(names) > 1:
        return None, "the GPUs are of different models (%s)" % ", ".join(names)
    return names[0], None


def _direction(description):
    match = _ARROW_RE.search(description or "")
    return match.group(1) if match else None


def judge(parsed, requested, threshold, why_no_threshold=None, required=False, gpu_count=None):
    """Judge the requested testcases; returns the module's verdict fields.

    ``status``: ``fail`` when a testcase did not run cleanly, a pair was not
    measured or is below the threshold; ``skip`` when there is nothing to judge
    (one GPU) or no threshold for the model (``fail`` instead when
    ``required``); else ``pass``.  ``gpu_count``: the GPUs nvidia-smi lists,
    used when the output lists none (v0.10 prints no ``Device`` lines).
    """
    failures = []
    skips = []
    pairs = []
    summaries = []
    gpu_count = len(parsed["devices"]) or gpu_count or None
    by_name = {}
    for entry in parsed["testcases"]:
        if entry["name"] and entry["name"] not in by_name:
            by_name[entry["name"]] = entry
    for name in requested:
        entry = by_name.get(name)
        summary = {"name": name, "status": entry["status"] if entry else "missing", "description": None,
                   "min_gbps": None, "max_gbps": None, "pairs": 0, "failed_pairs": 0,
                   "coefficient_of_variation": entry.get("coefficient_of_variation") if entry else None}
        summaries.append(summary)
        if entry is None:
            failures.append("%s printed no result (output cut?)" % name)
            continue
        if entry["status"] == "waived":
            if gpu_count == 1:
                skips.append("%s was waived: the node has one GPU, no pair to measure" % name)
            else:
                failures.append("%s was waived: no GPU pair has peer access (P2P/NVLink unavailable)%s" % (
                    name, "" if gpu_count else " and the output lists no GPUs"))
            continue
        if entry["status"] == "not_found":
            failures.append("%s: this nvbandwidth has no such testcase (%s)" % (name, entry["message"]))
            continue
        if entry["status"] in ("error", "cut") or not entry["matrices"]:
            cause = entry["message"] or (parsed["errors"] or ["no matrix printed"])[0]
            failures.append("%s did not finish: %s" % (name, cause))
            continue
        matrix = entry["matrices"][0]
        summary["description"] = matrix["description"]
        size = len(matrix["columns"])
        rows = matrix["rows"]
        if size == 0:
            failures.append("%s: the matrix is empty (no GPU measured)" % name)
            continue
        if len(rows) != size:
            failures.append("%s: the matrix has %d rows for %d columns (output cut?)" % (name, len(rows), size))
            continue
        if gpu_count and size != gpu_count:
            failures.append("%s: the matrix covers %d GPUs, the output lists %d" % (name, size, gpu_count))
            continue
        if size < 2:
            skips.append("%s: one GPU, no pair to measure" % name)
            continue
        arrow = _direction(matrix["description"])
        if arrow not in ("->", "<-"):
            failures.append("%s: the description %r names no direction (GPU(row) -> or <- GPU(column))" % (
                name, matrix["description"][:80]))
            continue
        values = []
        for row in range(size):
            for col in range(size):
                if row == col:
                    continue
                source, target = (row, col) if arrow == "->" else (col, row)
                value = rows[row][col]
                pair = {"testcase": name, "from_gpu": source, "to_gpu": target, "gbps": value, "passed": None}
                if value is None:
                    pair["passed"] = False if threshold is not None else None
                else:
                    pair["passed"] = value >= threshold["min_gbps"] if threshold is not None else None
                    values.append(value)
                pairs.append(pair)
        failed = [pair for pair in pairs if pair["testcase"] == name and pair["passed"] is False]
        summary["pairs"] = size * (size - 1)
        summary["failed_pairs"] = len(failed)
        if values:
            summary["min_gbps"] = min(values)
            summary["max_gbps"] = max(values)
        for pair in failed[:MAX_PAIR_REASONS]:
            if pair["gbps"] is None:
                failures.append("%s GPU %d -> GPU %d: not measured (N/A: no peer access between them)" % (
                    name, pair["from_gpu"], pair["to_gpu"]))
            else:
                failures.append("%s GPU %d -> GPU %d: %.2f GB/s, below %.2f GB/s (%s)" % (
                    name, pair["from_gpu"], pair["to_gpu"], pair["gbps"], threshold["min_gbps"],
                    _threshold_words(threshold)))
        if len(failed) > MAX_PAIR_REASONS:
            failures.append("%s: %d more pairs below the threshold or not measured" % (
                name, len(failed) - MAX_PAIR_REASONS))
    measured = [pair for pair in pairs if pair["gbps"] is not None]
    unmeasured = [pair for pair in pairs if pair["gbps"] is None]
    worst = None
    if unmeasured and threshold is not None:
        worst = unmeasured[0]
    elif measured:
        worst = min(measured, key=lambda pair: pair["gbps"])
    if worst is not None:
        worst = {"testcase": worst["testcase"], "from_gpu": worst["from_gpu"], "to_gpu": worst["to_gpu"],
                 "gbps": worst["gbps"]}
    if threshold is None:
        # Without a threshold no pair is judged (every failure above says the run itself failed: cut, waived,
        # not found, an empty or unreadable matrix), so those still fail; a clean run is a skip.
        skips = [why_no_threshold or "no threshold for this GPU model"]
    status = "fail" if failures else ("skip" if skips else "pass")
    reasons = list(failures)
    if status == "skip" and required:
        status = "fail"
        reasons = ["%s (the bandwidth check is required)" % reason for reason in skips]
    elif status != "fail":
        reasons += skips
    return {"status": status, "passed": status == "pass", "reasons": reasons, "pairs": pairs, "worst": worst,
            "testcases": summaries, "gpu_count": gpu_count}


def _threshold_words(threshold):
    if threshold.get("peak_gbps_per_direction") and threshold.get("fraction") is not None:
        return "%d%% of %g GB/s per direction, %s" % (round(threshold["fraction"] * 100),
                                                      threshold["peak_gbps_per_direction"], threshold["product"])
    return "the %s threshold" % threshold["product"]
