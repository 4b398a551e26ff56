# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""GPU readiness verdict: per-GPU health, Xid actions and count checks.

Shared by the ``gpu_health`` module and the ``gpu_readiness`` node agent.

``evaluate(inputs, expected_gpus=None, xid_actions=None)`` judges each GPU
from the tools' output, never from exit codes.  ``inputs`` is a dict with any
of ``nvidia_smi_xml``, ``nvidia_smi_query``, ``nvidia_smi`` (texts),
``lspci`` (text) or ``pci_devices`` (parsed list, e.g. from sysfs),
``kernel_log`` (text), ``device_plugin_count`` (int, nvidia.com/gpu),
``device_plugin_resources`` (the node's allocatable, ``{resource: count}``), ``driver_error``
(a one-line cause when nvidia-smi could not reach the driver or is missing)
``tool_errors`` (one line each, with the fix: nvidia-smi timed out, exited
non-zero without readable output, or printed something unreadable),
``pci_error`` (a captured lspci output that cannot be read: never ready) and
``kernel_log_error`` (neither journalctl nor dmesg gave the kernel log, e.g.
without root: never ready, never judged as a clean log).

``collect(tools, ...)`` gathers those inputs through a
``node_tools.NodeTools``: live on a node, or replayed from ``captured`` texts
through the same code path.  Every call's result stays in ``tools.calls``.

Verdict rules (each one is tested):

* a GPU is unhealthy when its table row shows ``ERR!``; nvidia-smi cannot get
  its handle or says "GPU is lost"; the kernel says it fell off the bus; a
  ``-q`` field that speaks about health (``nvidia_smi.HEALTH_SECTIONS``: ECC,
  retired pages, remapped rows, recovery action, reset status, temperature,
  power, clocks-event reasons, memory, PCIe, fabric) reads ``Unknown Error``
  (the same text in an informational field such as ``Addressing Mode`` is a
  note); remapped rows are pending or remapping
  failed; an uncorrectable volatile ECC count is above zero with an action
  pending; the driver asks for a reset or reboot; or an Xid whose action is
  ``reset_gpu``/``reboot_node`` was seen and not cleared (a later driver load,
  or for Xid 154 a later "to 0x0 (None)" line, clears it);
* the node is not ready when a GPU is unhealthy, the PCI and nvidia-smi counts
  differ, a known device-plugin count differs, ``expected_gpus`` differs, the
  driver cannot be reached, nvidia-smi timed out or printed nothing readable,
  its output describes no GPU at all, or it reports more attached GPUs than it
  describes (unless ``expected_gpus`` declares fewer than attached).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.regular_file import read_regular
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import parse_int
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.device_counts import (
    GPU as GPU_RESOURCE,
    DeviceCountError,
    compare,
    expected_resources,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_smi import (
    SENSOR_FIELDS,
    NvidiaSmiParseError,
    detect_no_driver,
    is_health_field,
    parse_query_text,
    parse_query_xml,
    parse_table,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.pci import (
    LspciParseError,
    count_nvidia_gpus,
    nvidia_gpus,
    nvidia_virtual_functions,
    possible_virtual_functions,
    parse_lspci,
    read_sysfs_pci_devices,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.xid import (
    ACTION_RANK,
    NOT_READY_ACTIONS,
    classify,
    describe,
    driver_generation,
    judge_line,
    MAX_LINE_CHARS,
    merge_overrides,
    parse_kernel_log,
)

NO_ACTION = "none"
#: What an ERR! in a sensor field only (fan, temperature, power draw or cap) does: ``fail`` (the GPU is unhealthy)
#: or ``warn`` (a note).  An ERR! in any other field, an all-ERR! row or a handle error is always unhealthy.
SENSOR_ERROR_CHOICES = ("fail", "warn")
SENSOR_ERROR_DEFAULT = "fail"
_SINCE_RE = re.compile(r"^\d+\s*(s|sec|m|min|h|d|w)$")
_PENDING_RECOVERY = {
    "gpu reset": "reset_gpu",
    "reset": "reset_gpu",
    "drain and reset": "reset_gpu",
    "node reboot": "reboot_node",
    "reboot": "reboot_node",
    "drain p2p": "drain_p2p",
}


class GpuHealthError(FleetError, ValueError):
    """Input the verdict cannot be computed from (one line, with the fix)."""


def _stronger(first, second):
    if first in (None, NO_ACTION):
        return second
    if second in (None, NO_ACTION):
        return first
    return first if ACTION_RANK.get(first, 0) >= ACTION_RANK.get(second, 0) else second


class _Gpu(object):
    def __init__(self, bus_id):
        self.pci_bus_id = bus_id
        self.index = None
        self.uuid = None
        self.product = None
        self.problems = []
        self.notes = []
        self.action = NO_ACTION
        self.mig_enabled = False
        self.mig_device_count = 0
        self.seen_by_nvidia_smi = False

    def problem(self, text, action):
        if text not in self.problems:
            self.problems.append(text)
        self.action = _stronger(self.action, action)

    def label(self):
        index = "?" if self.index is None else str(self.index)
        text = "GPU %s %s" % (index, self.pci_bus_id or "(unknown bus id)")
        if self.uuid:
            text += " (%s)" % self.uuid
        return text

    def as_dict(self):
        return {
            "index": self.index,
            "pci_bus_id": self.pci_bus_id,
            "uuid": self.uuid,
            "product": self.product,
            "mig_enabled": self.mig_enabled,
            "mig_devices": self.mig_device_count,
            "healthy": not self.problems,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


class _Gpus(object):
    def __init__(self):
        self.by_bus = {}
        self.order = []

    def get(self, bus_id):
        key = bus_id or "unknown"
        if key not in self.by_bus:
            self.by_bus[key] = _Gpu(bus_id)
            self.order.append(key)
        return self.by_bus[key]

    def all(self):
        gpus = [self.by_bus[key] for key in self.order]
        return sorted(gpus, key=lambda g: (g.index is None, g.index if g.index is not None else 0, g.pci_bus_id or ""))


def _shown(paths, limit=6):
    return ", ".join(paths[:limit]) + (" and %d more" % (len(paths) - limit) if len(paths) > limit else "")


def _power_brake_note(data, source):
    """A note when ``HW Power Brake Slowdown`` is active (a note, not a problem: the GPU itself is healthy).

    NVML (nvmlClocksEventReasons, "HW Power Brake Slowdown (reducing the core clocks by a factor of 2 or more) is
    engaged"; DCGM's field constants name the cause: "External Power Brake Assertion is triggered (e.g. by the
    system power supply)") - the brake comes from the system (PSU, BMC), not from load, so on an idle GPU it says
    the clocks will stay low when work arrives."""
    active = data.get("clocks_event_reasons_active") or []
    if "hw_power_brake_slowdown" not in active:
        return None
    idle = "idle" in active or data.get("utilization_gpu_pct") == 0
    return ("nvidia-smi %s: HW Power Brake Slowdown is active%s (Clocks Event Reasons): the system (power supply or "
            "BMC) asserts the external power brake, which cuts the clocks by half or more; bandwidth, DCGM and "
            "performance gates will fail until it clears. Fix: check the node's power supplies and the BMC event "
            "log" % (source, " on an idle GPU" if idle else ""))


def _apply_query(gpus, report, source):
    for position, data in enumerate(report["gpus"]):
        gpu = gpus.get(data["pci_bus_id"])
        gpu.seen_by_nvidia_smi = True
        if gpu.index is None:
            gpu.index = position
        gpu.uuid = gpu.uuid or data.get("uuid")
        gpu.product = gpu.product or data.get("product")
        if (data.get("mig_mode") or "").lower() == "enabled":
            gpu.mig_enabled = True
            gpu.mig_device_count = max(gpu.mig_device_count, len(data.get("mig_devices") or []))
        if data.get("lost"):
            gpu.problem("nvidia-smi %s says the GPU is lost" % source, "reboot_node")
        unknown = data.get("unknown_error_fields") or []
        health = data.get("unknown_error_health_fields")
        if health is None:
            health = [path for path in unknown if is_health_field(path)]
        informational = [path for path in unknown if path not in health]
        if health:
            gpu.problem("nvidia-smi %s fields read 'Unknown Error' (%s)" % (source, _shown(health)), "reset_gpu")
        if informational:
            gpu.notes.append("nvidia-smi %s informational fields read 'Unknown Error' (%s): not a health signal"
                             % (source, _shown(informational)))
        brake = _power_brake_note(data, source)
        if brake:
            gpu.notes.append(brake)
        remapped = data.get("remapped_rows")
        if remapped:
            if remapped.get("pending"):
                gpu.problem("row remapping is pending: reset the GPU to activate it", "reset_gpu")
            if remapped.get("failure"):
                gpu.problem("row remapping failed: the GPU needs service (RMA workflow)", "reset_gpu")
        ecc = data.get("ecc_errors") or {}
        volatile = ecc.get("volatile_uncorrectable")
        pending = (
            (remapped or {}).get("pending")
            or data.get("retired_pages_pending")
            or data.get("reset_required")
            or data.get("drain_and_reset_recommended")
        )
        if volatile:
            if pending:
                gpu.problem("%d uncorrectable volatile ECC errors with a pending remap/retirement/reset" % volatile,
                            "reset_gpu")
            else:
                gpu.notes.append("%d uncorrectable volatile ECC errors (no action pending)" % volatile)
        if data.get("reset_required"):
            gpu.problem("nvidia-smi reports 'Reset Required: Yes'", "reset_gpu")
        elif data.get("drain_and_reset_recommended"):
            gpu.problem("nvidia-smi reports 'Drain and Reset Recommended: Yes'", "reset_gpu")
        recovery = (data.get("recovery_action") or "None").strip()
        if recovery.lower() not in ("none", ""):
            gpu.problem("nvidia-smi reports GPU recovery action '%s'" % recovery,
                        _PENDING_RECOVERY.get(recovery.lower(), "reset_gpu"))


def _apply_table(gpus, table, sensor_error=SENSOR_ERROR_DEFAULT):
    for row in table["gpus"]:
        gpu = gpus.get(row["pci_bus_id"])
        gpu.seen_by_nvidia_smi = True
        gpu.index = row["index"]  # the table's index is nvidia-smi's own
        gpu.product = gpu.product or row.get("product")
        if (row.get("mig_mode") or "").lower() == "enabled":
            gpu.mig_enabled = True
        if not row["err"]:
            continue
        err_fields = row.get("err_fields") or []
        fields = ", ".join(err_fields) or "row"
        answers = row.get("memory_total_mib") is not None and row.get("product") is not None
        if err_fields and answers and set(err_fields) <= SENSOR_FIELDS:
            # one unreadable sensor on a GPU that otherwise answers: a degraded sensor, not a lost GPU
            text = "nvidia-smi table shows ERR! for %s: a sensor nvidia-smi cannot read on a GPU that otherwise answers" % fields
            if sensor_error == "warn":
                gpu.notes.append(text + " (sensor_error: warn)")
            else:
                gpu.problem(text + " (sensor_error: fail; set it to warn to report it only)", "reset_gpu")
            continue
        gpu.problem("nvidia-smi table shows ERR! (%s)" % fields, "reset_gpu")


def _apply_handle_errors(gpus, errors):
    for error in errors:
        gpu = gpus.get(error["pci_bus_id"])
        gpu.seen_by_nvidia_smi = True
        lost = "gpu is lost" in error["message"].lower()
        gpu.problem("nvidia-smi cannot get its handle: %s" % error["message"],
                    "reboot_node" if lost else "reset_gpu")


def _xid_events(gpus, kernel, catalog, generation=None):
    """Judge Xid lines, link them (45 -> cause, 171/172 -> 48, XID_154_EVAL -> 154),
    deduplicate per (xid, GPU), apply clearing and mark GPUs."""
    for bus_id, uuid in kernel["uuid_map"].items():
        if bus_id in gpus.by_bus and not gpus.by_bus[bus_id].uuid:
            gpus.by_bus[bus_id].uuid = uuid
    last_driver_load = max(kernel["driver_loads"]) if kernel["driver_loads"] else 0
    live_xids = {}  # bus -> Xids seen since the last driver load
    for event in kernel["events"]:
        if event["line"] > last_driver_load:
            live_xids.setdefault(event["pci_bus_id"], set()).add(event["xid"])
    entries = {}
    order = []
    dbe_seen = set()
    previous_xid = {}  # bus -> the latest Xid other than 45 seen so far (links a "not solo" 45)
    judgements = {}  # floods repeat the same line: judge each text once
    for event in kernel["events"]:
        key = (event["xid"], event["pci_bus_id"])
        memo = (event["xid"], event["message"])
        judged = judgements.get(memo)
        if judged is None:
            judged = judgements[memo] = judge_line(event["xid"], event["message"], catalog, generation)
        action = judged["action"]
        cleared = event["line"] < last_driver_load
        note = judged["note"]
        overridden = catalog.get(event["xid"], {}).get("overridden")
        here = live_xids.get(event["pci_bus_id"], set())
        if event["xid"] == 48 and not cleared:
            dbe_seen.add(event["pci_bus_id"])
            if not overridden and here & set([63, 64]):
                note = "with Xid 63/64 (WORKFLOW_XID_48): drain the node and reset the GPU"
        if event["xid"] == 63 and event["pci_bus_id"] in dbe_seen and not overridden:
            action = "reset_gpu"
            note = "row remap pending after a DBE (Xid 48): reset the GPU to activate it"
        if judged["caused_by"] is not None:
            if judged["caused_by"] not in here:
                # the cause is not in the window: judge the 45 as its cause would be judged alone
                action = classify(judged["caused_by"], None, catalog, generation)
                note = "caused by Xid %d, which is not in the log window: judged as Xid %d's catalog action" % (
                    judged["caused_by"], judged["caused_by"])
        linked = judged["caused_by"]
        if (event["xid"] == 45 and linked is None and not overridden and not cleared
                and judged["bucket"] == "WORKFLOW_XID_45"):
            others = sorted(x for x in here if x != 45)
            if others:
                # NVIDIA's catalog, Xid 45: "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)"
                linked = previous_xid.get(event["pci_bus_id"], others[0])
                action = "ignore"
                note = ("not solo (Xid %s on this GPU in the log window): ignored, the verdict follows Xid %d"
                        % (", ".join(str(x) for x in others), linked))
        if event["xid"] != 45:
            previous_xid[event["pci_bus_id"]] = event["xid"]
        if judged["follows"] == 48:
            if 48 in here:
                action = "ignore"
                note = "companion of Xid 48 on this GPU: the verdict follows Xid 48"
        if event["xid"] == 154 and action is None:
            # "... to 0x0 (None)": every earlier 154 line for this GPU is cleared
            if key in entries:
                for line in entries[key]["_lines"]:
                    line["cleared"] = True
            action = "ignore"
            cleared = True
        if key not in entries:
            entries[key] = {
                "xid": event["xid"],
                "pci_bus_id": event["pci_bus_id"],
                "gi": event["gi"],
                "description": describe(event["xid"], catalog),
                "bucket": judged["bucket"],
                "investigatory": judged["investigatory"],
                "caused_by": None,
                "follows": None,
                "decode": None,
                "message": event["message"],
                "count": 0,
                "first_seen": event["timestamp"],
                "last_seen": event["timestamp"],
                "pids": [],
                "processes": [],
                "_lines": [],
            }
            order.append(key)
        entry = entries[key]
        entry["count"] += 1
        entry["last_seen"] = event["timestamp"]
        entry["message"] = event["message"] or entry["message"]
        if linked is not None:
            entry["caused_by"] = linked
        if event["gi"] is not None:
            entry["gi"] = event["gi"]
        if event["pid"] is not None and event["pid"] not in entry["pids"]:
            entry["pids"].append(event["pid"])
        if event["name"] and event["name"] not in entry["processes"]:
            entry["processes"].append(event["name"])
        entry["_lines"].append({"action": action, "cleared": cleared, "note": note,
                                "follows": judged["follows"] if judged["follows"] == 154 else None,
                                "decode": judged["decode"]})
    # per entry: strongest action of its lines and what is still pending
    for key in order:
        entry = entries[key]
        action = pending = NO_ACTION
        best = -1
        for line in entry["_lines"]:
            if line["decode"] and ACTION_RANK.get(line["action"], 0) > best:
                best = ACTION_RANK.get(line["action"], 0)
                entry["decode"] = line["decode"]
            action = _stronger(action, line["action"])
            if not line["cleared"]:
                pending = _stronger(pending, line["action"])
            entry["note"] = line["note"] or entry.get("note")
            if line["follows"]:
                entry["follows"] = line["follows"]
        entry["_action"], entry["_pending"] = action, pending
    # XID_154_EVAL lines follow the GPU's Xid 154, else restart_app
    for key in order:
        entry = entries[key]
        if entry["follows"] != 154:
            continue
        recovery = entries.get((154, entry["pci_bus_id"]))
        if recovery is not None:
            entry["_action"], entry["_pending"] = recovery["_action"], recovery["_pending"]
            entry["note"] = "XID_154_EVAL: follows the Xid 154 of this GPU"
        else:
            entry["note"] = "XID_154_EVAL with no Xid 154 for this GPU in the log window: restart the application"
    results = []
    for key in order:
        entry = entries[key]
        entry.pop("_lines")
        action, pending = entry.pop("_action"), entry.pop("_pending")
        entry["action"] = action if action != NO_ACTION else "ignore"
        entry["pending_action"] = pending if pending not in (NO_ACTION,) else "none"
        entry["cleared"] = pending in (NO_ACTION, "ignore") and action in NOT_READY_ACTIONS
        if not entry.get("note"):
            entry.pop("note", None)
        gpu = gpus.get(entry["pci_bus_id"])
        gpu.uuid = gpu.uuid or kernel["uuid_map"].get(entry["pci_bus_id"] or "")
        entry["gpu_index"] = gpu.index
        entry["uuid"] = gpu.uuid or kernel["uuid_map"].get(entry["pci_bus_id"] or "")
        if pending in NOT_READY_ACTIONS:
            gpu.problem("Xid %d (%s; NVIDIA: %s) seen %d time(s), last %s, not cleared: %s" % (
                entry["xid"], entry["description"], (entry.get("decode") or {}).get("bucket") or entry["bucket"]
                or "not in the catalog", entry["count"], entry["last_seen"] or "(no timestamp)", pending), pending)
        results.append(entry)
    for error in kernel["bus_errors"]:
        # A driver load clears what came before it, except the probe's own message: osapi.c prints
        # "... installed in this system has fallen off the bus" before the banner of the load that probed
        # (open-gpu-kernel-modules 595.45.04 kernel-open/nvidia/nv.c prints "NVRM: loading" last).
        loads_after = [load for load in kernel["driver_loads"] if load > error["line"]]
        if len(loads_after) > (1 if error.get("at_probe") else 0):
            continue
        gpu = gpus.get(error["pci_bus_id"])
        gpu.uuid = gpu.uuid or kernel["uuid_map"].get(error["pci_bus_id"] or "")
        if error["kind"] == "fallen_off_bus":
            gpu.problem("the kernel log says the GPU has fallen off the bus", "reboot_node")
        else:
            gpu.problem("the kernel log says the GPU is lost", "reboot_node")
    # Finish labels now that indexes/UUIDs are known.
    for entry in results:
        gpu = gpus.by_bus.get(entry["pci_bus_id"] or "unknown")
        if gpu is not None:
            entry["gpu_index"] = gpu.index
            entry["uuid"] = entry["uuid"] or gpu.uuid
    return results


def _sxid_verdict(kernel, reasons, notes):
    """Fatal NVSwitch SXids make the node's fabric not ready; non-fatal ones are notes."""
    last_driver_load = max(kernel["driver_loads"]) if kernel["driver_loads"] else 0
    seen = set()
    for event in kernel["sxid_events"]:
        if event["fatal"] is None:
            continue  # detail lines ("Data {...}", "Severity ...") carry no verdict
        key = (event["pci_bus_id"], event["xid"], event["fatal"])
        if key in seen:
            continue
        seen.add(key)
        switch = "%s (%s)" % (event["switch"] or "NVSwitch", event["pci_bus_id"] or "unknown bus id")
        what = "SXid %d%s: %s" % (event["xid"], "" if event["link"] is None else " on link %d" % event["link"],
                                  event["message"])
        if event["fatal"] and event["line"] > last_driver_load:
            reasons.append("NVSwitch %s reported a fatal %s; the node's NVLink fabric is not ready. Fix: drain the "
                           "node, reset the GPUs and NVSwitches (or reboot) and check nvidia-fabricmanager's log."
                           % (switch, what))
        elif not event["fatal"]:
            notes.append("NVSwitch %s reported a non-fatal %s" % (switch, what))


def _pci_devices(inputs):
    if inputs.get("pci_devices") is not None:
        return inputs["pci_devices"]
    if inputs.get("lspci") is not None:
        try:
            return parse_lspci(inputs["lspci"])
        except LspciParseError as exc:
            raise GpuHealthError("lspci cannot be read: %s. Fix: pass the output of lspci -nnD." % exc)
    return None


def _resource_check(gpus, actual, config, mig_layout, gpu_count, checks, reasons, notes):
    """Per-resource expected vs actual device-plugin counts (module_utils.gpu.device_counts)."""
    listed = [{"mig_enabled": g.mig_enabled, "mig_devices": g.mig_device_count}
              for g in gpus.all() if g.seen_by_nvidia_smi]
    if gpu_count is not None and gpu_count > len(listed):
        # counted by nvidia-smi (attached_gpus) but not described: MIG mode unknown
        listed += [{"mig_enabled": None, "mig_devices": 0}] * (gpu_count - len(listed))
    try:
        expectation = expected_resources(config, listed, mig_layout)
    except DeviceCountError as exc:
        raise GpuHealthError(str(exc))
    notes.extend(expectation["notes"])
    if expectation.get("refused"):
        checks["device_plugin_count_matches"] = False
        reasons.append(expectation["refused"] + ".")
        return [{"resource": GPU_RESOURCE, "expected": None, "actual": (actual or {}).get(GPU_RESOURCE), "matches": False,
                 "why_refused": expectation["refused"]}]
    if actual is None:
        return [{"resource": name, "expected": count, "actual": None, "matches": None}
                for name, count in sorted(expectation["expected"].items())]
    try:
        rows = compare(expectation, actual)
    except DeviceCountError as exc:
        raise GpuHealthError(str(exc))
    known = [row for row in rows if row["matches"] is not None]
    if known:
        checks["device_plugin_count_matches"] = all(row["matches"] for row in known)
    for row in rows:
        if row["matches"] is False:
            reasons.append("The device plugin exposes %s %s but the node's GPUs and device-plugin config (migStrategy "
                           "%s) give %s. Fix: restart the NVIDIA device plugin pod and check its log for unhealthy "
                           "devices, or correct device_plugin_config/mig_layout." % (
                               row["actual"], row["resource"], expectation["strategy"], row["expected"]))
        elif row["matches"] is None:
            notes.append("%s: expected count unknown (%s)" % (row["resource"], row["why_unknown"]))
    return rows


def evaluate(inputs, expected_gpus=None, xid_actions=None, device_plugin_config=None, mig_layout=None,
             sensor_error=SENSOR_ERROR_DEFAULT):
    """Compute the readiness verdict (see the module docstring).

    ``sensor_error`` (``fail`` or ``warn``) decides what an ``ERR!`` in a
    sensor field alone does (``SENSOR_ERROR_CHOICES``).

    ``device_plugin_config`` (the device plugin's config, as roles/device_plugin_config
    renders it) and ``mig_layout`` (``{profile: count}``) make the device-plugin check
    per resource: ``inputs["device_plugin_resources"]`` (the node's allocatable) is
    compared with the count the plugin exposes for this config (time-slicing
    replicas, renameByDefault, MIG strategies).
    """
    check_count("expected_gpus", expected_gpus)
    if sensor_error not in SENSOR_ERROR_CHOICES:
        raise GpuHealthError("sensor_error is %r. Fix: use fail or warn." % (sensor_error,))
    catalog = merge_overrides(xid_actions)
    gpus = _Gpus()
    reasons = []
    notes = []
    driver_version = cuda_version = None
    driver_reachable = None
    attached = None
    nvidia_smi_seen = False

    driver_error = inputs.get("driver_error")
    texts = [inputs.get(k) for k in ("nvidia_smi_xml", "nvidia_smi_query", "nvidia_smi") if inputs.get(k)]
    no_driver_text = [t for t in texts if detect_no_driver(t)]
    if driver_error or no_driver_text:
        driver_reachable = False
        cause = driver_error or [line for line in no_driver_text[0].splitlines() if line.strip()][0].strip()
        reasons.append("The NVIDIA driver cannot be reached: %s Fix: load the nvidia kernel module "
                       "(modprobe nvidia) or reinstall the driver so that nvidia-smi can reach it." % cause)
    for error in inputs.get("tool_errors") or []:
        reasons.append(error)
    notes.extend(inputs.get("tool_notes") or [])
    parsed = inputs.get("_parsed") or {}

    def parse(key, parser, label):
        text = inputs.get(key)
        if not text or detect_no_driver(text):
            return None
        if key in parsed:
            return parsed[key]
        try:
            return parser(text)
        except NvidiaSmiParseError as exc:
            raise GpuHealthError("%s cannot be parsed: %s. Fix: pass the unmodified output of `%s`." % (key, exc, label))

    report_xml = parse("nvidia_smi_xml", parse_query_xml, "nvidia-smi -q -x")
    report_text = parse("nvidia_smi_query", parse_query_text, "nvidia-smi -q")
    table = parse("nvidia_smi", parse_table, "nvidia-smi")
    for report, source in ((report_xml, "-q -x"), (report_text, "-q")):
        if report is None:
            continue
        nvidia_smi_seen = True
        driver_version = driver_version or report["driver_version"]
        cuda_version = cuda_version or report["cuda_version"]
        if attached is None:
            attached = report["attached_gpus"]
        _apply_query(gpus, report, source)
        _apply_handle_errors(gpus, report["handle_errors"])
    if table is not None:
        nvidia_smi_seen = True
        driver_version = driver_version or table["driver_version"]
        cuda_version = cuda_version or table["cuda_version"]
        _apply_table(gpus, table, sensor_error)
        _apply_handle_errors(gpus, table["handle_errors"])
    if nvidia_smi_seen and driver_reachable is None:
        driver_reachable = True
    if inputs.get("tool_errors") and not nvidia_smi_seen:
        driver_reachable = False

    kernel = parse_kernel_log(inputs.get("kernel_log") or "")
    # A kernel log that could not be read is not a clean one: never ready, and the caller may report an error.
    if inputs.get("kernel_log_error"):
        reasons.append(inputs["kernel_log_error"])
    kernel_driver = [v for v in kernel["driver_versions"] if v]
    generation = driver_generation(driver_version or (kernel_driver[-1] if kernel_driver else None))
    xid_events = _xid_events(gpus, kernel, catalog, generation)
    _sxid_verdict(kernel, reasons, notes)
    if kernel["limits"]["chars_dropped"] or kernel["limits"]["lines_cut"]:
        notes.append("kernel_log was bounded: %d oldest characters dropped, %d lines cut to %d characters"
                     % (kernel["limits"]["chars_dropped"], kernel["limits"]["lines_cut"], MAX_LINE_CHARS))

    nvidia_smi_count = None
    if nvidia_smi_seen:
        seen = len([g for g in gpus.all() if g.seen_by_nvidia_smi])
        nvidia_smi_count = seen
        if seen == 0 and driver_reachable is not False:
            reasons.append("nvidia-smi's output describes no GPU%s, so no GPU can be judged. Fix: run nvidia-smi on "
                           "the node; a cut-off or header-only output is not a healthy node." % (
                               " (it says %d attached)" % attached if attached else ""))
        elif attached is not None and attached > seen:
            if expected_gpus is not None and not isinstance(expected_gpus, bool) and expected_gpus < attached:
                notes.append("nvidia-smi reports %d attached GPUs but describes %d; expected_gpus (%d) declares "
                             "fewer than attached, so the %d described are counted" % (attached, seen, expected_gpus,
                                                                                       seen))
            else:
                nvidia_smi_count = attached
                reasons.append("nvidia-smi reports %d attached GPUs but describes only %d; the others cannot be "
                               "judged. Fix: check nvidia-smi -q on the node for GPUs it cannot read, or set "
                               "expected_gpus if this output was trimmed on purpose." % (attached, seen))
        elif attached is not None and attached < seen:
            notes.append("nvidia-smi reports %d attached GPUs but describes %d" % (attached, seen))
    elif driver_reachable is False:
        nvidia_smi_count = 0

    pci_devices = _pci_devices(inputs)
    pci_count = count_nvidia_gpus(pci_devices) if pci_devices is not None else None
    if pci_count is None and inputs.get("pci_error"):
        # An lspci output that was given but cannot be read must not pass as "no PCI view".
        reasons.append("%s The GPU count cannot be cross-checked with PCI. Fix: pass the unmodified output of "
                       "lspci -nnD." % inputs["pci_error"])
    if pci_devices is not None:
        vfs = nvidia_virtual_functions(pci_devices)
        if vfs:
            notes.append("%d SR-IOV virtual function(s) of NVIDIA GPUs (sysfs physfn) are not counted as GPUs: %s"
                         % (len(vfs), _shown([d["pci_bus_id"] for d in vfs], 4)))
        maybe = possible_virtual_functions(pci_devices)
        if maybe:
            notes.append("the PCI count may include SR-IOV virtual functions: %d NVIDIA GPU function(s) sit at a "
                         "PCI function other than 0 (%s), which lspci text cannot tell from GPUs; sysfs "
                         "(pci_sysfs_root) skips VFs by their physfn link" % (len(maybe), _shown(
                             [d["pci_bus_id"] for d in maybe], 4)))

    for gpu in gpus.all():
        if gpu.problems:
            reasons.append("%s is unhealthy: %s" % (gpu.label(), "; ".join(gpu.problems)))

    checks = {"pci_count_matches": None, "device_plugin_count_matches": None, "expected_gpus_matches": None}
    if pci_count is not None and nvidia_smi_count is not None:
        checks["pci_count_matches"] = pci_count == nvidia_smi_count
    if pci_count is not None and nvidia_smi_count is not None and pci_count != nvidia_smi_count:
        missing = []
        smi_buses = set(g.pci_bus_id for g in gpus.all() if g.seen_by_nvidia_smi)
        if smi_buses:
            missing = [d["pci_bus_id"] for d in nvidia_gpus(pci_devices) if d["pci_bus_id"] not in smi_buses]
        reasons.append("PCI shows %d NVIDIA GPUs (class 0302/0300, NVSwitches excluded) but nvidia-smi sees %d%s. "
                       "Fix: check dmesg for the missing GPUs, reseat or reset them." % (
                           pci_count, nvidia_smi_count,
                           ("; not seen by nvidia-smi: %s" % ", ".join(missing)) if missing else ""))

    plugin_count = inputs.get("device_plugin_count")
    plugin_resources = inputs.get("device_plugin_resources")
    if plugin_resources is not None and plugin_count is None:
        try:
            plugin_count = parse_int(plugin_resources.get(GPU_RESOURCE, 0), GPU_RESOURCE)
        except (AttributeError, TypeError, ValueError):
            raise GpuHealthError("device_plugin_resources is not a mapping of counts. Fix: pass the node's "
                                 "allocatable, e.g. {nvidia.com/gpu: 8}.")
    resource_rows = []
    if device_plugin_config is not None or mig_layout is not None:
        resource_rows = _resource_check(gpus, plugin_resources if plugin_resources is not None else (
            None if plugin_count is None else {GPU_RESOURCE: plugin_count}), device_plugin_config, mig_layout,
            nvidia_smi_count if nvidia_smi_seen else pci_count, checks, reasons, notes)
    elif plugin_count is not None:
        reference = pci_count if pci_count is not None else nvidia_smi_count
        acceptable = set()
        if reference is not None:
            acceptable.add(reference)
        mig_total = sum(g.mig_device_count if g.mig_enabled else 1 for g in gpus.all() if g.seen_by_nvidia_smi)
        if any(g.mig_enabled for g in gpus.all()):
            acceptable.add(mig_total)  # MIG "single" strategy exposes one nvidia.com/gpu per MIG device
        if acceptable:
            checks["device_plugin_count_matches"] = plugin_count in acceptable
        if acceptable and plugin_count not in acceptable:
            reasons.append("The device plugin exposes %d nvidia.com/gpu but the node has %s. Fix: restart the "
                           "NVIDIA device plugin pod and check its log for unhealthy devices; with time-slicing, "
                           "renameByDefault or MIG mixed pass device_plugin_config so the count is computed." % (
                               plugin_count, " or ".join(str(v) for v in sorted(acceptable))))
        others = sorted(k for k in (plugin_resources or {}) if str(k).startswith("nvidia.com/") and k != GPU_RESOURCE)
        if others:
            notes.append("The device plugin also exposes %s; pass device_plugin_config to check their counts"
                         % ", ".join(others))

    if expected_gpus is not None:
        checks["expected_gpus_matches"] = all(
            count == expected_gpus for count in (nvidia_smi_count, pci_count) if count is not None
        ) and (nvidia_smi_count is not None or pci_count is not None)
        for label, count in (("nvidia-smi", nvidia_smi_count), ("PCI", pci_count)):
            if count is not None and count != expected_gpus:
                reasons.append("expected_gpus is %d but %s shows %d GPUs. Fix: find the missing GPUs or correct "
                               "expected_gpus for this node." % (expected_gpus, label, count))
        if nvidia_smi_count is None and pci_count is None:
            reasons.append("expected_gpus is %d but no GPU count is available. Fix: provide nvidia-smi or lspci "
                           "output." % expected_gpus)

    if not nvidia_smi_seen and driver_reachable is None:
        reasons.append("No nvidia-smi output was available, so the GPUs cannot be judged. Fix: provide "
                       "nvidia_smi_xml, nvidia_smi_query or nvidia_smi.")

    gpu_list = [g for g in gpus.all() if g.pci_bus_id is not None or g.problems]
    return {
        "gpu_ready": not reasons,
        "reasons": reasons,
        "notes": notes,
        "driver_reachable": bool(driver_reachable),
        "driver_version": driver_version,
        "cuda_version": cuda_version,
        "gpus": [g.as_dict() for g in gpu_list],
        "pci_gpu_count": pci_count,
        "nvidia_smi_gpu_count": nvidia_smi_count,
        "device_plugin_count": plugin_count,
        "device_plugin_resources": resource_rows,
        "expected_gpus": expected_gpus,
        "checks": checks,
        "xid_events": xid_events,
        "sxid_events": kernel["sxid_events"],
        "actions": [
            {"index": g.index, "pci_bus_id": g.pci_bus_id, "uuid": g.uuid, "action": g.action}
            for g in gpu_list
        ],
    }


# ---------------------------------------------------------------------------
# live collection
# ---------------------------------------------------------------------------
def validate_since(value):
    """Check ``xid_since`` (``24h``, ``30min``, ``7d``); return the journalctl form."""
    text = str(value).strip()
    if not _SINCE_RE.match(text):
        raise GpuHealthError("xid_since %r is not a duration. Fix: use a number with s, min, h, d or w, e.g. 24h." % (value,))
    return "-" + text.replace(" ", "")


def check_count(name, value):
    """A GPU count: an int of 0 or more (``True`` is not 1)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GpuHealthError("%s is %r, not a count. Fix: use a whole number of 0 or more (for example 8)."
                             % (name, value))


#: Why a nvidia-smi call gave nothing to judge, and what to do.
_TOOL_FIXES = {
    node_tools.TIMEOUT: "Fix: a GPU or the driver is hung; look for Xid 79/119 in the kernel log, then reset the GPU "
                        "or reboot the node (raise command_timeout only if the node is merely slow).",
    node_tools.UNREADABLE: "Fix: run %s on the node; reinstall the driver if its output stays unreadable.",
    node_tools.FAILED: "Fix: run %s on the node to see why it fails.",
}

_SMI_CALLS = (
    ("nvidia_smi_xml", ["-q", "-x"], parse_query_xml),
    ("nvidia_smi_query", ["-q"], parse_query_text),
    ("nvidia_smi", [], parse_table),
)


def _smi_text(result):
    text = result.stdout or ""
    if result.status != node_tools.OK and result.stderr:
        text += "\n" + result.stderr
    return text


def _collect_nvidia_smi(tools, inputs, sources):
    """Run (or replay) nvidia-smi -q -x, then -q when -q -x gave nothing, then the table.

    A missing binary, a driver that does not answer or a timeout stops the
    sequence (the next call would only wait as long again)."""
    parsed = inputs.setdefault("_parsed", {})
    errors = []
    for key, args, parser in _SMI_CALLS:
        if key == "nvidia_smi_query" and "nvidia_smi_xml" in parsed and tools.source == "live":
            continue  # the XML was read; -q adds nothing
        result = tools.run("nvidia-smi", args, capture_key=key)
        label = "nvidia-smi" + ("" if not args else " " + " ".join(args))
        where = "captured" if result.source == "captured" else "%s (rc=%s)" % (result.command, result.rc)
        if result.status == node_tools.NOT_CAPTURED:
            continue
        if result.status in (node_tools.MISSING, node_tools.NO_DRIVER):
            inputs["driver_error"] = result.message if result.status == node_tools.MISSING else result.detail
            sources[key] = "missing" if result.status == node_tools.MISSING else where
            break
        sources[key] = where
        if result.status == node_tools.TIMEOUT:
            errors.append("%s %s" % (result.message, _TOOL_FIXES[node_tools.TIMEOUT]))
            break
        if result.status == node_tools.UNREADABLE:
            errors.append("%s %s" % (result.message.replace("nvidia-smi", label, 1),
                                     _TOOL_FIXES[node_tools.UNREADABLE] % label))
            continue
        text = _smi_text(result)
        try:
            parsed[key] = parser(text)
        except NvidiaSmiParseError as exc:
            if result.status == node_tools.FAILED:
                errors.append("%s %s" % (result.message.replace("nvidia-smi", label, 1),
                                         _TOOL_FIXES[node_tools.FAILED] % label))
            else:
                errors.append("%s output is unreadable: %s. %s" % (label, exc, _TOOL_FIXES[node_tools.UNREADABLE]
                                                                   % label))
            continue
        inputs[key] = text
    if any(key in parsed for key, _args, _parser in _SMI_CALLS):
        # one readable report is enough to judge; the others' failures are notes
        inputs["tool_notes"] = errors
    elif errors:
        inputs["tool_errors"] = errors


# What systemd's journalctl prints when the caller may not read the system journal, which holds the kernel's
# messages (systemd src/shared/journal-util.c: journal_access_check_and_warn() and access_check_var_log_journal()).
# The hint goes to stderr with rc=0 and entries (the user's own journal) or "-- No entries --" on stdout: the
# journal answered, but not with the kernel log.
JOURNAL_DENIED_LINES = (
    "No journal files were opened due to insufficient permissions",
    "You are currently not seeing messages from the system",
    "You are currently not seeing messages from other users and the system",
)
KERNEL_LOG_FIX = ("Fix: run as root (become: true; compliance_become and preflight run with it), add the remote user "
                  "to the systemd-journal group, or pass kernel_log: a readable file with the kernel log.")


def journal_denied(journal):
    """The line journalctl printed to say it could not read the system journal, or None."""
    for line in ((journal.stderr or "") + "\n" + (journal.stdout or "")).splitlines()[:40]:
        for marker in JOURNAL_DENIED_LINES:
            if marker in line:
                return line.strip().replace("Hint: ", "")[:200]
    return None


def kernel_log_unreadable(source):
    """The error line for a kernel log that ``choose_kernel_log`` could not read (source ``unavailable (...)``)."""
    return "the kernel log cannot be read (%s), so Xids cannot be judged. %s" % (source, KERNEL_LOG_FIX)


def choose_kernel_log(since, journal, journal_text, read_dmesg, incremental=False):
    """Which kernel log a ``kernel_log: auto`` run judges; returns ``(text, source)``.

    The one fallback order of gpu_health's own reader (``_collect_kernel_log``)
    and the readiness agent's incremental reader (module_utils.gpu.kernel_log_state),
    each passing its own reads:

    1. the journal, when it answered (``journal``, a node_tools result) and the
       text it gives (``journal_text``) holds an NVRM line;
    2. else dmesg: ``read_dmesg()`` returns ``(result, text)``; it is called
       only here, so a journal with NVRM lines never runs dmesg;
    3. else, the journal having answered: an empty log, "no NVRM lines";
    4. else an empty log whose source names both failures (``unavailable (...)``);
       the caller must not judge it a clean log (``kernel_log_unreadable``).

    A journal that answered with systemd's "insufficient permissions" hint
    (``journal_denied``) did not answer: the kernel's messages are in the system
    journal, which it could not read.

    ``incremental`` marks the sources of steps 1 and 2 as read incrementally
    (``... (incremental)``, ``dmesg (since boot, incremental)``)."""
    denied = journal_denied(journal) if journal.ok else None
    if journal.ok and not denied and "NVRM" in journal_text:
        return journal_text, "journalctl -k -b --since %s%s" % (since, " (incremental)" if incremental else "")
    dmesg, dmesg_text = read_dmesg()
    if dmesg.ok:
        return dmesg_text, "dmesg (since boot%s)" % (", incremental" if incremental else "")
    if journal.ok and not denied:
        return "", "journalctl -k -b --since %s (no NVRM lines)" % since
    return "", "unavailable (%s; %s)" % ("journalctl: " + denied if denied else journal.message, dmesg.message)


def _collect_kernel_log(tools, kernel_log, since, inputs, sources):
    if tools.source == "captured":
        result = tools.run("journalctl", ["-k", "-b", "--no-pager", "-o", "short-iso", "--since", since],
                           capture_key="kernel_log")
        if result.status != node_tools.NOT_CAPTURED:
            inputs["kernel_log"] = result.stdout
            sources["kernel_log"] = "captured"
        return
    if kernel_log != "auto":
        try:
            data = read_regular(kernel_log, node_tools.MAX_OUTPUT_BYTES)
        except (IOError, OSError) as exc:
            raise GpuHealthError("kernel_log %s cannot be read: %s. Fix: pass a readable file or 'auto'." % (
                kernel_log, exc.strerror or exc))
        inputs["kernel_log"] = node_tools.decode_output(data[-node_tools.MAX_OUTPUT_BYTES:])
        sources["kernel_log"] = kernel_log
        return
    result = tools.run("journalctl", ["-k", "-b", "--no-pager", "-o", "short-iso", "--since", since])

    def read_dmesg():
        dmesg = tools.run("dmesg", [])
        return dmesg, dmesg.stdout

    inputs["kernel_log"], sources["kernel_log"] = choose_kernel_log(since, result, result.stdout, read_dmesg)
    if sources["kernel_log"].startswith("unavailable"):
        inputs["kernel_log_error"] = kernel_log_unreadable(sources["kernel_log"])


def collect(tools, kernel_log="auto", xid_since="24h", sysfs_root="/sys/bus/pci/devices", kernel_log_reader=None):
    """Gather ``evaluate`` inputs through ``tools`` (a ``node_tools.NodeTools``).

    Live, it runs nvidia-smi, lspci (sysfs when lspci fails) and journalctl or
    dmesg (or reads the ``kernel_log`` file); with ``tools.source ==
    'captured'`` the same calls replay ``nvidia_smi_xml``, ``nvidia_smi_query``,
    ``nvidia_smi``, ``lspci`` and ``kernel_log``.  Returns ``(inputs, sources)``;
    ``tools.calls`` holds every call's result.  ``kernel_log_reader`` (live only)
    replaces the kernel-log step, with the same arguments as ``_collect_kernel_log``
    (the readiness agent's incremental reader, module_utils.gpu.kernel_log_state)."""
    since = validate_since(xid_since)
    inputs = {}
    sources = {}
    _collect_nvidia_smi(tools, inputs, sources)

    result = tools.run("lspci", ["-nnD"], capture_key="lspci")
    if result.ok:
        inputs["lspci"] = result.stdout
        sources["pci"] = "captured" if result.source == "captured" else result.command
    elif tools.source == "live":
        if os.path.isdir(sysfs_root):
            inputs["pci_devices"] = read_sysfs_pci_devices(sysfs_root)
            sources["pci"] = sysfs_root
        else:
            sources["pci"] = "unavailable"
    elif result.status == node_tools.UNREADABLE:
        inputs["pci_error"] = result.message
        sources["pci"] = "captured (unreadable)"

    if kernel_log_reader is not None and tools.source == "live":
        kernel_log_reader(tools, kernel_log, since, inputs, sources)
    else:
        _collect_kernel_log(tools, kernel_log, since, inputs, sources)
    return inputs, sources
