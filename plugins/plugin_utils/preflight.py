# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""The preflight verdict: gate results in, a join decision, node annotations and metrics out.

Kept in Python (and exposed as filters) so that the role's YAML only moves
data: which gates are required, what a skipped gate means, how the reasons
are worded and how the metrics look are decided here, once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import fixed_width_table, squash
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import parse_int
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.plain_data import to_plain
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import device_plugin_config as shared_plugin_config
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import cordon_ownership
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import upgrade
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.device_counts import (
    MIG_ANY,
    MIG_PREFIX,
    DeviceCountError,
    expected_resources as plugin_expected_resources,
)

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


#: The node label the device plugin's config-manager selects a config by (roles/device_plugin_config).
PLUGIN_CONFIG_LABEL = shared_plugin_config.NODE_LABEL
#: Keys of the device plugin settings the collection renders (roles/device_plugin_config, one node class).
PLUGIN_CLASS_KEYS = ("mig_strategy", "time_slicing_resources", "time_slicing_rename_by_default")
PLUGIN_SETTING_KEYS = PLUGIN_CLASS_KEYS + ("classes", "node_classes", "default_name", "label")
#: NVML's compute instance profile ids by compute slices (nvml.h, NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE):
#: a GPU instance whose one compute instance has the id for all of its slices is one MIG device named after
#: the GPU instance profile (nvidia.com/mig-1g.10gb); a smaller compute instance gets another name.
FULL_COMPUTE_INSTANCE_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
_SLICES_RE = re.compile(r"^(\d+)g\.")


class PreflightError(FleetError):
    """Gate results that cannot be judged (a caller mistake)."""


def gate_result(gate, status, reasons=None, duration_s=0.0, details=None):
    """One gate's result in the shape every consumer reads."""
    if gate not in GATES:
        raise PreflightError("unknown gate %r (gates: %s)" % (gate, ", ".join(GATES)))
    if status not in STATUSES:
        raise PreflightError("gate %s has the status %r (pass, fail or skip)" % (gate, status))
    if isinstance(reasons, (str, int, float)) and not isinstance(reasons, bool):
        reasons = [reasons]  # one reason given as text: one reason, never one per character
    elif reasons is not None and not isinstance(reasons, (list, tuple)):
        raise PreflightError("gate %s: reasons is %s, not a list of texts" % (gate, type(reasons).__name__))
    reasons = [_short(reason) for reason in (reasons or []) if str(reason).strip()]
    if status == FAIL and not reasons:
        reasons = ["failed without a reason (report this as a bug)"]
    if details is not None and not isinstance(details, dict):
        raise PreflightError("gate %s: details is %s, not a mapping" % (gate, type(details).__name__))
    return {"gate": gate, "status": status, "reasons": reasons, "duration_s": _seconds(duration_s, gate),
            "details": details or {}}


def _seconds(value, gate):
    """A gate's duration: a finite number of seconds >= 0 (``None`` is 0)."""
    if value is None:
        return 0.0
    try:
        seconds = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        seconds = None
    if seconds is None or math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise PreflightError("gate %s: duration_s is %s, not a number of seconds" % (gate, _short(repr(value))))
    return round(seconds, 3)


def _short(text):
    return squash(text, MAX_REASON_CHARS, fit=True)


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


def _truthy(value):
    return value is True or str(value).strip().lower() in ("true", "yes", "on", "1")


