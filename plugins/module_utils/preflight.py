# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight verdict: gate results in, a join decision, node annotations and metrics out.

Kept in Python (and exposed as filters) so that the role's YAML only moves
data: which gates are required, what a skipped gate means, how the reasons
are worded and how the metrics look are decided here, once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

#: The five gates, in the order they run.
GATES = ("spec", "hardware", "kubernetes", "cuda", "serving")
PASS = "pass"
FAIL = "fail"
SKIP = "skip"
STATUSES = (PASS, FAIL, SKIP)

#: Node annotation values stay well under the API's 256 KiB total.
MAX_REASON_CHARS = 300
MAX_ANNOTATION_CHARS = 4000

#: GPU feature discovery labels the kubernetes gate compares with the node's facts
#: (NVIDIA/k8s-device-plugin, gpu-feature-discovery README).
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_MIG_CAPABLE = "nvidia.com/mig.capable"
GFD_DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
GFD_DRIVER_TRIO = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")


class PreflightError(Exception):
    """Gate results that cannot be judged (a caller mistake)."""


def gate_result(gate, status, reasons=None, duration_s=0.0, details=None):
    """One gate's result in the shape every consumer reads."""
    if gate not in GATES:
        raise PreflightError("unknown gate %r (gates: %s)" % (gate, ", ".join(GATES)))
    if status not in STATUSES:
        raise PreflightError("gate %s has the status %r (pass, fail or skip)" % (gate, status))
    reasons = [_short(reason) for reason in (reasons or []) if str(reason).strip()]
    if status == FAIL and not reasons:
        reasons = ["failed without a reason (report this as a bug)"]
    return {"gate": gate, "status": status, "reasons": reasons, "duration_s": round(float(duration_s or 0), 3),
            "details": details or {}}


def _short(text):
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 3] + "..."


def verdict(results, required=GATES):
    """Decide: ``{passed, failed_gates, skipped_gates, missing_gates, reasons}``.

    A node passes only when every required gate ran and passed.  A gate
    skipped on purpose counts as passed for the decision but is reported as
    skipped; a required gate with no result at all fails the node.
    """
    by_gate = {}
    for result in results or []:
        if not isinstance(result, dict) or result.get("gate") not in GATES:
            raise PreflightError("a gate result is not a result of one of %s: %r" % (", ".join(GATES), result))
        by_gate[result["gate"]] = result
    unknown = [gate for gate in required if gate not in GATES]
    if unknown:
        raise PreflightError("required gates %s are not gates (gates: %s)" % (", ".join(unknown), ", ".join(GATES)))
    failed = [gate for gate in GATES if by_gate.get(gate, {}).get("status") == FAIL]
    skipped = [gate for gate in GATES if by_gate.get(gate, {}).get("status") == SKIP]
    missing = [gate for gate in required if gate not in by_gate]
    reasons = []
    for gate in failed:
        for reason in by_gate[gate]["reasons"]:
            reasons.append("%s: %s" % (gate, reason))
    for gate in missing:
        reasons.append("%s: the gate did not run" % gate)
    required_failed = [gate for gate in failed if gate in required]
    return {
        "passed": not required_failed and not missing,
        "failed_gates": failed,
        "skipped_gates": skipped,
        "missing_gates": missing,
        "reasons": reasons,
        "gates": dict((gate, by_gate[gate]["status"]) for gate in GATES if gate in by_gate),
    }


def annotation(decision):
    """The node annotation value for a failed preflight: one line per failed gate."""
    text = "; ".join(decision["reasons"]) or "passed"
    return text if len(text) <= MAX_ANNOTATION_CHARS else text[:MAX_ANNOTATION_CHARS - 3] + "..."


def _label_escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def metrics(results, decision, node, timestamp):
    """Prometheus textfile content (node_exporter textfile collector format)."""
    node_label = _label_escape(node)
    by_gate = dict((result["gate"], result) for result in results or [])
    lines = [
        "# HELP gpu_native_preflight_gate_passed 1 when the gate passed, 0 when it failed; absent when skipped.",
        "# TYPE gpu_native_preflight_gate_passed gauge",
    ]
    for gate in GATES:
        result = by_gate.get(gate)
        if result is None or result["status"] == SKIP:
            continue
        lines.append('gpu_native_preflight_gate_passed{node="%s",gate="%s"} %d' % (
            node_label, gate, 1 if result["status"] == PASS else 0))
    lines += [
        "# HELP gpu_native_preflight_gate_skipped 1 when the gate was skipped on purpose.",
        "# TYPE gpu_native_preflight_gate_skipped gauge",
    ]
    for gate in GATES:
        result = by_gate.get(gate)
        lines.append('gpu_native_preflight_gate_skipped{node="%s",gate="%s"} %d' % (
            node_label, gate, 1 if result is not None and result["status"] == SKIP else 0))
    lines += [
        "# HELP gpu_native_preflight_gate_duration_seconds How long the gate took.",
        "# TYPE gpu_native_preflight_gate_duration_seconds gauge",
    ]
    for gate in GATES:
        if gate in by_gate:
            lines.append('gpu_native_preflight_gate_duration_seconds{node="%s",gate="%s"} %s' % (
                node_label, gate, repr(float(by_gate[gate]["duration_s"]))))
    lines += [
        "# HELP gpu_native_preflight_passed 1 when every required gate passed.",
        "# TYPE gpu_native_preflight_passed gauge",
        'gpu_native_preflight_passed{node="%s"} %d' % (node_label, 1 if decision["passed"] else 0),
        "# HELP gpu_native_preflight_last_run_ts_seconds When the preflight last ran (Unix time).",
        "# TYPE gpu_native_preflight_last_run_ts_seconds gauge",
        'gpu_native_preflight_last_run_ts_seconds{node="%s"} %d' % (node_label, int(timestamp)),
    ]
    return "\n".join(lines) + "\n"


