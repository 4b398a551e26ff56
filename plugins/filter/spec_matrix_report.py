# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``spec_matrix_report``: spec_matrix results as a compact table.

Documentation lives in ``spec_matrix_report.yml`` next to this file.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import fixed_width_table

_STATUS_ORDER = {"fail": 0, "unknown": 1, "pass": 2}
_COLUMNS = ("host", "item", "expected", "actual", "status", "note")


def _is_item(value):
    return isinstance(value, dict) and "check" in value and "status" in value


def _is_module_result(value):
    return isinstance(value, dict) and isinstance(value.get("results"), list) and "summary" in value


def _hosts(data):
    """Normalise the accepted inputs into ``[(host or None, module_result)]``."""
    if _is_module_result(data):
        return [(None, data)]
    if isinstance(data, list):
        if all(_is_item(item) for item in data):
            return [(None, {"results": data})]
        hosts = []
        for entry in data:
            if isinstance(entry, dict) and _is_module_result(entry.get("value")) and "key" in entry:
                hosts.append((str(entry["key"]), entry["value"]))
            elif isinstance(entry, dict) and _is_module_result(entry):
                hosts.append((str(entry.get("inventory_hostname") or entry.get("item") or len(hosts)), entry))
            else:
                raise AnsibleFilterError(
                    "spec_matrix_report: list entries must be spec_matrix results or {key, value} pairs, got %r"
                    % (entry,))
        return hosts
    if isinstance(data, dict):
        hosts = []
        for host, value in data.items():
            if not _is_module_result(value):
                raise AnsibleFilterError(
                    "spec_matrix_report: value for host %s is not a spec_matrix result (it has no results/summary); "
                    "register the module's result and pass {host: result}" % host)
            hosts.append((str(host), value))
        return hosts
    raise AnsibleFilterError("spec_matrix_report: expected a spec_matrix result, a list of its results, "
                             "or a mapping of host to result; got %s" % type(data).__name__)


def _check_shapes(hosts):
    """Refuse malformed results with the path of the offending value (not a raw AttributeError)."""
    for host, result in hosts:
        where = "%s." % host if host is not None else ""
        summary = result.get("summary")
        if summary is not None and not isinstance(summary, dict):
            raise AnsibleFilterError("spec_matrix_report: %ssummary must be a mapping of status to count, got %s"
                                     % (where, type(summary).__name__))
        for index, item in enumerate(result.get("results") or []):
            if not isinstance(item, dict):
                raise AnsibleFilterError(
                    "spec_matrix_report: %sresults[%d] must be a mapping with check, name, expected, actual, "
                    "status, note, got %s" % (where, index, type(item).__name__))


def _text(value):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _rows(hosts, only_problems):
    rows = []
    for host, result in hosts:
        items = result.get("results") or []
        if result.get("failed") and not items:
            rows.append({"host": host, "item": "(module)", "expected": "-", "actual": "-", "status": "fail",
                         "note": _text(result.get("msg"))})
            continue
        for item in items:
            if only_problems and item.get("status") == "pass":
                continue
            rows.append({
                "host": host,
                "item": "%s.%s" % (item.get("check"), item.get("name")),
                "expected": _text(item.get("expected")),
                "actual": _text(item.get("actual")),
                "status": _text(item.get("status")),
                "note": _text(item.get("note")) if item.get("note") else "",
            })
    return rows


def _summary_line(hosts):
    parts = []
    for host, result in hosts:
        summary = result.get("summary") or {}
        counts = "%s pass, %s fail, %s unknown" % (summary.get("pass", 0), summary.get("fail", 0),
                                                   summary.get("unknown", 0))
        profile = result.get("profile")
        label = host or "node"
        parts.append("%s%s: %s" % (label, " (%s)" % profile if profile else "", counts))
    return "; ".join(parts)


def _markdown_cell(text):
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def spec_matrix_report(data, format="markdown", only_problems=False, summary=True):
    """Render spec_matrix results of one or many hosts as a Markdown or plain-text table."""
    if format not in ("markdown", "text"):
        raise AnsibleFilterError("spec_matrix_report: format must be markdown or text, got %r" % (format,))
    hosts = _hosts(data)
    _check_shapes(hosts)
    many = len(hosts) > 1 or any(entry[0] is not None for entry in hosts)
    columns = [c for c in _COLUMNS if (c != "host" or many)]
    rows = _rows(hosts, only_problems)
    if not any(row["note"] for row in rows):
        columns.remove("note")
    rows.sort(key=lambda row: (row["host"] or "", _STATUS_ORDER.get(row["status"], 3)))
    lines = []
    if summary:
        lines.append(_summary_line(hosts))
        lines.append("")
    if not rows:
        lines.append("All items pass." if only_problems else "No results.")
        return "\n".join(lines)
    if format == "markdown":
        lines.append("| " + " | ".join(columns) + " |")
        lines.append("|" + "|".join(["---"] * len(columns)) + "|")
        for row in rows:
            lines.append("| " + " | ".join(_markdown_cell(row[c] or "") for c in columns) + " |")
    else:
        lines.append(fixed_width_table([[c.upper() for c in columns]]
                                       + [[row[c] or "" for c in columns] for row in rows]))
    return "\n".join(lines)


class FilterModule(object):
    """gpu_native.fleet spec matrix filters."""

    def filters(self):
        return {"spec_matrix_report": spec_matrix_report}
