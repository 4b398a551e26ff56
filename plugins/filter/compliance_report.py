# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for playbooks/compliance.yml's reports.

``compliance_rows``: one row per host and check from the registered results;
``compliance_summary``: counts per status and per check, failing items per host;
``compliance_device_plugin_count``: a node's ``nvidia.com/gpu`` allocatable from its ``k8s_info`` read, for
``node_compliance``; ``compliance_junit``: JUnit XML; ``compliance_html``: a self-contained HTML page (no scripts, a
Content-Security-Policy that lets nothing load or run); ``compliance_report_name``: the report name, refused
unless it is a plain file name. Statuses other than pass, fail, error, unreachable and skip become ``error``
rows (never compliant).
Documentation lives in the ``.yml`` files next to this one.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import re
from xml.sax.saxutils import escape, quoteattr

from ansible.errors import AnsibleFilterError
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.compliance_checks import REPORT_CHECKS
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import clip

# The order the reports list a host's rows in (module_utils/spec/compliance_checks.py, the one list of check names).
CHECK_ORDER = REPORT_CHECKS
STATUS_ORDER = ("fail", "error", "unreachable", "pass", "skip")
BAD = ("fail", "error", "unreachable")
NODE_VAR = "__compliance_node_result"
MIG_VAR = "__compliance_mig_result"
K8S_VAR = "__compliance_k8s_node"
DRA_VAR = "__compliance_dra"  # the dra row (filter dra_compliance), set on DRA nodes only
# What XML 1.0 allows (section 2.2, Char): a host name or value with ESC, BEL or NUL made the JUnit file
# unreadable. Everything else is written as \xNN / \uNNNN text, so the reader still sees what was there.
_NOT_XML_CHAR = re.compile(r"[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# A report name is a plain file name: compliance_report_name="../x" wrote outside compliance_report_dir.
_REPORT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")


def _status(host, check, status, expected, actual):
    """A row whose status is one of STATUS_ORDER; any other value is an ``error`` row, never a pass."""
    if isinstance(status, str) and status in STATUS_ORDER:
        return _row(host, check, status, expected, actual)
    return _row(host, check, "error", expected,
                "unknown status %s from the node (allowed: %s); reported: %s"
                % (clip(repr(status), 80), ", ".join(STATUS_ORDER), clip(_text(actual), 400)))


def _xml_text(value):
    """``value`` as text with every character XML 1.0 does not allow replaced by its \\x / \\u escape."""
    def replace(match):
        code = ord(match.group(0))
        return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code
    return _NOT_XML_CHAR.sub(replace, _text(value))


def _row(host, check, status, expected=None, actual=None):
    return {"host": host, "check": check, "status": status, "expected": expected, "actual": actual}


def _mig_row(host, mig):
    if not isinstance(mig, dict) or mig.get("skipped") or not mig:
        return _row(host, "mig", "skip", actual="no MIG layout assigned")
    if "in_sync" not in mig:
        return _row(host, "mig", "error", "the assigned layout", mig.get("msg") or "mig_config gave no result")
    expected = "layout %s" % (mig.get("select") or mig.get("selected") or "assigned")
    if mig["in_sync"]:
        return _row(host, "mig", "pass", expected, "in sync")
    drift = mig.get("drift") or []
    text = "; ".join(_drift_text(item) for item in drift) if isinstance(drift, list) else str(drift)
    return _row(host, "mig", "fail", expected, "drift: " + (text or "not in sync"))


def _k8s_row(host, node_name, k8s):
    """The ``kubernetes`` row from the registered k8s_info read of the node object.

    An API that could not be reached or refused the read is an ``error`` (the device-plugin count was not
    compared), never a silent pass; a node the API does not know is a ``fail``."""
    if k8s.get("skipped"):
        return _row(host, "kubernetes", "skip", None,
                    "not read: neither compliance_kubeconfig nor gpu_native_kubeconfig is set, nor K8S_AUTH_HOST (an "
                    "AWX Kubernetes bearer-token credential; the device-plugin count is not compared)")
    name = clip(_text(node_name if node_name else host), 200)
    expected = "node %s readable, with nvidia.com/ allocatable" % name
    if k8s.get("failed") or not isinstance(k8s.get("resources"), list):
        return _row(host, "kubernetes", "error", expected, "the Kubernetes API could not be read: %s. Fix: check "
                    "compliance_kubeconfig (its server is reachable from the controller, its credentials may get "
                    "nodes: docs/awx.md)" % clip(_text(k8s.get("msg") or "k8s_info returned no resources"), 400))
    if not k8s["resources"]:
        return _row(host, "kubernetes", "fail", expected, "the API has no node %s. Fix: set compliance_node_name "
                    "to the node's name in Kubernetes, or join the node" % name)
    node = k8s["resources"][0] if isinstance(k8s["resources"][0], dict) else {}
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
    gpu = sorted("%s=%s" % (clip(_text(key), 80), clip(_text(value), 20)) for key, value in allocatable.items()
                 if isinstance(key, str) and key.startswith("nvidia.com/"))
    if not gpu:
        return _row(host, "kubernetes", "fail", expected, "node %s advertises no nvidia.com/ resource: the NVIDIA "
                    "device plugin is not running or not registered on it" % name)
    return _row(host, "kubernetes", "pass", expected, "allocatable " + ", ".join(gpu[:16]))


def compliance_device_plugin_count(k8s_node, absent=None):
    """The registered ``k8s_info`` read of a node -> its ``nvidia.com/gpu`` allocatable as an int, or ``absent``
    (the role passes ``omit``: ansible-core before 2.19 templates a None into text, which no int option takes) when
    it cannot be compared: the read was skipped, failed or found no node, the node advertises no ``nvidia.com/gpu``
    (a MIG node under the mixed strategy, a DRA node), or the quantity is not a whole number (the API only admits
    whole extended resources).  Then the module's ``device_plugin_count`` stays unset: the kubernetes row
    (``compliance_rows``) reports why, and the count is not compared."""
    if not isinstance(k8s_node, dict) or k8s_node.get("skipped") or k8s_node.get("failed"):
        return absent
    resources = k8s_node.get("resources")
    if not isinstance(resources, list) or not resources or not isinstance(resources[0], dict):
        return absent
    status = resources[0].get("status") if isinstance(resources[0].get("status"), dict) else {}
    allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
    quantity = allocatable.get("nvidia.com/gpu")
    if isinstance(quantity, bool):
        return absent
    if isinstance(quantity, int):
        return quantity if quantity >= 0 else absent
    # A quantity is text in the API; bounded before int() (a 4,300-digit string would raise, a longer one be slow).
    if isinstance(quantity, str) and re.fullmatch(r"[0-9]{1,9}", quantity):
        return int(quantity)
    return absent


def _drift_text(item):
    if isinstance(item, dict):
        if item.get("message"):
            return str(item["message"])
        return ", ".join("%s=%s" % (key, item[key]) for key in sorted(item))
    return str(item)


def host_rows(host, node, mig=None, k8s=None, node_name=None, dra=None):
    """Rows for one host from its node_compliance result (and mig_config compare and k8s_info results)."""
    host = str(host)
    if not isinstance(node, dict) or not node:
        return [_row(host, "reachability", "error", "a node_compliance result", "no result (the host did not run)")]
    if node.get("unreachable"):
        return [_row(host, "reachability", "unreachable", "reachable", node.get("msg") or "unreachable")]
    if not isinstance(node.get("checks"), list):
        return [_row(host, "reachability", "error", "a node_compliance result",
                     node.get("msg") or "node_compliance returned no checks")]
    rows = []
    for index, item in enumerate(node["checks"]):
        rows.append(_normal_row(
            dict(item, host=host) if isinstance(item, dict) else item, "host %s: checks[%d]" % (host, index)))
    rows.append(_mig_row(host, mig))
    if isinstance(k8s, dict) and k8s:
        rows.append(_k8s_row(host, node_name, k8s))
    if isinstance(dra, dict) and dra.get("check") == "dra":
        rows.append(_status(host, "dra", dra.get("status"), dra.get("expected"), dra.get("actual")))
        if dra.get("status") in ("pass", "fail") and rows[-2]["check"] == "kubernetes" \
                and rows[-2]["status"] == "fail" and "advertises no nvidia.com/ resource" in str(rows[-2]["actual"]):
            # a DRA node has no device-plugin allocatable by design: the dra row judges its GPUs
            rows[-2] = _row(host, "kubernetes", "pass", rows[-2]["expected"],
                            "no device-plugin resource: the GPUs are published through DRA (the dra check)")
    rows.sort(key=lambda row: CHECK_ORDER.index(row["check"]) if row["check"] in CHECK_ORDER else len(CHECK_ORDER))
    return rows


def _hostvar(hostvars, host, name):
    try:
        value = hostvars[host][name]
    except (KeyError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def compliance_rows(hostvars, hosts, node_var=NODE_VAR, mig_var=MIG_VAR, k8s_var=K8S_VAR, dra_var=DRA_VAR):
    """Rows for ``hosts`` read from ``hostvars`` (the registered node, MIG and node-object results)."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("compliance_rows: hosts must be a list of host names, got %s"
                                 % type(hosts).__name__)
    rows = []
    for host in hosts:
        try:
            node_name = hostvars[host].get("compliance_node_name")
        except (KeyError, TypeError, AttributeError):
            node_name = None
        rows.extend(host_rows(host, _hostvar(hostvars, host, node_var), _hostvar(hostvars, host, mig_var),
                              _hostvar(hostvars, host, k8s_var), node_name, _hostvar(hostvars, host, dra_var)))
    return rows


def _short(value, limit=120):
    return clip(value if isinstance(value, str) else repr(value), limit)


def _normal_row(row, where):
    """One report row with text ``host``/``check`` and a known ``status``; a malformed one becomes that row's error.

    One node's bad result (``check: null``, a list as status, ``host: 5``) must never stop the report for the fleet.
    """
    if not isinstance(row, dict):
        return _row("(unknown host)", "(malformed)", "error", "a check result",
                    "%s is not a mapping: %s" % (where, _short(row)))
    host = row.get("host")
    check = row.get("check")
    status = row.get("status")
    problems = []
    if isinstance(host, int) and not isinstance(host, bool):
        host = str(host)
    elif not isinstance(host, str) or not host:
        problems.append("host is %s" % _short(host))
        host = "(unknown host)"
    if not isinstance(check, str) or not check:
        problems.append("check is %s" % _short(check))
        check = "(malformed)"
    if not isinstance(status, str):
        problems.append("status is %s (expected one of %s)" % (_short(status), ", ".join(STATUS_ORDER)))
    if problems:
        return _row(host, check, "error", "a check result with check and status",
                    "%s is malformed: %s" % (where, "; ".join(problems)))
    # a status outside STATUS_ORDER becomes an error row naming it, never a pass
    return _status(host, check, status, row.get("expected"), row.get("actual"))


def _check_rows(rows, name):
    """The rows of compliance_rows, each normalised (a malformed row becomes an ``error`` row for its host)."""
    if not isinstance(rows, list):
        raise AnsibleFilterError("%s: input must be the list from compliance_rows, got %s" % (name, type(rows).__name__))
    return [_normal_row(row, "row %d" % index) for index, row in enumerate(rows)]


def host_status(rows):
    """``{host: pass|fail|unreachable}`` (errors and unknown statuses count as fail)."""
    hosts = {}
    for row in rows:
        current = hosts.setdefault(row["host"], "pass")
        if row["status"] == "unreachable":
            hosts[row["host"]] = "unreachable"
        elif row["status"] not in ("pass", "skip") and current != "unreachable":
            hosts[row["host"]] = "fail"
    return hosts


def compliance_summary(rows):
    """Counts per status and per check, host verdicts and the failing items per host (set_stats data)."""
    rows = _check_rows(rows, "compliance_summary")
    by_status = dict((status, 0) for status in STATUS_ORDER)
    by_check = {}
    failing = {}
    for row in rows:
        by_status[row["status"]] += 1
        counts = by_check.setdefault(row["check"], dict((status, 0) for status in STATUS_ORDER))
        counts[row["status"]] += 1
        if row["status"] in BAD:
            failing.setdefault(row["host"], []).append(
                {"check": row["check"], "status": row["status"], "expected": row["expected"], "actual": row["actual"]})
    verdicts = host_status(rows)
    hosts = {}
    for status in ("pass", "fail", "unreachable"):
        hosts[status] = sorted(host for host, verdict in verdicts.items() if verdict == status)
    return {
        "hosts_total": len(verdicts),
        "hosts_compliant": len(hosts["pass"]),
        "hosts_failed": hosts["fail"],
        "hosts_unreachable": hosts["unreachable"],
        "by_status": by_status,
        "by_check": by_check,
        "failing": failing,
    }


def _text(value):
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def compliance_junit(rows, suite="gpu_native.fleet compliance"):
    """JUnit XML: one testsuite per host, one testcase per host and check."""
    rows = _check_rows(rows, "compliance_junit")
    hosts = []
    for row in rows:
        if row["host"] not in hosts:
            hosts.append(row["host"])
    failures = sum(1 for row in rows if row["status"] in ("fail", "unreachable"))
    errors = sum(1 for row in rows if row["status"] == "error")
    skipped = sum(1 for row in rows if row["status"] == "skip")
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<testsuites name=%s tests="%d" failures="%d" errors="%d" skipped="%d">'
           % (quoteattr(_xml_text(suite)), len(rows), failures, errors, skipped)]
    for host in hosts:
        mine = [row for row in rows if row["host"] == host]
        out.append('  <testsuite name=%s tests="%d" failures="%d" errors="%d" skipped="%d">' % (
            quoteattr(_xml_text(host)), len(mine), sum(1 for r in mine if r["status"] in ("fail", "unreachable")),
            sum(1 for r in mine if r["status"] == "error"), sum(1 for r in mine if r["status"] == "skip")))
        for row in mine:
            head = '    <testcase classname=%s name=%s' % (quoteattr(_xml_text(host)), quoteattr(_xml_text(row["check"])))
            text = "expected: %s\nactual: %s" % (_xml_text(row["expected"]), _xml_text(row["actual"]))
            if row["status"] == "pass":
                out.append(head + "/>")
            elif row["status"] == "skip":
                out.append(head + "><skipped message=%s/></testcase>" % quoteattr(_xml_text(row["actual"])))
            else:
                tag = "error" if row["status"] == "error" else "failure"
                out.append(head + "><%s type=%s message=%s>%s</%s></testcase>" % (
                    tag, quoteattr(row["status"]), quoteattr(_xml_text(row["actual"])[:500]), escape(text), tag))
        out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


_COLORS = {"pass": "#2e7d32", "fail": "#c62828", "error": "#ef6c00", "unreachable": "#6a1b9a", "skip": "#757575"}


def _svg_chart(counts):
    width, bar_h, gap = 360, 18, 6
    total = max([1] + list(counts.values()))
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" '
             'aria-label="status counts">' % (width + 120, len(STATUS_ORDER) * (bar_h + gap))]
    for index, status in enumerate(STATUS_ORDER):
        value = counts.get(status, 0)
        y = index * (bar_h + gap)
        parts.append('<text x="0" y="%d" font-size="13">%s</text>' % (y + 14, status))
        parts.append('<rect x="90" y="%d" width="%d" height="%d" fill="%s"/>' % (
            y, int(width * value / total), bar_h, _COLORS[status]))
        parts.append('<text x="%d" y="%d" font-size="13">%d</text>' % (95 + int(width * value / total), y + 14, value))
    parts.append("</svg>")
    return "".join(parts)


def compliance_html(rows, title="GPU fleet compliance"):
    """A self-contained HTML page: summary, SVG chart of status counts, sortable table."""
    rows = _check_rows(rows, "compliance_html")
    summary = compliance_summary(rows)
    body = []
    for row in rows:
        body.append('<tr class=%s><td>%s</td><td>%s</td><td class="st">%s</td><td>%s</td><td>%s</td></tr>' % (
            quoteattr(row["status"]), escape(_xml_text(row["host"])), escape(_xml_text(row["check"])),
            escape(row["status"]), escape(_xml_text(row["expected"])), escape(_xml_text(row["actual"]))))
    style = ("body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;font-size:13px}"
             "th{background:#eee}" + "".join(
                 "tr.%s td.st{color:%s;font-weight:bold}" % (s, c) for s, c in sorted(_COLORS.items())))
    return "".join([
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">",
        '<meta http-equiv="Content-Security-Policy" content=%s>' % quoteattr(content_security_policy(style)),
        "<title>", escape(_xml_text(title)), "</title><style>", style,
        "</style></head><body><h1>", escape(_xml_text(title)), "</h1><p>",
        "%d host(s): %d compliant, %d failed, %d unreachable</p>" % (
            summary["hosts_total"], summary["hosts_compliant"], len(summary["hosts_failed"]),
            len(summary["hosts_unreachable"])),
        _svg_chart(summary["by_status"]),
        "<table><thead><tr><th>host</th><th>check</th><th>status</th><th>expected</th><th>actual</th></tr></thead>"
        "<tbody>", "".join(body), "</tbody></table></body></html>\n"])


def content_security_policy(style):
    """The page's policy: nothing may load or run; only its own <style> block (by hash) applies.

    No script-src: a value that slipped past escaping still cannot run. The inline SVG chart is part of the
    document, not a loaded image, so it needs no img-src.
    """
    digest = base64.b64encode(hashlib.sha256(style.encode("utf-8")).digest()).decode("ascii")
    return ("default-src 'none'; style-src 'sha256-%s'; img-src 'none'; script-src 'none'; object-src 'none'; "
            "base-uri 'none'; form-action 'none'" % digest)


def compliance_report_name(name, variable="compliance_report_name", folder_variable="compliance_report_dir"):
    """``name`` when it is a plain file name (letters, digits, ``._-``; no path), else a filter error.

    ``variable`` and ``folder_variable`` are the names the message gives, so that a playbook other than
    compliance.yml (the preflight report page) names its own variables in the fix."""
    variable = variable if isinstance(variable, str) and _REPORT_NAME.match(variable) else "compliance_report_name"
    if not (isinstance(folder_variable, str) and _REPORT_NAME.match(folder_variable)):
        folder_variable = "compliance_report_dir"
    if not isinstance(name, str) or not _REPORT_NAME.match(name):
        raise AnsibleFilterError(
            "%s=%s is not a plain file name: the reports would be written outside "
            "%s or not at all. Fix: give a name of letters, digits, '.', '_' and '-' "
            "(such as compliance-nightly), without '/'; set %s for the folder. "
            "Nothing was written." % (variable, clip(repr(name), 120), folder_variable, folder_variable))
    return name


class FilterModule(object):
    def filters(self):
        return {
            "compliance_rows": compliance_rows,
            "compliance_summary": compliance_summary,
            "compliance_junit": compliance_junit,
            "compliance_html": compliance_html,
            "compliance_report_name": compliance_report_name,
            "compliance_device_plugin_count": compliance_device_plugin_count,
        }