def device_plugin_config(settings, node_name=None, node_labels=None):
    """``(config, name)``: the device plugin config (api v1) the collection rendered for this node.

    ``settings`` holds roles/device_plugin_config's variables without their
    prefix (see ``PLUGIN_SETTING_KEYS``); a None value is unset.  ``(None, None)``
    when none of ``mig_strategy``, ``time_slicing_resources`` and ``classes`` is
    set: the collection did not configure the plugin, which then runs with its
    defaults (migStrategy none, no sharing).  The node's config is the one its
    ``nvidia.com/device-plugin.config`` label names, else
    ``node_classes[node_name]``, else the default config, as the plugin's
    config-manager picks it.  Only the settings that change counts are read.
    """
    settings = settings or {}
    if not isinstance(settings, dict):
        raise PreflightError("preflight_device_plugin is not a mapping. Fix: give it as a mapping of %s."
                             % ", ".join(PLUGIN_SETTING_KEYS))
    unknown = sorted(str(key) for key in settings if key not in PLUGIN_SETTING_KEYS)
    if unknown:
        raise PreflightError("preflight_device_plugin.%s is not a known key. Fix: use %s."
                             % (unknown[0], ", ".join(PLUGIN_SETTING_KEYS)))
    if all(settings.get(key) in (None, "", [], {}) for key in ("mig_strategy", "time_slicing_resources", "classes")):
        return None, None
    for key in ("classes", "node_classes"):
        if settings.get(key) not in (None, "") and not isinstance(settings.get(key), dict):
            raise PreflightError("preflight_device_plugin.%s is not a mapping. Fix: give device_plugin_config_%s as "
                                 "a mapping." % (key, key))
    # Only the settings that change counts are passed on; a class may still set the others, which the shared
    # code checks as the device_plugin_config role does.
    base = dict((key, settings.get(key)) for key in PLUGIN_CLASS_KEYS if settings.get(key) is not None)
    base.setdefault("mig_strategy", "none")
    try:
        return shared_plugin_config.node_config(
            base, settings.get("classes") or {}, settings.get("default_name") or "default",
            settings.get("node_classes") or {}, node_name, node_labels, settings.get("label") or PLUGIN_CONFIG_LABEL)
    except shared_plugin_config.DevicePluginConfigError as exc:
        raise PreflightError(str(exc))


def mig_devices_per_profile(actual):
    """``({profile: count}, [why])``: the MIG devices of a node by profile, from mig_config's ``actual``.

    ``actual`` maps each GPU index to ``{mig_mode, instances: [{profile,
    compute_instances: [{profile_id}]}]}`` (``nvidia-smi -q -x``, ``mig -lgi``,
    ``mig -lci``).  A GPU instance with one compute instance spanning it is one
    device of its profile; a GPU instance without a compute instance is no
    device.  Anything else (smaller compute instances, ``+me`` profiles, whose
    resource names this collection has not confirmed) goes to ``why`` and the
    per-profile counts are not given.
    """
    if not isinstance(actual, dict):
        raise PreflightError("the node's MIG state is not a mapping of GPU index to state")
    layout = {}
    why = []
    for index in sorted(actual, key=str):
        gpu = actual[index] or {}
        if str(gpu.get("mig_mode") or "").lower() != "enabled":
            continue
        for instance in gpu.get("instances") or []:
            profile = str(instance.get("profile") or "")
            computes = instance.get("compute_instances") or []
            if not computes:
                continue
            match = _SLICES_RE.match(profile)
            full = FULL_COMPUTE_INSTANCE_PROFILE.get(int(match.group(1))) if match else None
            if "+" in profile or full is None:
                why.append("GPU %s has a MIG %s instance, whose device plugin resource name is not confirmed here"
                           % (index, profile or "(unnamed)"))
            elif len(computes) != 1 or computes[0].get("profile_id") != full:
                why.append("GPU %s instance %s (%s) is split into smaller compute instances, which the plugin names "
                           "<c>c.%s" % (index, instance.get("gpu_instance_id"), profile, profile))
            else:
                layout[profile] = layout.get(profile, 0) + 1
    return layout, why


def _count(value, what):
    if value is None:
        return None
    if isinstance(value, bool):
        raise PreflightError("%s is %r, not a count" % (what, value))
    try:
        return parse_int(value if isinstance(value, int) else str(value), what, signed=True)
    except ValueError:
        raise PreflightError("%s is %r, not a count" % (what, value))


