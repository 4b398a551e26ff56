# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight filters: the verdict, the kubernetes gate, the fleet summary and the run's failure budget (logic in
plugin_utils/preflight.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import time

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.upgrade import UpgradeError
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.plain_data import to_plain


def preflight_verdict(results, required=None, node="", timestamp=None, owned=True, uncordon_on_pass=True):
    """Gate results -> verdict with ``outcome``, ``annotation`` and ``metrics`` (textfile content).

    A result gives either ``status`` and ``reasons`` or ``checks``: the check results of the gate's modules
    (``{gpu_health: ..., dcgm_diag: ..., gpu_bandwidth: ...}``), combined here (``preflight.gate_from_checks``).
    """
    if not isinstance(results, list):
        raise AnsibleFilterError("preflight_verdict expects the list of gate results, got %s" % type(results).__name__)
    try:
        normalised = []
        for index, result in enumerate(to_plain(results)):
            if not isinstance(result, dict):
                raise preflight.PreflightError("results[%d] is not a mapping" % index)
            status, reasons = result.get("status"), result.get("reasons")
            if "checks" in result:
                status, reasons = preflight.gate_from_checks(result.get("gate"), result["checks"])
            normalised.append(preflight.gate_result(result.get("gate"), status, reasons,
                                                    result.get("duration_s"), result.get("details")))
        decision = preflight.verdict(normalised, tuple(to_plain(required)) if required else preflight.GATES)
    except preflight.PreflightError as exc:
        raise AnsibleFilterError("preflight_verdict: %s. Fix: give each result gate, status (pass, fail or skip) and "
                                 "reasons (a list of texts), or checks (check name to module result), and "
                                 "duration_s (seconds)." % exc)
    decision["outcome"] = preflight.outcome(decision, owned, uncordon_on_pass)
    decision["results"] = normalised
    decision["annotation"] = preflight.annotation(decision)
    decision["metrics"] = preflight.metrics(normalised, decision, node,
                                            time.time() if timestamp is None else _unix_time(timestamp))
    return decision


def _unix_time(value):
    """``timestamp``: a finite number of seconds since the epoch, at least 0."""
    try:
        seconds = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        seconds = None
    if seconds is None or math.isnan(seconds) or math.isinf(seconds) or not 0 <= seconds < 1e11:
        raise AnsibleFilterError("preflight_verdict: timestamp is %r, not a Unix time in seconds. Fix: pass a number "
                                 "such as ansible_date_time.epoch, or leave it out for now." % (value,))
    return seconds


COUNTING_KEYS = ("gpus", "gpu_count", "device_plugin", "mig_state")


def preflight_kubernetes_gate(node, pods=None, expected_resources=None, facts=None, counting=None):
    """``{status, reasons, details}`` of the kubernetes gate.

    ``expected_resources`` (the override) is compared as given; when it is
    empty and ``counting`` is given, the expectation is computed from the
    node's facts by ``preflight.expected_allocatable``.
    """
    expected = to_plain(expected_resources or {})
    if not isinstance(expected, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                 for v in expected.values()):
        raise AnsibleFilterError("preflight_kubernetes_gate: expected_resources must map resource names to counts, "
                                 "got %r" % (expected,))
    node = to_plain(node)
    unknown = {}
    refused = None
    basis = None
    computed = None
    facts = to_plain(facts or {})
    gfd_labels = None
    gfd_notes = []
    if counting:
        counting = to_plain(counting)
        if not isinstance(counting, dict) or any(key not in COUNTING_KEYS for key in counting):
            raise AnsibleFilterError("preflight_kubernetes_gate: counting takes only the keys %s, got %r"
                                     % (", ".join(COUNTING_KEYS), counting))
        metadata = (node.get("metadata") or {}) if isinstance(node, dict) else {}
        try:
            computed = preflight.expected_allocatable(
                counting.get("gpus"), counting.get("gpu_count"), counting.get("device_plugin"),
                counting.get("mig_state"), metadata.get("name"), metadata.get("labels"))
        except preflight.PreflightError as exc:
            return {"status": preflight.FAIL, "details": {},
                    "reasons": ["the expected allocatable cannot be counted: %s" % exc]}
        if computed.get("gpus"):
            # the GFD labels follow the same counting rule as the allocatable (strategy, sharing, rename)
            gfd_labels, gfd_notes = preflight.gfd_expected_labels(
                facts.get("gpu_product"), computed["gpus"], computed.get("plugin_config"), computed.get("mig_layout"))
            if not gfd_labels:
                gfd_labels = None
    if expected:
        basis = "preflight_expected_resources"
    elif computed is not None:
        expected, unknown, basis = computed["expected"], computed["unknown"], computed["basis"]
        refused = computed.get("refused")
    pods = to_plain(pods or [])
    if not isinstance(pods, list) or not all(isinstance(pod, dict) for pod in pods):
        raise AnsibleFilterError("preflight_kubernetes_gate: pods must be a list of pod objects (k8s_info resources), "
                                 "got %s. Fix: pass the resources list of the device-plugin pods." % (
                                     type(pods).__name__ if not isinstance(pods, list) else "a list holding %s" %
                                     ", ".join(sorted(set(type(p).__name__ for p in pods if not isinstance(p, dict))))))
    status, reasons, details = preflight.kubernetes_gate(node, pods, expected,
                                                         facts, unknown=unknown, basis=basis,
                                                         gfd_labels=gfd_labels, refused=refused)
    if gfd_labels is not None:
        details["gfd_labels"] = dict((key, value) for key, (value, _how) in gfd_labels.items())
        details["gfd_notes"] = gfd_notes
    if computed is not None:
        internal = ("plugin_config", "gpus", "mig_layout")
        computed = dict((key, value) for key, value in computed.items() if key not in internal)
        details["counting"] = computed
    details["expected_from"] = basis
    return {"status": status, "reasons": reasons, "details": details}