def _resource_value(value):
    """An allocatable quantity for a countable resource (``"8"``, ``8``) as int; None when unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if re.match(r"^\d{1,6}$", text):
        return int(text)
    return None


def _pod_running_and_ready(pod):
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def kubernetes_gate(node, pods, expected_resources, facts, plugin_selector_text="device plugin"):
    """Judge the node object, the device-plugin pods on it, and the GFD labels against the node's facts.

    ``expected_resources``: ``{"nvidia.com/gpu": 8}`` (or MIG / shared
    resources).  ``facts``: ``gpu_product``, ``gpu_count``, ``mig_capable``
    (bool), ``driver_version`` (``"550.127.08"``); a fact that is None is not
    compared.  Returns ``(status, reasons, details)``.
    """
    reasons = []
    if not isinstance(node, dict) or not node.get("metadata"):
        return FAIL, ["the node object could not be read from the API"], {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    counts = {}
    for resource, expected in sorted((expected_resources or {}).items()):
        actual = _resource_value(allocatable.get(resource, "0"))
        counts[resource] = {"expected": expected, "actual": actual}
        if actual != expected:
            reasons.append("allocatable %s is %s, expected %s" % (resource, allocatable.get(resource, 0), expected))
    checks = []
    if facts.get("gpu_product") is not None:
        checks.append((GFD_PRODUCT, str(facts["gpu_product"]).replace(" ", "-")))
    if facts.get("gpu_count") is not None:
        checks.append((GFD_COUNT, str(facts["gpu_count"])))
    if facts.get("mig_capable") is not None:
        checks.append((GFD_MIG_CAPABLE, "true" if facts["mig_capable"] else "false"))
    for key, expected in checks:
        if key not in labels:
            reasons.append("GPU feature discovery label %s is missing" % key)
        elif labels[key] != expected and not (key == GFD_PRODUCT and labels[key].startswith(expected)):
            # GFD may append a sharing suffix to the product (-SHARED, -MIG-...).
            reasons.append("label %s is %s, the node says %s" % (key, labels[key], expected))
    driver = facts.get("driver_version")
    if driver:
        if GFD_DRIVER_FULL in labels:
            if labels[GFD_DRIVER_FULL] != driver:
                reasons.append("label %s is %s, the driver is %s" % (GFD_DRIVER_FULL, labels[GFD_DRIVER_FULL], driver))
        elif all(key in labels for key in GFD_DRIVER_TRIO):
            trio = ".".join(labels[key] for key in GFD_DRIVER_TRIO)
            if trio != driver:
                reasons.append("labels nvidia.com/cuda.driver.{major,minor,rev} say %s, the driver is %s" % (trio, driver))
        else:
            reasons.append("GPU feature discovery label %s is missing" % GFD_DRIVER_FULL)
    ready = [pod for pod in pods or [] if _pod_running_and_ready(pod)]
    if not pods:
        reasons.append("no %s pod runs on the node" % plugin_selector_text)
    elif not ready:
        phases = ", ".join("%s %s" % ((pod.get("metadata") or {}).get("name"), (pod.get("status") or {}).get("phase"))
                           for pod in pods[:3])
        reasons.append("the %s pod is not Running and Ready (%s)" % (plugin_selector_text, phases))
    return (FAIL if reasons else PASS), reasons, {"resources": counts, "plugin_pods_ready": len(ready)}


def summary_table(rows):
    """A fixed-width fleet summary: node, each gate, verdict, first reason."""
    header = ["node"] + list(GATES) + ["verdict", "why"]
    table = [header]
    for row in rows:
        gates = row.get("gates") or {}
        table.append([str(row.get("node", "?"))] + [gates.get(gate, "-") for gate in GATES]
                     + [row.get("verdict", "?"), _short((row.get("reasons") or [""])[0])[:90]])
    widths = [max(len(line[col]) for line in table) for col in range(len(header))]
    out = []
    for index, line in enumerate(table):
        out.append("  ".join(cell.ljust(widths[col]) for col, cell in enumerate(line)).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    return "\n".join(out)


def serving_pod_problem(pod, timeout_s=None):
    """One line saying why the serving pod is not Ready: its phase, each waiting or failed container, its
    unready condition.  ``pod`` is the Pod object the wait returned (or ``{}`` when there was none)."""
    if not isinstance(pod, dict) or not pod.get("metadata"):
        return "the serving pod was not created"
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    within = " within %s s" % timeout_s if timeout_s is not None else ""
    parts = ["phase %s" % status.get("phase", "Pending")]
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = container.get("state") or {}
        for kind in ("waiting", "terminated"):
            detail = state.get(kind)
            if detail:
                text = "container %s %s: %s" % (container.get("name", "?"), kind, detail.get("reason") or "?")
                if detail.get("message"):
                    text += " (%s)" % detail["message"]
                if kind == "terminated" and detail.get("exitCode") is not None:
                    text += " exit code %s" % detail["exitCode"]
                parts.append(text)
    if len(parts) == 1:
        for condition in status.get("conditions") or []:
            if condition.get("status") != "True" and (condition.get("reason") or condition.get("message")):
                parts.append("%s: %s" % (condition.get("type"), condition.get("message") or condition.get("reason")))
                break
        else:
            if not (pod.get("spec") or {}).get("nodeName"):
                parts.append("not bound to a node")
            elif not status.get("conditions"):
                parts.append("no kubelet reported on it (is the node's kubelet running?)")
    return _short("serving pod %s did not become Ready%s: %s" % (name, within, "; ".join(parts)))
