# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Read what ``dcgmi diag`` prints: its JSON (``-j``) and, as a fallback, its table.

Shapes handled (sources: tests/fixtures/dcgm/ and NVIDIA/DCGM
``nvvs/include/NvvsJsonStrings.h``):

- top-level key ``DCGM GPU Diagnostic`` (DCGM 3.x, NVVS 1.x) or
  ``DCGM Diagnostic`` (DCGM 4.x);
- per result ``gpu_id`` (one id, ``dcgmi`` 3.x), ``gpu_ids`` (a CSV string or a
  list), ``entity_id`` with ``entity_group`` ``GPU`` (4.x), or no id at all;
- statuses ``Pass``/``PASS``, ``Fail``/``FAIL``, ``Skip``/``SKIP``,
  ``Warn``/``WARN``, ``Not Run``;
- ``warnings`` as ``null``, a string, a list of strings or a list of
  ``{warning, error_id}`` objects;
- a hard error: ``{"<name>": {"runtime_error": "...", "version": "..."}}``
  with no test categories;
- DCGM 4.x: the version in the top-level ``metadata.version`` (with
  ``Driver Version Detected``), and per test a ``test_summary`` whose
  ``status`` is the test's own verdict (NVIDIA/DCGM 4.6.0 dcgmi/Diag.cpp
  ``HelperJsonAddMetadata``/``HelperJsonAddTestSummary``); a summary that says
  ``Fail`` fails the run even when no entity result does.

The verdict is strict: only a run whose every result reads ``Pass`` or
``Skip`` (and that ran at least one test) passes.  ``Warn`` is reported and
does not fail the run; anything the parser cannot read is never a pass.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import IntegerParseError, parse_int
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.json_limits import json_nesting_exceeds
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import squash

#: Inputs above this are refused (a level-4 run on 8 GPUs prints ~200 KB).
MAX_INPUT_CHARS = 8 * 1024 * 1024
#: JSON nesting deeper than this is refused before ``json`` recurses.
MAX_JSON_DEPTH = 64
#: At most this many result rows are read (each result counted once per GPU it names).
MAX_RESULTS = 20000
#: At most this many GPU ids in one result (``gpu_ids``); no node has more GPUs.
MAX_GPU_IDS = 1024
#: GPU ids have at most this many digits.
MAX_ID_DIGITS = 6

PASS = "pass"
FAIL = "fail"
SKIP = "skip"
WARN = "warn"
NOT_RUN = "not_run"
_STATUS_WORDS = {
    "pass": PASS, "passed": PASS,
    "fail": FAIL, "failed": FAIL, "error": FAIL,
    "skip": SKIP, "skipped": SKIP,
    "warn": WARN, "warning": WARN,
    "not run": NOT_RUN, "notrun": NOT_RUN, "not_run": NOT_RUN,
}
#: Run levels dcgmi accepts (``-r 1..4``); level 3 takes ~15 min, level 4 ~1.5 h.
LEVELS = (1, 2, 3, 4)
#: Default timeout per level in seconds: the run's own length plus a margin.
LEVEL_TIMEOUTS = {1: 300, 2: 900, 3: 2700, 4: 9000}

_TOP_LEVEL_NAMES = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
_VERSION_ROW_RE = re.compile(r"^\|\s*DCGM Version\s*\|\s*([^|]+?)\s*\|", re.M)
_GPU_IN_TEXT_RE = re.compile(r"\bGPUs?:?\s*((?:[0-9]+\s*,\s*)*[0-9]+)")


class DcgmParseError(FleetError):
    """The output cannot be read as a DCGM diagnostic."""


def _status(word):
    if word is None:
        return None
    return _STATUS_WORDS.get(str(word).strip().lower())


def _check_depth(text):
    """Refuse nesting deeper than MAX_JSON_DEPTH without recursing."""
    if json_nesting_exceeds(text, MAX_JSON_DEPTH):
        raise DcgmParseError("the JSON is nested deeper than %d levels" % MAX_JSON_DEPTH)


