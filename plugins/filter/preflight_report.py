# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``preflight_report_html``: the preflight / onboarding report as one self-contained HTML page.

The node x gate matrix (each cell the gate's status and duration), the reasons of every failed or skipped gate,
the verdict and what the preflight labelled on the node. The same safety rules as the compliance page
(compliance_report.py): every value escaped, control characters written as \\xNN text, no script and a
Content-Security-Policy that lets nothing load or run (only the page's own <style>, by hash). Input is bounded: at
most MAX_ROWS nodes, MAX_REASONS reasons per node, MAX_TEXT characters per value.
Documentation lives in preflight_report_html.yml next to this file.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import math
import re
from html import escape

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight

# The gates in the order the preflight runs them, and a gate's statuses (plugin_utils/preflight.py).
GATES = preflight.GATES
STATUSES = preflight.STATUSES
MAX_ROWS = 5000
MAX_REASONS = 50
MAX_TEXT = 500
DEFAULT_LABEL_KEY = preflight.DEFAULT_LABEL_KEY
# What preflight_outcome means for the node (roles/preflight/tasks/verdict.yml, cordon.yml).
OUTCOMES = {
    "joined": ("passed", "passed: labelled %s=passed, registration taint removed, uncordoned"),
    "left_cordoned": ("passed", "passed: labelled %s=passed, left cordoned (someone else's cordon)"),
    "cordoned": ("failed", "failed: labelled %s=failed, kept cordoned with the reasons annotation"),
    "already_joined": ("passed", "already joined: nothing labelled (%s unchanged)"),
}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_COLORS = {"pass": "#2e7d32", "fail": "#c62828", "skip": "#757575", "none": "#ef6c00"}


def _text(value, limit=MAX_TEXT):
    """``value`` as bounded text, control characters written as their escape."""
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    else:
        text = repr(value)
    text = text[:limit * 2]
    text = _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group(0)) if ord(m.group(0)) < 0x100
                        else "\\u%04x" % ord(m.group(0)), text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _h(value, limit=MAX_TEXT):
    return escape(_text(value, limit), quote=True)


def _seconds(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    if math.isnan(value) or math.isinf(value) or value < 0:
        return None
    return value


def _row(index, row, label_key):
    """One node's normalised cells: {node, cells: {gate: (status, seconds)}, verdict, outcome, reasons}."""
    if not isinstance(row, dict):
        return {"node": "(row %d)" % index, "cells": {}, "verdict": "error", "outcome": "",
                "reasons": ["not a node's result: %s" % _text(row, 200)], "total_s": None}
    gates = row.get("gates") if isinstance(row.get("gates"), dict) else {}
    results = row.get("results") if isinstance(row.get("results"), list) else []
    cells = {}
    for gate in GATES:
        status = gates.get(gate)
        cells[gate] = (status if status in STATUSES else ("none" if status is None else "error"), None)
    reasons = []
    for result in results[:len(GATES) * 4]:
        if not isinstance(result, dict) or result.get("gate") not in GATES:
            continue
        gate = result["gate"]
        status = result.get("status")
        cells[gate] = (status if status in STATUSES else "error", _seconds(result.get("duration_s")))
        texts = result.get("reasons")
        texts = texts if isinstance(texts, list) else [] if texts is None else [texts]
        if status in ("fail", "skip"):
            reasons.extend("%s: %s" % (gate, _text(text, 300)) for text in texts[:MAX_REASONS])
    if not results:
        given = row.get("reasons")
        given = given if isinstance(given, list) else [] if given is None else [given]
        reasons = [_text(text, 300) for text in given[:MAX_REASONS]]
    passed = row.get("passed")
    if not isinstance(passed, bool):
        passed = None if not gates else all(s in ("pass", "skip") for s, _d in cells.values())
    outcome = row.get("verdict")
    outcome = outcome if isinstance(outcome, str) else ""
    key = row.get("label_key") if isinstance(row.get("label_key"), str) and row.get("label_key") else label_key
    if outcome in OUTCOMES:
        verdict, labelled = OUTCOMES[outcome][0], OUTCOMES[outcome][1] % _text(key, 120)
    else:
        verdict = "passed" if passed else "failed" if passed is False else "no verdict"
        labelled = outcome or "nothing labelled"
    durations = [d for _s, d in cells.values() if d is not None]
    return {"node": _text(row.get("node", "?"), 253), "cells": cells, "verdict": verdict, "outcome": labelled,
            "reasons": reasons[:MAX_REASONS], "total_s": sum(durations) if durations else None}


def _duration(seconds):
    if seconds is None:
        return ""
    if seconds < 60:
        return "%.1f s" % seconds
    return "%dm%02ds" % (int(seconds) // 60, int(seconds) % 60)


def content_security_policy(style):
    """Nothing may load or run; only the page's own <style> block (by hash) applies (as the compliance page)."""
    digest = base64.b64encode(hashlib.sha256(style.encode("utf-8")).digest()).decode("ascii")
    return ("default-src 'none'; style-src 'sha256-%s'; img-src 'none'; script-src 'none'; object-src 'none'; "
            "base-uri 'none'; form-action 'none'" % digest)


def preflight_report_html(rows, title="GPU preflight", label_key=DEFAULT_LABEL_KEY, generated=""):
    """The rows of playbooks/preflight_summary.yml ({node, gates, results, verdict, reasons}) as an HTML page."""
    if not isinstance(rows, list):
        raise AnsibleFilterError("preflight_report_html expects the list of node rows, got %s. Fix: pass the rows "
                                 "playbooks/preflight_summary.yml collects." % type(rows).__name__)
    label_key = label_key if isinstance(label_key, str) and label_key else DEFAULT_LABEL_KEY
    nodes = [_row(index, row, label_key) for index, row in enumerate(rows[:MAX_ROWS])]
    counts = dict((verdict, sum(1 for n in nodes if n["verdict"] == verdict))
                  for verdict in ("passed", "failed", "no verdict", "error"))
    style = ("body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin-bottom:1.5em}"
             "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;font-size:13px}th{background:#eee}"
             "td.g{text-align:center;font-weight:bold}td.g small{display:block;font-weight:normal;color:#555}"
             "td.v-passed{color:#2e7d32;font-weight:bold}td.v-failed,td.v-error{color:#c62828;font-weight:bold}"
             "ul{margin:0;padding-left:1.2em}p.sum span{margin-right:1.5em}"
             + "".join("td.s-%s{color:%s}" % (s, c) for s, c in sorted(_COLORS.items())) + "td.s-error{color:#c62828}")
    head = "".join("<th>%s</th>" % escape(gate) for gate in GATES)
    matrix = []
    for node in nodes:
        cells = []
        for gate in GATES:
            status, seconds = node["cells"].get(gate, ("none", None))
            shown = {"none": "-", "pass": "pass", "fail": "FAIL", "skip": "skip"}.get(status, "error")
            cells.append('<td class="g s-%s">%s<small>%s</small></td>' % (status, shown, escape(_duration(seconds))))
        matrix.append('<tr><td>%s</td>%s<td class="v-%s">%s</td><td>%s</td><td>%s</td></tr>' % (
            _h(node["node"]), "".join(cells), node["verdict"].replace(" ", "-"), escape(node["verdict"]),
            escape(_duration(node["total_s"])), _h(node["outcome"])))
    reasons = []
    for node in nodes:
        if node["reasons"]:
            reasons.append("<tr><td>%s</td><td><ul>%s</ul></td></tr>" % (
                _h(node["node"]), "".join("<li>%s</li>" % _h(reason) for reason in node["reasons"])))
    truncated = ("<p>%d more node(s) not shown (the page shows at most %d).</p>" % (len(rows) - MAX_ROWS, MAX_ROWS)
                 if len(rows) > MAX_ROWS else "")
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        '<meta http-equiv="Content-Security-Policy" content="%s">' % escape(content_security_policy(style), quote=False),
        "<title>", _h(title, 200), "</title><style>", style, "</style></head><body><h1>", _h(title, 200), "</h1>",
        "<p>%s</p>" % _h(generated, 200) if generated else "",
        '<p class="sum"><span>%d node(s)</span><span>%d passed</span><span>%d failed</span>'
        "<span>%d without a verdict</span></p>" % (
            len(nodes), counts["passed"], counts["failed"] + counts["error"], counts["no verdict"]),
        "<h2>Node x gate</h2><table><thead><tr><th>node</th>", head,
        "<th>verdict</th><th>time</th><th>labelled</th></tr></thead><tbody>", "".join(matrix), "</tbody></table>",
        truncated,
        "<h2>Reasons</h2>",
        ("<table><thead><tr><th>node</th><th>failed or skipped gates</th></tr></thead><tbody>%s</tbody></table>"
         % "".join(reasons)) if reasons else "<p>No gate failed or was skipped.</p>",
        "</body></html>\n"])


class FilterModule(object):
    def filters(self):
        return {"preflight_report_html": preflight_report_html}
