# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DRA filters: the kubernetes gate under an allocation mode (logic in plugins/plugin_utils/dra.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import dra
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.plain_data import to_plain

DRA_KEYS = ("slices", "device_classes", "plugin_pods", "nvidia_smi_list", "gpus", "driver_version",
            "required_classes", "read_error", "nvidia_smi_error")


def _list(value, what):
    value = to_plain(value if value is not None else [])
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        held = type(value).__name__ if not isinstance(value, list) else "a list holding something else"
        raise AnsibleFilterError("dra_kubernetes_gate: dra.%s must be a list of API objects (k8s_info resources), got "
                                 "%s. Fix: pass the resources list of the k8s_info result." % (what, held))
    return value


def dra_kubernetes_gate(device_plugin_gate, mode="device_plugin", node=None, dra_inputs=None):
    """The kubernetes gate's ``{status, reasons, details}`` under ``gpu_native_allocation``.

    ``device_plugin``: ``device_plugin_gate`` (preflight_kubernetes_gate's result) unchanged; ``dra``: the DRA
    judgement of ``dra_inputs``; ``auto``: DRA when the driver publishes slices for the node, else the device
    plugin's result.
    """
    gate = to_plain(device_plugin_gate or {})
    if not isinstance(gate, dict):
        raise AnsibleFilterError("dra_kubernetes_gate: the input must be preflight_kubernetes_gate's result, got %s. "
                                 "Fix: pipe the kubernetes gate's result into it" % type(gate).__name__)
    mode = to_plain(mode)
    if mode not in dra.MODES:
        raise AnsibleFilterError("dra_kubernetes_gate: gpu_native_allocation is %r. Fix: set it to one of %s"
                                 % (mode, ", ".join(dra.MODES)))
    if mode == dra.MODE_DEVICE_PLUGIN:
        return _with_mode(gate, mode)
    inputs = to_plain(dra_inputs or {})
    if not isinstance(inputs, dict) or any(key not in DRA_KEYS for key in inputs):
        raise AnsibleFilterError("dra_kubernetes_gate: dra takes only the keys %s, got %r. Fix: remove the others"
                                 % (", ".join(DRA_KEYS), sorted(inputs) if isinstance(inputs, dict) else inputs))
    node = to_plain(node or {})
    if not isinstance(node, dict):
        raise AnsibleFilterError("dra_kubernetes_gate: node must be the Node object, got %s. "
                                 "Fix: pass the k8s_info resource of the Node" % type(node).__name__)
    node_name = str((node.get("metadata") or {}).get("name") or "")
    if inputs.get("read_error"):
        if mode == dra.MODE_AUTO:
            result = _with_mode(gate, dra.MODE_DEVICE_PLUGIN)
            result["details"]["dra_read_error"] = str(inputs["read_error"])[:300]
            return result
        return {"status": dra.FAIL, "details": {"allocation_mode": dra.MODE_DRA},
                "reasons": ["the DRA objects could not be read (does the cluster serve resource.k8s.io/v1?): %s"
                            % str(inputs["read_error"])[:200]]}
    slices = _list(inputs.get("slices"), "slices")
    try:
        resolved = dra.resolve_mode(mode, slices, node_name)
        if resolved == dra.MODE_DEVICE_PLUGIN:
            return _with_mode(gate, resolved)
        gpus = dra.parse_smi_list(inputs.get("nvidia_smi_list"))
        health = _list(inputs.get("gpus"), "gpus")
        mig_enabled = dict((gpu.get("uuid"), bool(gpu.get("mig_enabled"))) for gpu in health if gpu.get("uuid"))
        required = to_plain(inputs.get("required_classes") or [])
        if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
            raise dra.DraError("required_classes must be a list of DeviceClass names")
        status, reasons, details = dra.judge(
            node_name, node, slices, _list(inputs.get("device_classes"), "device_classes"),
            _list(inputs.get("plugin_pods"), "plugin_pods"), gpus, inputs.get("driver_version"), mig_enabled,
            required)
    except dra.DraError as exc:
        raise AnsibleFilterError("dra_kubernetes_gate: %s. Fix: pass the k8s_info resources and the nvidia-smi -L "
                                 "output of this node." % exc)
    if inputs.get("nvidia_smi_error"):
        reasons = ["nvidia-smi -L failed on the node (%s): its GPUs cannot be compared with the slices"
                   % str(inputs["nvidia_smi_error"])[:200]] + list(reasons)
        status = dra.FAIL
    details["expected_from"] = "ResourceSlices of %s against nvidia-smi -L" % dra.DRIVER
    if mode == dra.MODE_AUTO:
        details["allocation_mode_from"] = "auto: the node has ResourceSlices of %s" % dra.DRIVER
    return {"status": status, "reasons": reasons, "details": details}