def _messages(value):
    """``warnings``/``info`` in any of their shapes -> list of (text, error_id)."""
    if value is None:
        return []
    if isinstance(value, (str, int, float)):
        return [(str(value), None)]
    out = []
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                text = item.get("warning", item.get("message", item.get("error", "")))
                out.append((str(text), item.get("error_id")))
            elif item is not None:
                out.append((str(item), None))
    return out


def _gpu_id(text, what):
    try:
        return parse_int(text, what, max_digits=MAX_ID_DIGITS)
    except IntegerParseError as exc:
        raise DcgmParseError(str(exc))


def _gpu_ids(result, where):
    """The GPU ids a result names (deduplicated, in order); a malformed id is a DcgmParseError."""
    for key in ("gpu_id", "gpu_ids"):
        if key in result and result[key] is not None:
            value = result[key]
            if isinstance(value, list):
                parts = value
            elif isinstance(value, (dict, bool)):
                raise DcgmParseError("%s: %s is %s, not a GPU id" % (where, key, type(value).__name__))
            else:
                parts = str(value).split(",", MAX_GPU_IDS)
            if len(parts) > MAX_GPU_IDS:
                raise DcgmParseError("%s: %s names more than %d GPUs" % (where, key, MAX_GPU_IDS))
            ids = []
            for part in parts:
                if isinstance(part, (dict, list, bool)):
                    raise DcgmParseError("%s: %s holds %s, not a GPU id" % (where, key, type(part).__name__))
                part = str(part).strip()
                if part:
                    number = _gpu_id(part, "%s: %s" % (where, key))
                    if number not in ids:
                        ids.append(number)
            return ids
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU")).upper()
        if group == "GPU" and result["entity_id"] is not None and not isinstance(result["entity_id"], (dict, list)):
            return [_gpu_id(str(result["entity_id"]), "%s: entity_id" % where)]
    return []


