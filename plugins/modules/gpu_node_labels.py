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
options:
  nvidia_smi:
    description:
      - Path or name of the C(nvidia-smi) binary.
    type: str
    default: nvidia-smi
  nvidia_smi_xml:
    description:
      - Output of C(nvidia-smi -q -x) to read instead of running the binary (support bundles, tests).
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
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s_labels import (
    K8sLabelError,
    gpu_node_labels,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.nvidia_smi import (
    NvidiaSmiParseError,
    detect_no_driver,
    parse_query_xml,
)


def _run_nvidia_smi(module, binary):
    path = binary if os.path.isabs(binary) else module.get_bin_path(binary, opt_dirs=["/usr/bin", "/usr/local/bin"])
    if not path or not os.path.exists(path):
        module.fail_json(msg="nvidia-smi not found (%s), so the GPU labels cannot be derived. Fix: install the NVIDIA "
                             "driver (gpu_native.fleet.nvidia_driver) or give model and memory explicitly." % binary)
    rc, out, err = module.run_command([path, "-q", "-x"])
    text = out or ""
    if detect_no_driver(text + "\n" + (err or "")):
        module.fail_json(msg="nvidia-smi cannot talk to the NVIDIA driver (rc %d: %s). Fix: load the driver "
                             "(gpu_native.fleet.nvidia_driver) or give model and memory explicitly."
                             % (rc, ((err or text).strip().splitlines() or [""])[0]))
    if rc != 0 and "<nvidia_smi_log" not in text:
        module.fail_json(msg="nvidia-smi -q -x failed (rc %d): %s. Fix: run it on the node to see why."
                             % (rc, ((err or text).strip().splitlines() or ["no output"])[0]))
    return text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            nvidia_smi_xml=dict(type="str"),
            accelerator=dict(type="str", default="nvidia-gpu"),
            model=dict(type="str"),
            memory=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    inventory = {"gpus": []}
    source = "options"
    if not (params["model"] and params["memory"]):
        if params["nvidia_smi_xml"] is not None:
            text, source = params["nvidia_smi_xml"], "captured"
        else:
            text, source = _run_nvidia_smi(module, params["nvidia_smi"]), "nvidia-smi"
        try:
            inventory = parse_query_xml(text)
        except NvidiaSmiParseError as exc:
            module.fail_json(msg="%s. Fix: check that the node's nvidia-smi works (nvidia-smi -q -x)." % exc)
    try:
        labels, details = gpu_node_labels(inventory, params["accelerator"], params["model"], params["memory"])
    except K8sLabelError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, labels=labels, gpu_count=details["gpu_count"], product=details["product"],
                     memory_mib=details["memory_mib"], source=source)


if __name__ == "__main__":
    main()
