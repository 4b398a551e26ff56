#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_health
short_description: Judge whether a node's GPUs are ready, GPU by GPU
version_added: 0.1.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - Node Ready is not GPU Ready. This module gives a per-GPU verdict and a node verdict (RV(gpu_ready)) from what
    C(nvidia-smi), C(lspci) (or sysfs) and the kernel log say, never from C(nvidia-smi)'s exit code, which is 0
    even while a GPU shows C(ERR!).
  - "A GPU is unhealthy when its table row shows C(ERR!) (in a sensor field alone: see O(sensor_error)); nvidia-smi
    cannot get its handle or says C(GPU is lost); the kernel says it has fallen off the bus (even with no Xid line);
    a C(-q) field that speaks about health (ECC, retired pages, remapped rows, recovery action, reset status,
    temperature, power, clocks-event reasons, memory, PCIe, fabric) reads C(Unknown Error) (in an informational
    field such as C(Addressing Mode) it is a note);
    remapped rows are pending or remapping failed; an uncorrectable volatile ECC count is above zero with an
    action pending; the driver asks for a reset; or an Xid whose action is C(reset_gpu) or C(reboot_node) was
    seen and not cleared."
  - Xids are classified with NVIDIA's Xid catalog (Ampere and newer), kept as data in the collection. NVIDIA's
    immediate buckets map to actions (V(RESTART_APP) to V(restart_app), V(RESET_GPU) to V(reset_gpu),
    V(RESTART_BM) to V(reboot_node), V(IGNORE) to V(ignore), anything else to V(workflow)); the bucket is kept in
    RV(xid_events[].bucket). Xid 154 is judged by its text (V(0x3) Drain P2P is V(drain_p2p)), and a later
    C(to 0x0 (None)) line for the same GPU clears it; Xid 45 follows the Xid it names as its cause; Xid 74 is at
    least V(reset_gpu) when its text says fatal; Xids 144-150 are decoded with NVIDIA's decode table for the
    driver generation. A driver load line clears earlier Xids. MIG lines (C(GPU-I:NN)) map to their parent GPU.
  - A fatal NVSwitch SXid makes the node not ready (its NVLink fabric); a non-fatal one is a note.
  - "The node is not ready when a GPU is unhealthy, the PCI count (class 0302/0300, vendor 10de; NVSwitches excluded)
    and the nvidia-smi count differ, a known device-plugin count differs (per resource with O(device_plugin_config)),
    O(expected_gpus) differs, a fatal SXid was logged, or the driver cannot be reached."
  - With O(source=captured) it judges a support bundle offline.
extends_documentation_fragment:
  - gpu_native.fleet.node_tools
  - gpu_native.fleet.node_tools.captured
  - gpu_native.fleet.attributes
  - gpu_native.fleet.attributes.actiongroup_node_tools
attributes:
  check_mode:
    support: full
    description: The module never changes the node, so check mode runs it in full.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: linux