def parse_json(text):
    """Parse ``dcgmi diag -j`` output.  Returns the dict :func:`summarise` takes."""
    if text is None or not text.strip():
        raise DcgmParseError("dcgmi printed nothing")
    if len(text) > MAX_INPUT_CHARS:
        raise DcgmParseError("the output is larger than %d MiB" % (MAX_INPUT_CHARS // (1024 * 1024)))
    start = text.find("{")
    if start < 0:
        raise DcgmParseError("no JSON object in the output")
    _check_depth(text[start:])
    try:
        document, _end = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise DcgmParseError("the JSON cannot be read: %s" % exc)
    if not isinstance(document, dict):
        raise DcgmParseError("the JSON is not an object")
    body = None
    for name in _TOP_LEVEL_NAMES:
        if isinstance(document.get(name), dict):
            body = document[name]
            break
    if body is None and len(document) == 1 and isinstance(list(document.values())[0], dict):
        body = list(document.values())[0]
    if body is None:
        raise DcgmParseError("no 'DCGM Diagnostic' object in the JSON (keys: %s)" % ", ".join(
            sorted(str(key) for key in document)[:5]))
    version = body.get("version")
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    if version is None:
        version = metadata.get("version")  # DCGM 4.x: top-level metadata.version
    driver_version = _text_or_none(metadata.get("Driver Version Detected"))
    runtime_error = body.get("runtime_error")
    if runtime_error is not None:
        return {"tests": [], "dcgm_version": _text_or_none(version), "runtime_error": str(runtime_error)}
    categories = body.get("test_categories")
    if not isinstance(categories, list):
        raise DcgmParseError("test_categories is missing or not a list")
    tests = []
    count = 0
    for category in categories:
        if not isinstance(category, dict):
            raise DcgmParseError("a test category is not an object")
        category_name = str(category.get("category", ""))[:200]
        for test in _list_of(category.get("tests"), "category %r: tests" % category_name):
            if not isinstance(test, dict):
                raise DcgmParseError("a test in category %r is not an object" % category_name)
            name = str(test.get("name", ""))[:200]
            results = []
            for result in _list_of(test.get("results"), "test %r: results" % name):
                if not isinstance(result, dict):
                    raise DcgmParseError("a result of test %r is not an object" % name)
                status = _status(result.get("status"))
                if status is None:
                    raise DcgmParseError("test %r has the unknown status %r" % (name, str(result.get("status"))[:40]))
                messages = _messages(result.get("warnings"))
                message = "; ".join(text for text, _eid in messages)
                error_ids = [eid for _t, eid in messages if eid is not None]
                ids = _gpu_ids(result, "a result of test %r" % name) or [None]
                count += len(ids)
                if count > MAX_RESULTS:
                    raise DcgmParseError("more than %d results (counting each GPU a result names)" % MAX_RESULTS)
                for gpu in ids:
                    results.append({"gpu": gpu, "status": status, "message": message, "error_ids": error_ids})
            tests.append({"name": name, "category": category_name, "results": results,
                          "summary": _test_summary(test)})
    return {"tests": tests, "dcgm_version": _text_or_none(version), "driver_version": driver_version,
            "runtime_error": None}


def _test_summary(test):
    """DCGM 4.x ``test_summary`` (``{status, warnings, info}``, the test's overall result) -> ``{status, message}``.

    Required by DCGM's own schema (NVIDIA/DCGM 4.6.0 testing/python3/dcgm_diag_schema.json) and written by
    dcgmi/Diag.cpp ``HelperJsonAddTestSummary``; None when absent (DCGM 3.x).
    """
    summary = test.get("test_summary")
    if summary is None:
        return None
    if not isinstance(summary, dict):
        raise DcgmParseError("the test_summary of test %r is not an object" % test.get("name"))
    status = _status(summary.get("status"))
    if status is None:
        raise DcgmParseError("the test_summary of test %r has the unknown status %r"
                             % (test.get("name"), summary.get("status")))
    texts = [text for text, _eid in _messages(summary.get("warnings"))] or \
        [text for text, _eid in _messages(summary.get("info"))]
    return {"status": status, "message": "; ".join(texts)}


def _list_of(value, what):
    """``value`` when it is a list, ``[]`` when absent; anything else is a DcgmParseError."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DcgmParseError("%s is %s, not a list" % (what, type(value).__name__))
    return value


def _text_or_none(value):
    return None if value is None else str(value)


def parse_table(text):
    """Parse the text table ``dcgmi diag`` prints without ``-j`` (fallback)."""
    if text is None or not text.strip():
        raise DcgmParseError("dcgmi printed nothing")
    if len(text) > MAX_INPUT_CHARS:
        raise DcgmParseError("the output is larger than %d MiB" % (MAX_INPUT_CHARS // (1024 * 1024)))
    category = ""
    tests = []
    current = None
    version = None
    saw_table = False
    count = 0
    for raw in text.splitlines()[:200000]:
        line = raw.rstrip()
        if line.startswith("|-----") or line.startswith("+-----"):
            name = line.strip("|+- ").split("-")[0].strip()
            if name:
                category = name
                saw_table = True
            current = None
            continue
        if not line.startswith("|") or line.startswith("|=") or line.count("|") < 3:
            continue
        raw_cells = line.strip().strip("|").split("|")
        cells = [cell.strip() for cell in raw_cells]
        if len(cells) < 2:
            continue
        left, right = cells[0], cells[1]
        # A wrapped cell continues the text above exactly: drop only the one
        # column of padding, so "row" + " remappings" keeps its space and
        # "second" + "s started" joins mid-word as DCGM cut it.
        continued = raw_cells[1][1:].rstrip() if raw_cells[1].startswith(" ") else raw_cells[1].rstrip()
        if left == "Diagnostic" and right == "Result":
            saw_table = True
            continue
        if category == "Metadata":
            if left == "DCGM Version":
                version = right
            continue
        if left:
            if left in ("Warning", "Info") and current is not None:
                current["_text"].append(right)
                current["_text_kind"] = left
                continue
            current = {"name": left, "category": category, "results": [], "_text": [], "_text_kind": None}
            tests.append(current)
            count += _add_table_result(current, right)
        elif current is not None:
            if current["_text_kind"]:
                current["_text"].append(continued)
            else:
                count += _add_table_result(current, right)
        if count > MAX_RESULTS:
            raise DcgmParseError("more than %d results (counting each GPU a result names)" % MAX_RESULTS)
    if not saw_table:
        raise DcgmParseError("no dcgmi diag table in the output")
    for test in tests:
        # Wrapped cells continue mid-word: join without adding spaces.
        message = "".join(test.pop("_text")).strip()
        kind = test.pop("_text_kind")
        if kind == "Warning" and message:
            for result in test["results"]:
                if result["status"] == FAIL or not result["message"]:
                    result["message"] = message
        if test["name"] == "Error":
            test["results"] = [{"gpu": _first_gpu(message or ""), "status": FAIL,
                                "message": message, "error_ids": []}] if not test["results"] else test["results"]
    return {"tests": tests, "dcgm_version": version, "runtime_error": None}


def _first_gpu(text):
    match = re.search(r"\bGPU\s*([0-9]{1,%d})\b" % MAX_ID_DIGITS, text)
    return int(match.group(1)) if match else None


def _add_table_result(test, cell):
    """``Pass``, ``Fail - GPU: 0``, ``Pass - GPUs: 1, 2``, ``GPU0: Pass`` or an error text; returns the rows added."""
    if not cell:
        return 0
    match = re.match(r"^GPU\s*([0-9]+)\s*:\s*(\S.*)$", cell)
    if match:
        status = _status(match.group(2).split(" - ")[0])
        test["results"].append({"gpu": _gpu_id(match.group(1), "the table cell %r" % cell[:40]), "status": status or FAIL,
                                "message": "" if status else match.group(2), "error_ids": []})
        return 1
    word = cell.split(" - ")[0].strip()
    status = _status(word)
    if status is None:
        # Free text in the result column (an Error row, or a wrapped message).
        if test["name"] == "Error":
            test["_text"].append(cell)
            test["_text_kind"] = "Error"
            return 0
        test["results"].append({"gpu": None, "status": FAIL, "message": cell, "error_ids": []})
        return 1
    gpus = _GPU_IN_TEXT_RE.search(cell)
    ids = [_gpu_id(part, "the table cell %r" % cell[:40]) for part in re.split(r"\s*,\s*", gpus.group(1))][:MAX_GPU_IDS] \
        if gpus else [None]
    for gpu in ids:
        test["results"].append({"gpu": gpu, "status": status, "message": "", "error_ids": []})
    return len(ids)


def summarise(parsed):
    """``passed``, ``failures`` and ``warnings`` of a parsed run."""
    failures = []
    warnings = []
    results = 0
    if parsed.get("runtime_error"):
        failures.append({"test": "dcgmi", "gpu": None, "message": parsed["runtime_error"]})
    for test in parsed["tests"]:
        statuses = set()
        for result in test["results"]:
            results += 1
            statuses.add(result["status"])
            if result["status"] == FAIL:
                failures.append({"test": test["name"], "gpu": result["gpu"], "message": result["message"] or "failed"})
            elif result["status"] == WARN:
                warnings.append({"test": test["name"], "gpu": result["gpu"], "message": result["message"]})
        summary = test.get("summary")
        if summary:
            results += 1
            # the test's own verdict: a failure DCGM reports only at summary level (no entity) still fails
            if summary["status"] == FAIL and FAIL not in statuses:
                failures.append({"test": test["name"], "gpu": None,
                                 "message": summary["message"] or "the test summary says Fail"})
            elif summary["status"] == WARN and WARN not in statuses and FAIL not in statuses:
                warnings.append({"test": test["name"], "gpu": None, "message": summary["message"]})
    passed = not failures and results > 0
    if results == 0 and not failures:
        failures.append({"test": "dcgmi", "gpu": None, "message": "the diagnostic reported no results"})
    return {"passed": passed, "failures": failures, "warnings": warnings}


def failure_line(failures, limit=3):
    """One line for ``fail_json`` and node annotations."""
    parts = []
    for failure in failures[:limit]:
        where = "GPU %s" % failure["gpu"] if failure["gpu"] is not None else "node"
        parts.append("%s on %s: %s" % (failure["test"], where, squash(failure["message"], 160)))
    if len(failures) > limit:
        parts.append("and %d more" % (len(failures) - limit))
    return "; ".join(parts)