def dra_compliance(slices_result, mode="dra", node_result=None, smi_result=None, node_name=None):
    """The ``dra`` compliance row ``{check, status, expected, actual, items}`` from the registered results of
    k8s_info (ResourceSlices), k8s_info (Node) and ``nvidia-smi -L``; a read that failed is an ``error`` row."""
    mode = to_plain(mode)
    if mode not in dra.MODES:
        raise AnsibleFilterError("dra_compliance: gpu_native_allocation is %r. Fix: set it to one of %s"
                                 % (mode, ", ".join(dra.MODES)))
    row = {"check": "dra", "status": "error", "expected": "the node's ResourceSlices of %s" % dra.DRIVER,
           "actual": None, "items": []}
    slices_result, node_result, smi_result = (to_plain(x) if isinstance(x, dict) else {} for x in
                                              (slices_result, node_result, smi_result))
    nodes = node_result.get("resources") if isinstance(node_result.get("resources"), list) else []
    node = nodes[0] if nodes and isinstance(nodes[0], dict) else {}
    metadata = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    name = str(node_name or metadata.get("name") or "")
    slices = slices_result.get("resources")
    if slices_result.get("failed") or not isinstance(slices, list) or not slices_result.get("api_found", True):
        row["actual"] = "the ResourceSlices could not be read: %s. Fix: check that the cluster serves " \
            "resource.k8s.io/v1 and the compliance ClusterRole (rbac/compliance.yml)" % str(
                slices_result.get("msg") or "no resources")[:300]
        return row
    if smi_result.get("unreachable") or smi_result.get("rc", 1) != 0:
        why = smi_result.get("stderr") or smi_result.get("msg") or "no output"
        row["actual"] = "nvidia-smi -L failed on the node: %s" % str(why)[:300]
        return row
    try:
        status, expected, actual, items = dra.compliance_check(name, node, [s for s in slices if isinstance(s, dict)],
                                                               smi_result.get("stdout"), mode)
    except dra.DraError as exc:
        row["actual"] = "%s. Fix: check nvidia-smi -L on the node and the node's ResourceSlices" % exc
        return row
    row.update(status=status, expected=expected, actual=actual, items=items)
    return row


def dra_advertised_resources(slices, node_name):
    """The node's devices in its ResourceSlices of NVIDIA's DRA driver as ``{nvidia.com/gpu: "n",
    nvidia.com/mig-<profile>: "n"}`` (the device plugin's mixed names), or None while a pool is incomplete or
    stale or the node has none; ``slices`` is k8s_info's ``resources``."""
    slices = to_plain(slices)
    if not isinstance(slices, list) or not all(isinstance(item, dict) for item in slices):
        raise AnsibleFilterError("dra_advertised_resources: the input must be a list of ResourceSlices (k8s_info "
                                 "resources), got %s. Fix: pass the resources list of the k8s_info result."
                                 % type(slices).__name__)
    try:
        return dra.advertised_resources(slices, str(to_plain(node_name) or ""))
    except dra.DraError as exc:
        raise AnsibleFilterError("dra_advertised_resources: %s. Fix: pass the k8s_info resources of the node's "
                                 "ResourceSlices." % exc)


def _with_mode(gate, mode):
    result = dict(gate)
    result["details"] = dict(result.get("details") or {})
    result["details"]["allocation_mode"] = mode
    return result


class FilterModule(object):
    """gpu_native.fleet DRA filters."""

    def filters(self):
        return {"dra_kubernetes_gate": dra_kubernetes_gate, "dra_compliance": dra_compliance,
                "dra_advertised_resources": dra_advertised_resources}