options:
  captured:
    description:
      - Tool outputs to judge when O(source=captured), replayed through the same checks as a live run. Any
        subset of the keys below; unknown keys are rejected.
    type: dict
    suboptions:
      nvidia_smi_xml:
        description: Output of C(nvidia-smi -q -x). Its DOCTYPE is never resolved.
        type: str
      nvidia_smi_query:
        description: Output of C(nvidia-smi -q).
        type: str
      nvidia_smi:
        description: Output of plain C(nvidia-smi) (the table).
        type: str
      lspci:
        description: Output of C(lspci -nnD), C(lspci -nn) or C(lspci -Dnn).
        type: str
      kernel_log:
        description: C(dmesg) or journal text in any common prefix style.
        type: str
      device_plugin_count:
        description: Number of C(nvidia.com/gpu) the device plugin exposes (node allocatable).
        type: int
      device_plugin_resources:
        description: The node's allocatable resources (C(nvidia.com/...) keys are read), resource to count.
        type: dict
  lspci:
    description:
      - Live mode. Path or name of C(lspci); when it is missing the module reads O(pci_sysfs_root).
    type: str
    default: lspci
  pci_sysfs_root:
    description:
      - Live mode. sysfs directory of PCI devices, read when C(lspci) is missing.
    type: path
    default: /sys/bus/pci/devices
  kernel_log:
    description:
      - Live mode. V(auto) reads C(journalctl -k -b) since O(xid_since), else C(dmesg); anything else is the path
        of a file holding kernel log text (read whole).
      - With V(auto), a kernel log that neither tool could read (without root, C(journalctl) shows no system
        messages and C(dmesg) fails with EPERM) makes the node not ready, with a reason naming both sources and the
        fix (become); it is never judged as a clean log.
    type: str
    default: auto
  xid_since:
    description:
      - Live mode. How far back C(journalctl) reads, as a number with C(s), C(min), C(h), C(d) or C(w).
    type: str
    default: 24h
  device_plugin_count:
    description:
      - Live mode. Number of C(nvidia.com/gpu) the device plugin exposes, when known (for example from the node's
        allocatable). Compared with the PCI count (or, with MIG enabled, the number of MIG devices).
    type: int
  device_plugin_resources:
    description:
      - Live mode. The node's allocatable resources (for example C(nvidia.com/gpu), C(nvidia.com/gpu.shared),
        C(nvidia.com/mig-1g.10gb)), resource to count; compared per resource when O(device_plugin_config) or
        O(mig_layout) is given.
    type: dict
  device_plugin_config:
    description:
      - The NVIDIA device plugin's config for this node (C(version), C(flags.migStrategy), C(sharing.timeSlicing) or
        C(sharing.mps)), as the C(gpu_native.fleet.device_plugin_config) role renders it. With it the expected
        allocatable is computed per resource (GPUs times replicas, C(<name>.shared) with C(renameByDefault), MIG
        devices per profile with C(migStrategy=mixed)) instead of comparing C(nvidia.com/gpu) with the GPU count.
    type: dict
  mig_layout:
    description:
      - MIG devices of the node per profile, profile name to count (for example V(1g.10gb) to 14; the applied
        mig-parted layout). Needed to check C(nvidia.com/mig-<profile>) counts one by one with C(migStrategy=mixed);
        without it their total is checked.
    type: dict
  expected_gpus:
    description:
      - Number of GPUs the node must have. Compared with the nvidia-smi and PCI counts. A boolean is refused.
      - When nvidia-smi reports more attached GPUs than it describes, the node is not ready unless
        O(expected_gpus) is below the attached count (a log trimmed on purpose); then the described GPUs are counted.
    type: int
  sensor_error:
    description:
      - What an C(ERR!) in a sensor field alone does in the C(nvidia-smi) table (the fan, the temperature, the power
        draw or the power cap, on a GPU whose name and memory still read) - V(fail) makes the GPU unhealthy, V(warn)
        reports it in RV(gpus[].notes) only.
      - An C(ERR!) in any other field (name, memory, utilisation, ECC, MIG mode), an all-C(ERR!) row, or a device
        handle error (C(Unable to determine the device handle)) makes the GPU unhealthy whatever this says.
    type: str
    choices: [fail, warn]
    default: fail
  xid_actions:
    description:
      - Overrides of the Xid catalog, Xid number to action (V(ignore), V(restart_app), V(workflow), V(drain_p2p),
        V(reset_gpu) or V(reboot_node)). An override replaces the judgement by text and by neighbouring Xids
        (154's recovery action, 45's cause, the NVLink decode of 74 and 144-150).
    type: dict
    default: {}
notes:
  - Supports check mode; it never changes anything.
  - A C(nvidia-smi) that times out, cannot reach the driver, is missing or prints nothing readable is a reason in
    RV(reasons) (and RV(gpu_ready=false)), never a hang or a module failure; RV(commands) shows every call.
  - Unknown Xids default to V(workflow), which is reported but not fatal unless overridden.
seealso:
  - name: Node Ready vs GPU Ready
    description: The readiness agent, its metrics and the alert rules built on this module's logic.
    link: https://github.com/gpu-native/fleet/blob/main/docs/gpu_readiness.md
"""

EXAMPLES = r"""
- name: Judge the GPUs of this node
  gpu_native.fleet.gpu_health:
    expected_gpus: 8
  register: gpu_health

- name: Stop when a GPU is not ready
  ansible.builtin.assert:
    that: gpu_health.gpu_ready
    fail_msg: "{{ gpu_health.reasons | join('; ') }}"