def expected_allocatable(gpus=None, gpu_count=None, plugin_settings=None, mig_state=None, node_name=None,
                         node_labels=None):
    """The node's expected allocatable, by the field-truth counting rule (module_utils/gpu/device_counts.py).

    ``gpus``: gpu_health's GPUs (``index``, ``mig_enabled``, ``mig_devices``);
    ``gpu_count``: the GPUs nvidia-smi counts (pads ``gpus`` when it reports
    more); ``plugin_settings``: see ``device_plugin_config``; ``mig_state``:
    mig_config's result in compare mode (its ``actual``), which names the MIG
    devices per profile for ``migStrategy: mixed``; without it (or when it
    cannot name them) the MIG devices are counted as one total over every
    ``nvidia.com/mig-*`` resource.

    Returns ``{expected, unknown, refused, notes, strategy, config, basis}``:
    ``basis`` is a short text saying how the counts were made; ``refused`` says why
    the device plugin cannot start with this config on these GPUs (no count is then expected).
    """
    listed = []
    for position, gpu in enumerate(gpus or []):
        if not isinstance(gpu, dict):
            raise PreflightError("gpus[%d] is not a mapping" % position)
        if gpu.get("index") is None:
            continue  # named by the kernel log only: nvidia-smi does not list it
        listed.append({"mig_enabled": _truthy(gpu.get("mig_enabled")),
                       "mig_devices": _count(gpu.get("mig_devices") or 0, "gpus[%d].mig_devices" % position)})
    gpu_count = _count(gpu_count, "gpu_count")
    if gpu_count is not None and gpu_count > len(listed):
        listed += [{"mig_enabled": None, "mig_devices": 0}] * (gpu_count - len(listed))
    if not listed:
        return {"expected": {}, "unknown": {}, "strategy": None, "config": None, "basis": "no GPU facts",
                "notes": ["no GPU facts (the hardware gate did not run): allocatable is not compared"]}
    config, chosen = device_plugin_config(plugin_settings, node_name, node_labels)
    notes = []
    strategy = ((config or {}).get("flags") or {}).get("migStrategy", "none")
    mig_gpus = [gpu for gpu in listed if gpu["mig_enabled"]]
    layout = None
    if strategy == "mixed" and mig_gpus:
        if isinstance(mig_state, dict) and mig_state.get("failed"):
            notes.append("the MIG instances per profile could not be read (%s): the MIG devices are counted as a total"
                         % " ".join(str(mig_state.get("msg") or "no message").split()))
        elif isinstance(mig_state, dict) and isinstance(mig_state.get("actual"), dict):
            layout, why = mig_devices_per_profile(mig_state["actual"])
            if why:
                notes.extend(why)
                notes.append("the MIG devices are counted as a total over nvidia.com/mig-*")
                layout = None
        else:
            notes.append("no MIG layout is assigned to the node (mig_config_name): the MIG devices are counted as a "
                         "total over nvidia.com/mig-*")
    if strategy == "single" and mig_gpus and isinstance(mig_state, dict) and isinstance(mig_state.get("actual"), dict):
        # single counts every MIG device as nvidia.com/gpu; the profile only names GFD's gpu.product
        layout, why = mig_devices_per_profile(mig_state["actual"])
        layout = None if why else layout
    try:
        result = plugin_expected_resources(config, listed, layout if strategy == "mixed" else None)
    except DeviceCountError as exc:
        raise PreflightError(str(exc))
    mig_total = sum(gpu["mig_devices"] for gpu in mig_gpus)
    parts = ["%d GPU(s)" % len(listed)]
    if mig_gpus:
        parts.append("%d MIG device(s)%s" % (mig_total, " (%s)" % ", ".join(
            "%dx %s" % (count, profile) for profile, count in sorted(layout.items())) if layout else ""))
    parts.append("migStrategy %s" % strategy)
    if config and config.get("sharing"):
        parts.append("time-slicing")
    parts.append("device plugin config %s" % chosen if chosen else "the plugin's defaults")
    return {"expected": result["expected"], "unknown": result["unknown"], "refused": result.get("refused"),
            "notes": notes + result["notes"],
            "strategy": strategy, "config": chosen, "basis": "counted from " + ", ".join(parts),
            "plugin_config": config, "gpus": listed, "mig_layout": layout}


# --- GPU feature discovery labels ------------------------------------------------------------------------------
# NVIDIA/k8s-device-plugin v0.20.0 (commit 1b826acc), internal/lm/resource.go and internal/lm/mig-strategy.go.
_GFD_UNSAFE_RE = re.compile(r"[^A-Za-z0-9\-_. ]")
GFD_REPLICAS = "nvidia.com/gpu.replicas"