def _check_hostvars_and_hosts(filter_name, hostvars, hosts):
    """The input of a filter over the fleet: hostvars and a list of host names, or the error with the fix."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("%s: hosts is %s, not a list of host names. Fix: pass ansible_play_hosts_all or "
                                 "query('inventory_hostnames', pattern)." % (filter_name, type(hosts).__name__))
    if not hasattr(hostvars, "get") or not hasattr(hostvars, "__getitem__"):
        raise AnsibleFilterError("%s: the input is %s, not hostvars. Fix: hostvars | gpu_native.fleet.%s(hosts, ...)."
                                 % (filter_name, type(hostvars).__name__, filter_name))


def preflight_summary(rows, hosts=None):
    """The fleet summary.

    ``hostvars | preflight_summary(hosts)``: ``{rows, table, page_rows}``, one row per host from its
    ``preflight_verdict`` and ``preflight_outcome`` (a host without them: unreachable or failed); ``page_rows``
    adds each gate's ``results`` and the ``label_key`` for the report page (preflight_report_html). ``rows | preflight_summary``: the
    fixed-width table of ``[{node, gates, verdict, reasons}]``.
    """
    if hosts is not None:
        _check_hostvars_and_hosts("preflight_summary", rows, hosts)
        detailed = to_plain(preflight.summary_rows(rows, [str(host) for host in hosts], detailed=True))
        built = [dict((key, value) for key, value in row.items() if key not in ("results", "label_key"))
                 for row in detailed]
        return {"rows": built, "table": preflight.summary_table(built), "page_rows": detailed}
    if not isinstance(rows, list):
        raise AnsibleFilterError("preflight_summary expects a list of rows, got %s" % type(rows).__name__)
    return preflight.summary_table(to_plain(rows))


def preflight_run_budget(hostvars, hosts, max_fail_percentage=100, name="preflight_max_fail_percentage"):
    """``hostvars | preflight_run_budget(hosts, max_fail_percentage, name)``: the run's failure budget over
    ``hosts`` (plugin_utils/preflight.py run_budget): who failed, whether the budget is spent, the reason a node
    left alone reports, and whether (and why) the run fails at its end."""
    name = str(to_plain(name))[:64]
    _check_hostvars_and_hosts("preflight_run_budget", hostvars, hosts)
    try:
        return preflight.run_budget(hostvars, to_plain(hosts), to_plain(max_fail_percentage), name)
    except UpgradeError as exc:
        raise AnsibleFilterError("preflight_run_budget: %s. Fix: set %s to 0-100." % (exc, name))


def preflight_pod_problem(pod, timeout_s=None):
    """One line saying why the serving pod is not Ready (phase, waiting containers, unready condition)."""
    return preflight.serving_pod_problem(to_plain(pod) if isinstance(pod, dict) else {}, timeout_s)


class FilterModule(object):
    """gpu_native.fleet preflight filters."""

    def filters(self):
        return {
            "preflight_verdict": preflight_verdict,
            "preflight_kubernetes_gate": preflight_kubernetes_gate,
            "preflight_summary": preflight_summary,
            "preflight_pod_problem": preflight_pod_problem,
            "preflight_run_budget": preflight_run_budget,
        }