- name: Triage a support bundle offline
  gpu_native.fleet.gpu_health:
    source: captured
    captured:
      nvidia_smi: "{{ lookup('ansible.builtin.file', 'bundle/nvidia-smi.txt') }}"
      nvidia_smi_xml: "{{ lookup('ansible.builtin.file', 'bundle/nvidia-smi-q-x.xml') }}"
      kernel_log: "{{ lookup('ansible.builtin.file', 'bundle/dmesg.txt') }}"
      lspci: "{{ lookup('ansible.builtin.file', 'bundle/lspci-nnD.txt') }}"
    xid_actions:
      74: reset_gpu
  delegate_to: localhost
  register: bundle

- name: Read a kernel log file instead of the journal
  gpu_native.fleet.gpu_health:
    kernel_log: /var/log/kern.log
    device_plugin_count: "{{ node_allocatable['nvidia.com/gpu'] | int }}"
"""

RETURN = r"""
status:
  description:
    - The check result (docs/DEVELOPING.md, "How a check result looks"). V(pass) when the node is GPU ready,
      V(fail) when RV(reasons) says why not.
  returned: always
  type: str
  choices: [pass, fail, skip, error]
  sample: fail
gpu_ready:
  description: Whether the node is GPU ready (no entry in RV(reasons)); the same as RV(status=pass), kept as an extra.
  returned: always
  type: bool
  sample: false
reasons:
  description: Why the node is not ready, one line each; GPUs are named by index, bus id and UUID when known.
  returned: always
  type: list
  elements: str
  sample: ["GPU 4 0000:83:00.0 (GPU-a40c0de4-0000-4000-8000-000000000004) is unhealthy: nvidia-smi table shows ERR! (name)"]
notes:
  description: Findings that do not make the node unready (for example C(attached_gpus) differing from the GPUs described).
  returned: always
  type: list
  elements: str
driver_reachable:
  description: Whether nvidia-smi reached the driver.
  returned: always
  type: bool
driver_version:
  description: Driver version nvidia-smi reports, null when unknown.
  returned: always
  type: str
  sample: 565.57.01
cuda_version:
  description: CUDA version the driver supports, null when unknown.
  returned: always
  type: str
  sample: "12.7"
gpus:
  description: Every GPU seen by nvidia-smi or named by the kernel log.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: nvidia-smi index, null for a GPU nvidia-smi does not list.
      type: int
    pci_bus_id:
      description: Bus id normalised to C(dddd:bb:dd.f), lower case.
      type: str
    uuid:
      description: GPU UUID, null when unknown.
      type: str
    product:
      description: Product name, null when unknown (for example C(ERR!)).
      type: str
    mig_enabled:
      description: Whether nvidia-smi reports MIG mode Enabled for the GPU.
      type: bool
    mig_devices:
      description: The MIG devices nvidia-smi lists for the GPU (0 with MIG off).
      type: int
    healthy:
      description: Whether the GPU has no problem.
      type: bool
    problems:
      description: Why the GPU is unhealthy.
      type: list
      elements: str
    notes:
      description: Findings that do not make the GPU unhealthy.
      type: list
      elements: str
  sample: [{"index": 0, "pci_bus_id": "0000:18:00.0", "uuid": "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",
            "product": "NVIDIA H100 80GB HBM3", "healthy": true, "problems": [], "notes": []}]
pci_gpu_count:
  description: NVIDIA GPUs on PCI (class 0302 or 0300, vendor 10de; NVSwitches excluded), null when unknown.
  returned: always
  type: int
  sample: 8
nvidia_smi_gpu_count:
  description: GPUs nvidia-smi knows (its C(attached_gpus), else the GPUs it lists), 0 without a driver, null when unknown.
  returned: always
  type: int
  sample: 8
device_plugin_count:
  description: The device-plugin count that was compared, null when unknown.
  returned: always
  type: int
expected_gpus:
  description: The O(expected_gpus) that was compared.
  returned: always
  type: int
checks:
  description: Outcome of each count comparison, null when a side is unknown.
  returned: always
  type: dict
  contains:
    pci_count_matches:
      description: PCI count equals the nvidia-smi count.
      type: bool
    device_plugin_count_matches:
      description: The device-plugin count equals the GPU count (or, with MIG, the MIG device count).
      type: bool
    expected_gpus_matches:
      description: O(expected_gpus) equals every known count.
      type: bool
  sample: {"pci_count_matches": true, "device_plugin_count_matches": null, "expected_gpus_matches": true}