def gfd_sanitise(text):
    """GFD's name sanitiser (internal/lm/resource.go ``sanitise`` at v0.20.0): drop every character outside
    ``[A-Za-z0-9-_. ]``, then join the words with ``-`` (runs of spaces collapse)."""
    return "-".join(_GFD_UNSAFE_RE.sub("", str(text)).split())


def _gfd_sharing(config):
    """``(replicas, renamed)`` of ``nvidia.com/gpu`` in the config's time-slicing or MPS block (0, False: none)."""
    sharing = (config or {}).get("sharing") or {}
    for kind in ("timeSlicing", "mps"):
        block = sharing.get(kind) or {}
        for resource in block.get("resources") or []:
            if isinstance(resource, dict) and resource.get("name") == "nvidia.com/gpu":
                replicas = _count(resource.get("replicas") or 0, "sharing.%s.resources.replicas" % kind) or 0
                # api/config/v1/replicas.go: renameByDefault gives every resource a rename
                renamed = bool(resource.get("rename")) or _truthy(block.get("renameByDefault"))
                return replicas, renamed
    return 0, False


def gfd_expected_labels(product, gpus, config, mig_layout=None):
    """``({label: (value, how)}, [notes])``: what GFD labels the node with, by the device plugin's counting rule.

    ``how`` is ``exact``, or ``prefix`` when the MIG profile is not known.  ``gpus``: ``[{mig_enabled,
    mig_devices}]`` (nvidia-smi); ``config``: the device plugin config (api v1); ``mig_layout``:
    ``{profile: count}`` when known.  As GFD v0.20.0 does it:

    * ``none`` and ``mixed``: ``gpu.count`` is the number of physical GPUs (MIG-enabled ones included);
    * ``single`` with every GPU in MIG mode, none empty and one profile: ``gpu.count`` is the number of MIG
      devices and ``gpu.product`` ``<model>-MIG-<profile>``; a MIG-on/MIG-off mix, an empty MIG GPU or two
      profiles give ``<model>-MIG-INVALID`` and count 0 (and the plugin itself refuses a mix: internal/rm/device_map.go);
    * time-slicing or MPS with replicas > 1 on ``nvidia.com/gpu``: ``-SHARED`` is appended unless the resource is
      renamed, ``gpu.replicas`` is the replicas; the count stays physical;
    * the model is sanitised (``gfd_sanitise``).
    """
    notes = []
    labels = {}
    if product is None or not gpus:
        return labels, notes
    model = gfd_sanitise(product)
    strategy = (((config or {}).get("flags") or {}).get("migStrategy")) or "none"
    replicas, renamed = _gfd_sharing(config)
    shared = replicas > 1 and not renamed
    mig = [gpu for gpu in gpus if gpu.get("mig_enabled")]
    full = [gpu for gpu in gpus if not gpu.get("mig_enabled")]
    profiles = sorted(profile for profile, count in (mig_layout or {}).items() if count)
    product_value, how, count = model + ("-SHARED" if shared and (full or strategy == "none") else ""), "exact", len(gpus)
    if strategy == "single" and mig:
        if full or any(not gpu.get("mig_devices") for gpu in mig) or len(profiles) > 1:
            product_value, count = model + "-MIG-INVALID", 0
            # padded GPUs (nvidia-smi counts them, does not describe them) have mig_enabled None: not known to be off
            refusal = (" and the device plugin refuses to start (all devices must have the same migEnabled value)"
                       if any(gpu.get("mig_enabled") is False for gpu in full) else "")
            notes.append("migStrategy single needs every GPU in MIG mode with one profile and no empty GPU: GFD "
                         "labels the node %s-MIG-INVALID%s" % (model, refusal))
        else:
            count = sum(int(gpu.get("mig_devices") or 0) for gpu in mig)
            if profiles:
                product_value = "%s-MIG-%s%s" % (model, gfd_sanitise(profiles[0]), "-SHARED" if shared else "")
            else:
                product_value, how = model + "-MIG-", "prefix"
                notes.append("the MIG profile is not known (no mig_config_name): only the prefix %s-MIG- of "
                             "nvidia.com/gpu.product is compared" % model)
    labels[GFD_PRODUCT] = (product_value, how)
    labels[GFD_COUNT] = (str(count), "exact")
    if config and config.get("sharing") and count:
        labels[GFD_REPLICAS] = (str(replicas if replicas > 0 else 1), "exact")
    return labels, notes


