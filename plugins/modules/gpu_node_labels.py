#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_labels
short_description: Derive a GPU node's Kubernetes labels from nvidia-smi
version_added: 0.1.0
author:
  - gpu_native.fleet maintainers (@gpu-native)
description:
  - Computes the labels C(accelerator), C(gpu.nvidia.com/model) and C(gpu.nvidia.com/memory) for the node it runs
    on, from C(nvidia-smi -q -x) (or a captured copy of it). It changes nothing; the
    P(gpu_native.fleet.runtime_class#role) role writes the labels through the Kubernetes API.
  - The model is the GPU's product name made label-safe the way GPU Feature Discovery does it
    (C(NVIDIA H100 80GB HBM3) becomes C(NVIDIA-H100-80GB-HBM3)). The memory is the smallest GPU's framebuffer,
    rounded to the nearest GiB and written C(<n>Gi) (81559 MiB becomes C(80Gi)).
  - A node that mixes GPU models is refused unless O(model) is given, because one label cannot describe it.
  - When both O(model) and O(memory) are given, C(nvidia-smi) is not run.
  - Every label value is checked against Kubernetes' rules (at most 63 characters, alphanumerics, C(-), C(_), C(.)),
    whether derived or given.
extends_documentation_fragment:
  - gpu_native.fleet.node_tools
  - gpu_native.fleet.node_tools.captured
  - gpu_native.fleet.attributes
  - gpu_native.fleet.attributes.actiongroup_node_tools
attributes:
  check_mode:
    support: full
    description: The module never changes the node (it only derives labels), so check mode runs it in full.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: linux
options:
  captured:
    description:
      - Tool outputs to read when O(source=captured), replayed through the same checks as a live run.
      - This replaces the former top-level option C(nvidia_smi_xml).
    type: dict
    suboptions:
      nvidia_smi_xml:
        description: Output of C(nvidia-smi -q -x) (support bundles, tests). Its DOCTYPE is never resolved.
        type: str
  accelerator:
    description:
      - Value of the C(accelerator) label.
    type: str
    default: nvidia-gpu
  model:
    description:
      - Value of the C(gpu.nvidia.com/model) label; derived from nvidia-smi when not given.
      - Must be a valid Kubernetes label value (alphanumerics, C(-), C(_), C(.); at most 63 characters).
    type: str
  memory:
    description:
      - Value of the C(gpu.nvidia.com/memory) label, a whole number of GiB written C(<n>Gi); derived from
        nvidia-smi when not given.
    type: str
notes:
  - Supports check mode; it never changes anything.
seealso:
  - name: RuntimeClass, GPU node labels and taint
    description: The role that applies these labels.
    link: https://github.com/gpu-native/fleet/blob/main/docs/runtime_class.md
"""

EXAMPLES = r"""
- name: Derive the GPU labels of this node
  gpu_native.fleet.gpu_node_labels:
  register: gpu_labels

- name: Show them
  ansible.builtin.debug:
    var: gpu_labels.labels

- name: Label a node whose GPUs are not visible yet (driver installed later)
  gpu_native.fleet.gpu_node_labels:
    model: NVIDIA-H100-80GB-HBM3
    memory: 80Gi

- name: Derive labels from a support bundle, on the controller
  gpu_native.fleet.gpu_node_labels:
    source: captured
    captured:
      nvidia_smi_xml: "{{ lookup('ansible.builtin.file', 'bundle/nvidia-smi-q-x.xml') }}"
  delegate_to: localhost
"""

RETURN = r"""
labels:
  description: The labels to set on the node.
  returned: success
  type: dict
  sample: {"accelerator": "nvidia-gpu", "gpu.nvidia.com/model": "NVIDIA-H100-80GB-HBM3", "gpu.nvidia.com/memory": "80Gi"}
gpu_count:
  description: Number of GPUs nvidia-smi listed (0 when it was not run).
  returned: success
  type: int
  sample: 8
product:
  description: The GPUs' product name as nvidia-smi prints it; null when O(model) was given.
  returned: success
  type: str
  sample: NVIDIA H100 80GB HBM3
memory_mib:
  description: Framebuffer of the smallest GPU in MiB; null when O(memory) was given.
  returned: success
  type: int
  sample: 81559
source:
  description: Where the values came from, V(nvidia-smi), V(captured) or V(options).
  returned: success
  type: str
  sample: nvidia-smi
commands:
  description: The C(nvidia-smi) call (or replay) with the runner's verdict; empty when it was not needed.
  returned: success
  type: list
  elements: dict
  sample: [{"tool": "nvidia-smi", "command": "/usr/bin/nvidia-smi -q -x", "status": "ok", "rc": 0,
            "duration_s": 0.41, "timeout_s": 30, "source": "live", "message": "nvidia-smi answered (rc=0)."}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import (
    K8sLabelError,
    gpu_node_labels,
    label_value_problem,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_smi import (
    NvidiaSmiParseError,
    parse_query_xml,
)

FIX = "Fix: install or load the NVIDIA driver (gpu_native.fleet.nvidia_driver) or give model and memory explicitly."


def _nvidia_smi_xml(module, tools):
    """``nvidia-smi -q -x`` through the shared runner (live or replayed); fails with the cause and the fix."""
    result = tools.run("nvidia-smi", ["-q", "-x"], capture_key="nvidia_smi_xml")
    if result.status == node_tools.NOT_CAPTURED:
        module.fail_json(msg="source=captured needs captured.nvidia_smi_xml (or give model and memory). Fix: pass "
                             "the output of nvidia-smi -q -x as captured.nvidia_smi_xml.")
    if result.status == node_tools.MISSING:
        module.fail_json(msg="%s The GPU labels cannot be derived. %s" % (result.message, FIX))
    if result.status == node_tools.NO_DRIVER:
        module.fail_json(msg="nvidia-smi cannot talk to the NVIDIA driver (%s). %s" % (result.detail, FIX))
    if result.status == node_tools.TIMEOUT:
        module.fail_json(msg="%s Fix: check the node's GPUs with gpu_native.fleet.gpu_health (a hung GPU or driver), "
                             "or give model and memory explicitly." % result.message)
    if result.status == node_tools.UNREADABLE:
        module.fail_json(msg="%s Fix: run nvidia-smi -q -x on the node to see what it prints." % result.message)
    if result.status == node_tools.FAILED and "<nvidia_smi_log" not in result.stdout:
        module.fail_json(msg="%s Fix: run nvidia-smi -q -x on the node to see why." % result.message)
    return result.stdout


def main():
    argument_spec = node_tools.argument_spec()
    argument_spec.update(
        captured=dict(type="dict", options=dict(nvidia_smi_xml=dict(type="str"))),
        accelerator=dict(type="str", default="nvidia-gpu"),
        model=dict(type="str"),
        memory=dict(type="str"),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    if params["captured"] and params["source"] != "captured":
        module.fail_json(msg="captured is only read with source=captured. Fix: set source: captured or drop captured.")
    try:
        tools = node_tools.from_module_params(params)
    except node_tools.NodeToolsError as exc:
        module.fail_json(msg=str(exc))
    inventory = {"gpus": []}
    source = "options"
    if not (params["model"] and params["memory"]):
        text = _nvidia_smi_xml(module, tools)
        source = "captured" if tools.source == "captured" else "nvidia-smi"
        try:
            inventory = parse_query_xml(text)
        except NvidiaSmiParseError as exc:
            module.fail_json(msg="%s. Fix: check that the node's nvidia-smi works (nvidia-smi -q -x)." % exc)
    try:
        labels, details = gpu_node_labels(inventory, params["accelerator"], params["model"], params["memory"])
    except K8sLabelError as exc:
        module.fail_json(msg=str(exc))
    for key in sorted(labels):
        problem = label_value_problem(labels[key])
        if problem:
            module.fail_json(msg="%s: %s. Fix: give a valid label value (at most 63 characters)." % (key, problem[:120]))
    module.exit_json(changed=False, labels=labels, gpu_count=details["gpu_count"], product=details["product"],
                     memory_mib=details["memory_mib"], source=source,
                     commands=[call.as_dict() for call in tools.calls])


if __name__ == "__main__":
    main()