xid_events:
  description: Xid lines from the kernel log, deduplicated per (Xid, GPU).
  returned: always
  type: list
  elements: dict
  contains:
    xid:
      description: Xid number.
      type: int
    pci_bus_id:
      description: Normalised bus id, null for old lines without one.
      type: str
    gpu_index:
      description: nvidia-smi index of the GPU, null when unknown.
      type: int
    uuid:
      description: GPU UUID, from nvidia-smi or the kernel's C(GPU at PCI:...) line.
      type: str
    gi:
      description: MIG GPU instance of C(GPU-I:NN) lines, null otherwise.
      type: int
    action:
      description: Strongest action of its lines (V(ignore), V(restart_app), V(workflow), V(drain_p2p), V(reset_gpu),
        V(reboot_node)).
      type: str
    pending_action:
      description: Strongest action not cleared yet (V(none) when nothing is pending).
      type: str
    bucket:
      description: NVIDIA's immediate-action bucket for the Xid (for example V(RESET_GPU), V(WORKFLOW_XID_45)), null
        for an Xid not in the catalog.
      type: str
    investigatory:
      description: NVIDIA's investigatory bucket, null when the catalog has none.
      type: str
    caused_by:
      description: For Xid 45, the Xid its text names as the cause (the verdict follows that Xid).
      type: int
    follows:
      description: Xid whose verdict this one follows (154 for an NVLink line decoded as XID_154_EVAL).
      type: int
    decode:
      description: For Xids 144-150, how the line was decoded (subcode, severity, intr_info, error_status, generation,
        bucket, investigatory, rule).
      type: dict
    note:
      description: How a workflow bucket was resolved for this Xid.
      type: str
    cleared:
      description: A fatal action was seen and later cleared (driver reload, Xid 154 back to C(0x0 (None))).
      type: bool
    description:
      description: Catalog description of the Xid.
      type: str
    message:
      description: Text of the latest line after C(pid=) and C(name=).
      type: str
    count:
      description: Number of lines.
      type: int
    first_seen:
      description: Timestamp of the first line as printed (null without a prefix).
      type: str
    last_seen:
      description: Timestamp of the latest line as printed.
      type: str
    pids:
      description: Process ids named by the lines.
      type: list
      elements: int
    processes:
      description: Process names named by the lines (the workload).
      type: list
      elements: str
  sample: [{"xid": 119, "pci_bus_id": "0000:83:00.0", "gpu_index": 4, "uuid": null, "gi": null, "action": "reset_gpu",
            "cleared": false, "count": 2, "first_seen": "Feb 27 16:08:20", "last_seen": "Feb 27 16:08:26",
            "message": "Timeout waiting for RPC from GSP! Expected function 10 (FREE) (0xa55a0050 0x0).",
            "description": "GSP RPC timeout", "pids": [2710030], "processes": ["nvidia-smi"]}]
device_plugin_resources:
  description: Per resource, the expected and actual device-plugin counts (empty without O(device_plugin_config) or
    O(mig_layout)); C(expected) is null when it cannot be computed (C(why_unknown) says why), or when the device
    plugin refuses to start with this config on these GPUs (C(matches) false, C(why_refused) says why; under
    C(migStrategy=single) with MIG on some GPUs and off on others).
  returned: always
  type: list
  elements: dict
  sample: [{"resource": "nvidia.com/gpu.shared", "expected": 32, "actual": 32, "matches": true}]
sxid_events:
  description: NVSwitch SXid lines with C(switch), C(fatal) (null for detail lines) and C(link); a fatal one makes the node not ready.
  returned: always
  type: list
  elements: dict
actions:
  description: Per GPU, the strongest pending action (V(none) when nothing is pending).
  returned: always
  type: list
  elements: dict
  sample: [{"index": 4, "pci_bus_id": "0000:83:00.0", "uuid": null, "action": "reset_gpu"}]
commands:
  description: Every tool call (live) or replay (captured), in order, with the runner's verdict on it.
  returned: always
  type: list
  elements: dict
  contains:
    tool:
      description: The tool's name.
      type: str
    command:
      description: The command line run, or C(captured:<key>) for a replay.
      type: str
    status:
      description: V(ok), V(missing), V(no_driver), V(timeout), V(failed), V(unreadable) or V(not_captured).
      type: str
    rc:
      description: Exit status, null when the call was killed or never started.
      type: int
    duration_s:
      description: Seconds the call took.
      type: float
    timeout_s:
      description: The limit it ran under, null for a replay.
      type: float
    source:
      description: V(live) or V(captured).
      type: str
    message:
      description: One line saying what happened.
      type: str
  sample: [{"tool": "nvidia-smi", "command": "/usr/bin/nvidia-smi -q -x", "status": "timeout", "rc": null,
            "duration_s": 30.01, "timeout_s": 30, "source": "live", "message": "nvidia-smi did not answer within 30 s."}]