def _mig_total(allocatable):
    total = 0
    for resource, value in allocatable.items():
        if str(resource).startswith(MIG_PREFIX):
            count = _resource_value(value)
            if count is None:
                return None
            total += count
    return total


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


def kubernetes_gate(node, pods, expected_resources, facts, plugin_selector_text="device plugin", unknown=None,
                    basis=None, gfd_labels=None, refused=None):
    """Judge the node object, the device-plugin pods on it, and the GFD labels against the node's facts.

    ``expected_resources``: ``{"nvidia.com/gpu": 8}`` (or MIG / shared
    resources; ``nvidia.com/mig-*`` is the total over every MIG resource).
    When it names a MIG profile, any other ``nvidia.com/mig-*`` resource the
    node offers is expected to be 0.  ``unknown``: ``{resource: why}`` whose
    count cannot be known (the gate fails and says to set the override);
    ``refused``: why the device plugin cannot start on this node (the gate
    fails with it; no allocatable count is expected);
    ``basis``: how the counts were made, appended to a count reason.
    ``gfd_labels``: ``gfd_expected_labels()``'s labels, the GFD labels the
    same counting rule expects (MIG strategy, sharing, rename); without them
    the product is compared as a prefix and the count with ``gpu_count``.
    ``facts``: ``gpu_product``, ``gpu_count``, ``mig_capable``
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
    why = " (%s)" % basis if basis else ""
    expected_resources = expected_resources or {}
    for resource, expected in sorted(expected_resources.items()):
        if resource == MIG_ANY:
            actual = shown = _mig_total(allocatable)
        else:
            actual = _resource_value(allocatable.get(resource, "0"))
            shown = allocatable.get(resource, 0)
        counts[resource] = {"expected": expected, "actual": actual}
        if actual != expected:
            reasons.append("allocatable %s is %s, expected %s%s" % (resource, shown, expected, why))
    if any(str(resource).startswith(MIG_PREFIX) and resource != MIG_ANY for resource in expected_resources):
        for resource in sorted(allocatable):
            if str(resource).startswith(MIG_PREFIX) and resource not in expected_resources:
                actual = _resource_value(allocatable[resource])
                if actual != 0:
                    counts[resource] = {"expected": 0, "actual": actual}
                    reasons.append("allocatable %s is %s, expected 0%s" % (resource, allocatable[resource], why))
    if refused:
        reasons.append(str(refused))
    for resource, cause in sorted((unknown or {}).items()):
        counts[resource] = {"expected": None, "actual": _resource_value(allocatable.get(resource, "0"))}
        reasons.append("the expected allocatable %s is unknown: %s. Fix: set preflight_expected_resources for this "
                       "node" % (resource, cause))
    checks = []
    if gfd_labels is not None:
        for key, (expected, how) in sorted(gfd_labels.items()):
            checks.append((key, expected, how))
    else:
        # no counting rule (no device plugin facts): the physical count, the product at least as a prefix
        if facts.get("gpu_product") is not None:
            checks.append((GFD_PRODUCT, gfd_sanitise(facts["gpu_product"]), "prefix"))
        if facts.get("gpu_count") is not None:
            checks.append((GFD_COUNT, str(facts["gpu_count"]), "exact"))
    if facts.get("mig_capable") is not None:
        checks.append((GFD_MIG_CAPABLE, "true" if facts["mig_capable"] else "false", "exact"))
    for key, expected, how in checks:
        if key not in labels:
            reasons.append("GPU feature discovery label %s is missing" % key)
        elif labels[key] != expected and not (how == "prefix" and labels[key].startswith(expected)):
            if gfd_labels is not None:
                reasons.append("label %s is %s, expected %s%s" % (key, labels[key], expected, why))
            else:
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


#: A check skipped inside a passing gate is a note; these prefixes say which check it was.
SKIP_NOTE_PREFIX = {"gpu_bandwidth": "bandwidth check skipped: "}
#: The statuses of the check-result contract (module_utils/_common/check_result.py).
CHECK_STATUSES = check_result.STATUSES


def gate_from_checks(gate, checks):
    """``(status, reasons)`` of a gate from its checks' results (the check-result contract).

    ``checks`` maps a check's name (its module: ``gpu_health``, ``dcgm_diag``...) to what the module returned.
    A task Ansible skipped (``skipped`` and no ``status``) was not asked for and counts for nothing. A failed or
    errored check fails the gate with its reasons (a failing gate lists only what failed, as the node annotation
    shows them); when every check that ran skipped, the gate is a skip with their reasons; otherwise it passes and
    the reasons of the skipped checks (and any notes of passed ones) stay as notes.
    """
    if not isinstance(checks, dict):
        raise PreflightError("gate %s: the checks are %s, not a mapping of check name to result"
                             % (gate, type(checks).__name__))
    failing, skipped, notes, passed = [], [], [], 0
    for name in list(checks):
        outcome = checks[name]
        if not isinstance(outcome, dict):
            failing.append("%s returned %s, not a check result (report this as a bug)" % (name, _short(repr(outcome))))
            continue
        if "status" not in outcome and outcome.get("skipped"):
            continue  # the task did not run (its when was false): nothing was asked of it
        status = outcome.get("status")
        reasons = outcome.get("reasons")
        if isinstance(reasons, str):
            reasons = [reasons]
        if status not in CHECK_STATUSES or not isinstance(reasons, list):
            failing.append("%s returned no status and reasons (the check-result contract; report this as a bug)"
                           % name)
            continue
        reasons = [str(reason) for reason in reasons if str(reason).strip()]
        if status in ("fail", "error"):
            failing.extend(reasons or ["%s: %s without a reason" % (name, status)])
        elif status == "skip":
            skipped.extend(SKIP_NOTE_PREFIX.get(name, "") + reason for reason in reasons)
        else:
            passed += 1
            notes.extend(reasons)
    if failing:
        return FAIL, failing
    if not passed:
        return SKIP, skipped or ["no check of the gate %s ran" % gate]
    return PASS, notes + skipped


OUTCOMES = ("joined", "left_cordoned", "cordoned", "already_joined", "skipped", "not_run")


def outcome(decision, owned=True, uncordon_on_pass=True):
    """What happens to the node: ``cordoned`` (failed: kept cordoned, labelled failed), ``joined`` (passed and
    this run holds the cordon: uncordoned) or ``left_cordoned`` (passed, but the cordon is someone else's or
    ``uncordon_on_pass`` is false)."""
    if not decision.get("passed"):
        return "cordoned"
    return "joined" if _truthy(owned) and _truthy(uncordon_on_pass) else "left_cordoned"


NO_VERDICT = "no verdict (unreachable or failed)"
# the preflight role's default preflight_label_key (roles/preflight/defaults/main.yml; a unit test keeps them equal)
DEFAULT_LABEL_KEY = cordon_ownership.JOINED_LABEL


def _host_var(facts, key):
    """One host variable as plain data; None when it is unset or cannot be templated (a host that never ran)."""
    try:
        return to_plain(facts.get(key))
    except Exception:  # pylint: disable=broad-except  # an undefined or broken template is "no value" here
        return None


def summary_rows(hostvars, hosts, detailed=False):
    """One row per host of ``hosts``: ``{node, gates, verdict, reasons}`` from each host's ``preflight_verdict``
    and ``preflight_outcome``; a host that has none (unreachable, failed before the verdict) says so.
    ``detailed`` adds what the report page shows besides: ``results`` (each gate's result, with its duration)
    and ``label_key`` (the node label the verdict was written to)."""
    rows = []
    for host in hosts or []:
        try:
            facts = hostvars[host]
        except (KeyError, TypeError):
            facts = {}
        facts = facts if hasattr(facts, "get") else {}
        verdict_of = _host_var(facts, "preflight_verdict")
        verdict_of = verdict_of if isinstance(verdict_of, dict) else {}
        gates = verdict_of.get("gates")
        reasons = verdict_of.get("reasons")
        how = _host_var(facts, "preflight_outcome")
        rows.append({"node": str(_host_var(facts, "preflight_node_name") or host),
                     "gates": gates if isinstance(gates, dict) else {},
                     "verdict": str(how) if how else NO_VERDICT,
                     "reasons": [str(r) for r in reasons] if isinstance(reasons, (list, tuple)) else []})
        if detailed:
            results = verdict_of.get("results")
            label_key = _host_var(facts, "preflight_label_key")
            rows[-1]["results"] = [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
            rows[-1]["label_key"] = label_key if isinstance(label_key, str) and label_key else DEFAULT_LABEL_KEY
    return rows


#: Outcomes that count against a run's failure budget, and those of them that are no verdict at all.
FAILED_OUTCOMES = ("cordoned", "error", "unreachable")
UNJUDGED_OUTCOMES = ("error", "unreachable")
NOT_RUN = "not_run"


def _percent_text(value):
    """A percentage as the user wrote it: 30, not 30.0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(number)) if number.is_integer() else str(number)


