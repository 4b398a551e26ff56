# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""A node's MIG state read, planned and applied through ``NodeTools``.

One planning path for ``mig_config`` (read-only) and ``mig_layout`` (apply):

* ``discover(query)`` / ``resolve(given, geometry, query)``: the GPUs to plan
  for, discovered with ``nvidia-smi -q -x`` or given; a given GPU the node
  does not have is an error.
* ``read_actual(tools, query)``: the MIG state (``-q -x``, ``mig -lgi``, ``-lci``).
* ``plan_node(...)``: evaluation, actual state, drift and per-GPU plan.
* ``Applier``: carries a plan out with ``nvidia-smi`` at the planned
  placements, phase by phase (destroy, MIG mode, pending reset, create), and
  knows at every point which GPUs it has changed.

Every failure is a ``MigNodeError`` with one line (cause and fix) and the
facts a module returns with it.

Standard library only; Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_geometry import (
    GeometryError,
    GeometryIndex,
    merge_geometry,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_placement import PlacementCache, resolve_gpus
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_plan import actual_state, compare, evaluate
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_tables import (
    MigParseError,
    is_empty_answer,
    parse_lci,
    parse_lgi,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import FAILED, NOT_CAPTURED, OK
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_smi import (
    NvidiaSmiParseError,
    parse_query_csv,
    parse_query_xml,
)

NVIDIA_SMI = "nvidia-smi"
MIG_PARTED = "nvidia-mig-parted"
FIX_LAYOUT = ("Fix: change the layouts named in errors (placements per model: nvidia-smi mig -lgipp, "
              "docs/mig.md) or select a config meant for this node's GPUs.")
FIX_DRIVER = "Fix: check the driver with nvidia-smi on the node."


#: GPUs one node holds at most (an HGX board has 8, the largest nodes 16): more in ``gpus`` or in nvidia-smi's
#: answer is not one node, and planning 10,000 GPUs took 30-50 s and printed 11 MB.
MAX_NODE_GPUS = 64


class MigNodeError(FleetError):
    """One line for fail_json, and the facts to return with it."""

    def __init__(self, msg, **facts):
        FleetError.__init__(self, msg)
        self.msg = msg
        self.facts = facts


def _last_line(result):
    lines = [line.strip() for line in (result.stdout + "\n" + result.stderr).splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def step_text(tool, args):
    return " ".join([tool] + [str(a) for a in args])


def load_geometry(overrides):
    try:
        return merge_geometry(overrides)
    except GeometryError as exc:
        raise MigNodeError("geometry is invalid: %s. Fix: correct the override (see the geometry option)." % exc)


def query_xml(tools):
    """``nvidia-smi -q -x`` parsed, or MigNodeError."""
    result = tools.run(NVIDIA_SMI, ["-q", "-x"], capture_key="nvidia_smi_xml")
    if not result.ok:
        raise MigNodeError("%s %s" % (result.message.rstrip("."), ". Fix: install or repair the NVIDIA driver utilities, "
                                      "set nvidia_smi, or pass gpus (and captured) to work offline."))
    try:
        return parse_query_xml(result.stdout)
    except NvidiaSmiParseError as exc:
        raise MigNodeError("nvidia-smi -q -x output cannot be read: %s. Fix: check the driver (nvidia-smi -q -x) "
                           "or pass gpus." % exc)


def discover(query):
    """The ``gpus`` list (index, device_id or product, pci_bus_id) of a parsed ``-q -x``."""
    given = []
    for gpu in query["gpus"]:
        item = {"index": gpu["index"], "pci_bus_id": gpu.get("pci_bus_id"), "product": gpu.get("product")}
        if gpu.get("pci_device_id"):
            item["device_id"] = gpu["pci_device_id"]
        given.append(item)
    return given


def resolve(given, geometry, query=None, what="gpus"):
    """Resolved GPUs for ``given``; a GPU the node (``query``) lacks is an error, and so are more than MAX_NODE_GPUS."""
    if len(given) > MAX_NODE_GPUS:
        raise MigNodeError("%s lists %d GPUs, more than the %d a node holds. Fix: %s." % (
            what, len(given), MAX_NODE_GPUS, "list the GPUs of one node (nvidia-smi -L)" if what == "gpus" else
            "check the driver with nvidia-smi -L on the node"))
    gpus, errors = resolve_gpus(given, GeometryIndex(geometry))
    if errors:
        raise MigNodeError("gpus is invalid: %s. Fix: give each GPU an index and a device_id or product."
                           % "; ".join(errors), errors=errors)
    if query is not None:
        present = dict((g["index"], g) for g in query["gpus"])
        missing = [g["index"] for g in gpus if g["index"] not in present]
        if missing:
            raise MigNodeError(
                "gpus names GPU %s but the node has GPU%s %s. Fix: list only the node's GPUs, or leave gpus out to "
                "use what nvidia-smi finds." % (
                    ", ".join(str(i) for i in missing), "s" if len(present) != 1 else "",
                    ", ".join(str(i) for i in sorted(present)) or "none"))
        for gpu in gpus:
            if not gpu.get("pci_bus_id"):
                gpu["pci_bus_id"] = present[gpu["index"]].get("pci_bus_id")
    return gpus


def _table(tools, key, args, parser, any_mig):
    result = tools.run(NVIDIA_SMI, args, capture_key=key)
    if result.status == NOT_CAPTURED and not any_mig:
        return []
    if result.status == FAILED and is_empty_answer(result.stdout + "\n" + result.stderr):
        return []
    if not result.ok:
        raise MigNodeError("%s %s" % (result.message.rstrip("."), FIX_DRIVER))
    if not any_mig and is_empty_answer(result.stdout):
        return []
    try:
        return parser(result.stdout)
    except MigParseError as exc:
        raise MigNodeError("%s. Fix: check nvidia-smi mig -lgi/-lci on the node." % exc)


def read_actual(tools, query):
    """The node's MIG state per GPU index (see ``mig_plan.actual_state``)."""
    any_mig = any(str(g.get("mig_mode") or "").lower() == "enabled" for g in query["gpus"])
    gi_rows = ci_rows = []
    if any_mig or tools.captured.get("mig_lgi") is not None:
        gi_rows = _table(tools, "mig_lgi", ["mig", "-lgi"], parse_lgi, any_mig)
    if any_mig or tools.captured.get("mig_lci") is not None:
        ci_rows = _table(tools, "mig_lci", ["mig", "-lci"], parse_lci, any_mig)
    return actual_state(query["gpus"], gi_rows, ci_rows)


def plan_node(tools, config, select, given, geometry, mig_strategy=None, compare_state=True):
    """Evaluate ``config`` for the node and, with ``compare_state``, compare it with the actual state.

    Returns ``{gpus, evaluation, query, actual, drift, plan}`` (the last
    four only with ``compare_state``).  Raises MigNodeError.
    """
    query = None
    what = "gpus"
    if given is None or compare_state:
        query = query_xml(tools)
        if given is None:
            given, what = discover(query), "nvidia-smi -q -x"
            if not given:
                raise MigNodeError("nvidia-smi -q -x lists no GPUs. Fix: check the driver, or pass gpus to validate "
                                   "offline.")
    gpus = resolve(given, geometry, query, what)
    evaluation = evaluate(config, gpus, geometry=geometry, select=select, mig_strategy=mig_strategy,
                          cache=PlacementCache(geometry))
    out = {"gpus": gpus, "evaluation": evaluation, "query": query}
    if not compare_state:
        return out
    if not evaluation["valid"] or select not in evaluation["configs"]:
        errors = evaluation["errors"]
        raise MigNodeError("config %s is invalid, so there is nothing to compare against: %s%s. %s" % (
            select, errors[0] if errors else "unknown",
            " (and %d more)" % (len(errors) - 1) if len(errors) > 1 else "", FIX_LAYOUT),
            valid=False, errors=errors, configs=evaluation["configs"], gpus=gpus)
    actual = read_actual(tools, query)
    drift, plan = compare(evaluation["configs"][select], actual, gpus)
    known = set(g["index"] for g in gpus)
    out.update(actual=actual, drift=drift, plan=plan,
               actual_report=dict((str(k), v) for k, v in sorted(actual.items()) if k in known))
    return out


# --------------------------------------------------------------------------
# Before/after text for diffs
# --------------------------------------------------------------------------

def _instances_text(instances):
    return ", ".join("%s@%d" % (i["profile"], i["start"]) for i in sorted(instances, key=lambda i: i["start"])) or "no instances"


def layout_lines(gpus, actual=None, plan=None):
    """One line per GPU: its MIG mode and instances, now (``actual``) or after ``plan``."""
    planned = dict((item["index"], item) for item in plan or [])
    lines = []
    for gpu in gpus:
        label = "GPU %d (%s)" % (gpu["index"], gpu["model"] or "not MIG-capable")
        state = (actual or {}).get(gpu["index"]) or {}
        enabled = str(state.get("mig_mode") or "").lower() == "enabled"
        instances = state.get("instances") or []
        if gpu["index"] in planned:
            enabled = planned[gpu["index"]]["mig_enabled"]
            instances = planned[gpu["index"]]["instances"]
        elif plan is None:
            pending = state.get("mig_mode_pending")
            if pending and pending != state.get("mig_mode"):
                label += " [pending %s]" % pending
        if enabled:
            lines.append("%s: MIG enabled: %s" % (label, _instances_text(instances)))
        else:
            lines.append("%s: MIG disabled" % label)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Clients of the GPUs
# --------------------------------------------------------------------------

def compute_apps(tools, query):
    """``{gpu index: ["pid (name)", ...]}`` of the compute processes on the node's GPUs."""
    fields = ["gpu_bus_id", "pid", "process_name"]
    result = tools.run(NVIDIA_SMI, ["--query-compute-apps=%s" % ",".join(fields), "--format=csv,noheader"],
                       capture_key="compute_apps")
    if result.status == NOT_CAPTURED:
        return {}
    if not result.ok:
        raise MigNodeError("%s %s" % (result.message.rstrip("."), FIX_DRIVER))
    try:
        rows = parse_query_csv(result.stdout, fields)
    except NvidiaSmiParseError as exc:
        raise MigNodeError("nvidia-smi --query-compute-apps output cannot be read: %s. %s" % (exc, FIX_DRIVER))
    by_bus = dict((_bus_key(g.get("pci_bus_id")), g["index"]) for g in query["gpus"])
    apps = {}
    for row in rows:
        index = by_bus.get(_bus_key(row.get("gpu_bus_id")))
        if index is not None:
            apps.setdefault(index, []).append("%s (%s)" % (row.get("pid"), row.get("process_name") or "?"))
    return apps


def _bus_key(text):
    parts = str(text or "").lower().replace(".", ":").split(":")
    try:
        return tuple(int(p, 16) for p in parts[-3:])
    except ValueError:
        return None


# --------------------------------------------------------------------------
# Applying a plan with nvidia-smi
# --------------------------------------------------------------------------

class Applier:
    """Carries out a ``compare`` plan, phase by phase, recording what it changed."""

    def __init__(self, tools, plan):
        self.tools = tools
        self.plan = plan
        self.changed_gpus = []
        self.steps = []

    def _run(self, gpu_index, args, empty_ok=False):
        result = self.tools.run(NVIDIA_SMI, args)
        text = step_text(NVIDIA_SMI, args)
        if result.status == FAILED and empty_ok and is_empty_answer(result.stdout + "\n" + result.stderr):
            self.steps.append({"command": text, "result": "nothing to do"})
            return result
        if result.status != OK:
            self.steps.append({"command": text, "result": result.status})
            detail = _last_line(result) if result.status == FAILED else result.message.rstrip(".")
            raise self.failure("%s: %s" % (text, detail), gpu_index)
        self.steps.append({"command": text, "result": "ok"})
        for index in gpu_index if isinstance(gpu_index, list) else [gpu_index]:
            if index not in self.changed_gpus:
                self.changed_gpus.append(index)
        return result

    def failure(self, cause, gpu_index):
        planned = [item["index"] for item in self.plan]
        changed = sorted(self.changed_gpus)
        untouched = [i for i in planned if i not in changed]
        failed = gpu_index if isinstance(gpu_index, list) else [gpu_index]
        return MigNodeError(
            "%s. GPUs changed before the failure: %s; not changed: %s. Fix: resolve the cause on GPU %s "
            "(stop what holds it), then run again; the plan is recomputed from the GPUs' actual state."
            % (cause, ", ".join(str(i) for i in changed) or "none", ", ".join(str(i) for i in untouched) or "none",
               ",".join(str(i) for i in failed)),
            changed=bool(changed), changed_gpus=changed, untouched_gpus=untouched, failed_gpus=failed,
            steps=self.steps)

    def destroy(self):
        for item in self.plan:
            if item["destroy"]:
                self._run(item["index"], ["mig", "-i", str(item["index"]), "-dci"], empty_ok=True)
                self._run(item["index"], ["mig", "-i", str(item["index"]), "-dgi"], empty_ok=True)

    def modes(self):
        for item in self.plan:
            if item["mode_change"]:
                self._run(item["index"], ["-i", str(item["index"]), "-mig", "1" if item["mig_enabled"] else "0"])

    def pending(self, allow_reset):
        """GPUs whose MIG mode change still waits for a reset (reset them when allowed)."""
        wanted = [item for item in self.plan if item["mode_change"]]
        if not wanted:
            return []
        waiting = self._waiting(wanted)
        if not waiting:
            return []
        if not allow_reset:
            raise self.failure("the MIG mode change on GPU %s is pending a GPU reset and gpu_reset is false"
                               % ", ".join(str(i) for i in waiting), waiting)
        args = ["-i", ",".join(str(i) for i in waiting), "-r"]
        result = self.tools.run(NVIDIA_SMI, args)
        self.steps.append({"command": step_text(NVIDIA_SMI, args), "result": result.status,
                           "detail": _last_line(result)})
        return self._waiting(wanted)

    def _waiting(self, wanted):
        query = query_xml(self.tools)
        modes = dict((g["index"], g) for g in query["gpus"])
        waiting = []
        for item in wanted:
            gpu = modes.get(item["index"]) or {}
            want = "enabled" if item["mig_enabled"] else "disabled"
            if str(gpu.get("mig_mode") or "").lower() != want:
                waiting.append(item["index"])
        return waiting

    def create(self, skip=()):
        for item in self.plan:
            if item["mig_enabled"] and item["create"] and item["index"] not in skip:
                self._run(item["index"], ["mig", "-i", str(item["index"]), "-cgi", item["create"], "-C"])