sources:
  description: Where each input came from (command lines in live mode, C(captured) otherwise).
  returned: always
  type: dict
  sample: {"nvidia_smi_xml": "/usr/bin/nvidia-smi -q -x (rc=0)", "pci": "/usr/bin/lspci -nnD", "kernel_log": "dmesg (since boot)"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.gpu_health import (
    GpuHealthError,
    check_count,
    collect,
    evaluate,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.xid import XidCatalogError

CAPTURED_KEYS = ("nvidia_smi_xml", "nvidia_smi_query", "nvidia_smi", "lspci", "kernel_log", "device_plugin_count",
                 "device_plugin_resources")
#: Captured keys that are not tool outputs (the runner replays only texts).
_CAPTURED_COUNTS = ("device_plugin_count", "device_plugin_resources")
TOOL_OPTIONS = ("nvidia_smi", "lspci")


def main():
    argument_spec = node_tools.argument_spec(tools=TOOL_OPTIONS)
    argument_spec.update(
        captured=dict(
            type="dict",
            options=dict(
                nvidia_smi_xml=dict(type="str"),
                nvidia_smi_query=dict(type="str"),
                nvidia_smi=dict(type="str"),
                lspci=dict(type="str"),
                kernel_log=dict(type="str"),
                device_plugin_count=dict(type="int"),
                device_plugin_resources=dict(type="dict"),
            ),
        ),
        pci_sysfs_root=dict(type="path", default="/sys/bus/pci/devices"),
        kernel_log=dict(type="str", default="auto"),
        xid_since=dict(type="str", default="24h"),
        device_plugin_count=dict(type="int"),
        device_plugin_resources=dict(type="dict"),
        device_plugin_config=dict(type="dict"),
        mig_layout=dict(type="dict"),
        expected_gpus=dict(type="int"),
        xid_actions=dict(type="dict", default={}),
        sensor_error=dict(type="str", choices=["fail", "warn"], default="fail"),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    captured = params["captured"] or {}
    if params["source"] == "captured":
        if all(captured.get(key) is None for key in CAPTURED_KEYS):
            module.fail_json(msg="source=captured needs captured outputs. Fix: pass captured with at least one of "
                                 "%s." % ", ".join(CAPTURED_KEYS))
    elif params["captured"]:
        module.fail_json(msg="captured is only read with source=captured. Fix: set source: captured or drop captured.")
    try:
        check_count("expected_gpus", params["expected_gpus"])
        for where in (params, captured):
            check_count("device_plugin_count", where.get("device_plugin_count"))
        texts = dict((key, value) for key, value in captured.items()
                     if value is not None and key not in _CAPTURED_COUNTS)
        tools = node_tools.from_module_params(params, captured=texts, tools=TOOL_OPTIONS)
        inputs, sources = collect(tools, kernel_log=params["kernel_log"], xid_since=params["xid_since"],
                                  sysfs_root=params["pci_sysfs_root"])
    except (GpuHealthError, node_tools.NodeToolsError) as exc:
        module.fail_json(msg=str(exc))
    for key in _CAPTURED_COUNTS:
        value = captured.get(key) if params["source"] == "captured" else params[key]
        if value is not None:
            inputs[key] = value
            sources[key] = "captured" if params["source"] == "captured" else "option"
    try:
        result = evaluate(inputs, expected_gpus=params["expected_gpus"], xid_actions=params["xid_actions"],
                          device_plugin_config=params["device_plugin_config"], mig_layout=params["mig_layout"],
                          sensor_error=params["sensor_error"])
    except (GpuHealthError, XidCatalogError) as exc:
        module.fail_json(msg=str(exc))
    result["sources"] = sources
    result["commands"] = [call.as_dict() for call in tools.calls]
    result["status"] = check_result.status_of(result["gpu_ready"])
    module.exit_json(changed=False, **check_result.result(**result))


if __name__ == "__main__":
    main()