def run_budget(hostvars, hosts, max_fail_percentage=100, name="preflight_max_fail_percentage"):
    """The failure budget of a preflight or onboarding run over ``hosts`` (the play's hosts while it runs, the
    inventory pattern's hosts at the end), from each host's ``preflight_outcome``.

    Returns ``failed`` (cordoned, error or unreachable), ``unjudged`` (error or unreachable: no verdict),
    ``not_run`` (left alone once the budget was spent), ``spent`` (more than ``max_fail_percentage`` percent of
    the hosts failed), ``not_run_reason`` (the reason a host left alone reports) and ``end_failed`` /
    ``end_message`` (whether the run must fail at its end, and the message with the cause and the fix).
    Raises upgrade.UpgradeError for a percentage that is not 0 to 100.
    """
    hosts = [str(host) for host in hosts or []]
    failed, unjudged, not_run = [], [], []
    for host in hosts:
        try:
            facts = hostvars[host]
        except (KeyError, TypeError):
            facts = {}
        how = _host_var(facts, "preflight_outcome") if hasattr(facts, "get") else None
        if how in FAILED_OUTCOMES:
            failed.append(host)
        if how in UNJUDGED_OUTCOMES:
            unjudged.append(host)
        if how == NOT_RUN:
            not_run.append(host)
    spent = upgrade.budget_spent(len(failed), len(hosts), max_fail_percentage, name)
    percent = _percent_text(max_fail_percentage)
    spent_text = "%d of %d node(s) failed" % (len(failed), len(hosts))
    message = ""
    if unjudged:
        message += "%d node(s) have no verdict: %s (see the summary). " % (len(unjudged), ", ".join(unjudged))
    if spent:
        message += "%s, more than %s %s%%%s. " % (
            spent_text, name, percent, (": %d node(s) not run" % len(not_run)) if not_run else "")
    end_failed = bool(unjudged) or spent
    if end_failed:
        message += "Fix: make the nodes reachable, or see the failed task or the reasons in their lines, and run again."
    return {
        "failed": failed,
        "unjudged": unjudged,
        "not_run": not_run,
        "spent": spent,
        "not_run_reason": "not run: %s (%s), more than %s %s%%" % (spent_text, ", ".join(failed), name, percent),
        "end_failed": end_failed,
        "end_message": message,
    }


def summary_table(rows):
    """A fixed-width fleet summary: node, each gate, verdict, first reason."""
    header = ["node"] + list(GATES) + ["verdict", "why"]
    table = [header]
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            # One malformed row is that row's problem, never the whole table's.
            table.append(["(row %d)" % index] + ["-" for _gate in GATES]
                         + ["error", _short("not a mapping: %r" % (row,))[:90]])
            continue
        gates = row.get("gates") if isinstance(row.get("gates"), dict) else {}
        reasons = row.get("reasons")
        if isinstance(reasons, (list, tuple)):
            first = reasons[0] if reasons else ""
        else:
            first = "" if reasons is None else reasons
        # every cell one line: a host name or a verdict with a line break would cut the table
        table.append([_short(row.get("node", "?")) or "?"] + [_short(gates.get(gate, "-"))[:20] for gate in GATES]
                     + [_short(row.get("verdict", "?")) or "?", _short(first)[:90]])
    return fixed_width_table(table)


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
