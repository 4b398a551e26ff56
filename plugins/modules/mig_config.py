#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mig_config
short_description: Validate MIG layouts exactly, offline, and report drift from a node's actual MIG state
version_added: 0.1.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - "Validates a mig-parted config (C(version: v1), C(mig-configs)) before it touches a node. mig-parted itself checks
    only the schema; whether a layout fits is otherwise found out on the hardware when instance creation fails."
  - "The schema is checked as strictly as mig-parted does: unknown keys are errors with their path; C(mig-devices) is
    required when C(mig-enabled) is true and forbidden when it is false; counts are non-negative and not all zero;
    C(devices) is C(all) or a list of GPU indexes; C(device-filter) is a string or a list."
  - Profile names must exist for the GPU model each entry applies to. The geometry (allowed start slots and sizes,
    at most one C(+me) instance per GPU) is data in the collection for A100-40GB, A100-80GB, H100-80GB, H100 NVL,
    H200 141GB, B200 and A30, and can be extended with O(geometry).
  - Feasibility is exact. A complete search finds a non-overlapping placement of every instance within the allowed
    starts; the placement is returned per GPU (profile, start, size), or the reason none exists (too many of one
    profile, slots exhausted, or the profile conflicts at every allowed start).
  - An entry whose C(device-filter) names a known model that no given GPU has is checked against that model too.
  - With O(mig_strategy=single) it reports configs that do not give every MIG-enabled GPU the same single profile,
    which the NVIDIA device plugin's single strategy requires.
  - With O(mode=compare) it reads the actual MIG state (C(nvidia-smi -q -x), C(nvidia-smi mig -lgi) and C(-lci))
    or takes it from O(captured), and reports drift from the config named by O(select), with a per-GPU apply plan.
  - The module never changes anything.
attributes:
  check_mode:
    support: full
    description: The module never changes anything, so check mode runs it in full.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: linux
options:
  config:
    description:
      - The mig-parted document, as a mapping with C(version) and C(mig-configs).
    type: dict
    required: true
  select:
    description:
      - The name of one config in C(mig-configs). When omitted, every config is validated.
      - Required with O(mode=compare).
    type: str
  gpus:
    description:
      - The node's GPUs. When omitted, they are discovered with C(nvidia-smi -q -x) (or read from
        O(captured.nvidia_smi_xml)). With O(mode=compare) a GPU index the node does not have is an error.
    type: list
    elements: dict
    suboptions:
      index:
        description: The GPU index, as C(devices) lists it.
        type: int
        required: true
      device_id:
        description: PCI device id, as C(0x2330), C(0x233010DE) or C(10de:2330).
        type: str
      product:
        description: nvidia-smi product name, such as C(NVIDIA H100 80GB HBM3). Used when O(gpus[].device_id) is absent.
        type: str
      pci_bus_id:
        description: PCI bus id, reported back in the plan.
        type: str
  mode:
    description:
      - V(validate) checks the config offline and fails when it is invalid.
      - V(compare) also reads the actual MIG state and returns RV(drift) and RV(plan) for O(select); it does not fail
        on drift.
    type: str
    choices: [validate, compare]
    default: validate
  mig_strategy:
    description:
      - The device plugin's C(migStrategy) the config is used with. V(single) adds its consistency check.
    type: str
    choices: [none, single, mixed]
  geometry:
    description:
      - Additions or overrides to the MIG geometry, keyed by model name. A known model is merged key by key and
        profile by profile; a new model needs C(slices), C(memory_slots), C(device_ids) and C(profiles).
      - "A profile is C({id, starts, size}) with optional C(slices), C(memory_gib), C(media_extensions)."
      - A model may say where its C(memory_gib) figures come from, C(memory_source) (C(capture) or C(derived)), with a
        C(memory_note); the built-in B200, H100 NVL, H200 and A30 figures are C(derived) (the MIG user guide gives
        fractions of memory, not GiB).
      - "Checked with the schema the built-in table passes (types, unknown keys, start + size within the slots),
        and bounded: at most 32 memory slots and 32 slices per model, 64 models, 64 profiles per model.
        A placement search that needs more than 100000 steps reports C(search limit reached) as invalid."
    type: dict
  captured:
    description:
      - Captured outputs to use instead of running C(nvidia-smi), for triage of a support bundle and for tests.
        Unknown keys are rejected. Giving O(captured) replays it (O(source=captured)); nothing is run on the node.
    type: dict
    suboptions:
      nvidia_smi_xml:
        description: Output of C(nvidia-smi -q -x) (GPU discovery and MIG mode). Its DOCTYPE is never resolved.
        type: str
      mig_lgi:
        description: Output of C(nvidia-smi mig -lgi).
        type: str
      mig_lci:
        description: Output of C(nvidia-smi mig -lci).
        type: str
extends_documentation_fragment:
  - gpu_native.fleet.node_tools
  - gpu_native.fleet.node_tools.captured
  - gpu_native.fleet.attributes
  - gpu_native.fleet.attributes.actiongroup_node_tools
notes:
  - Supports check mode; the module is read-only either way.
  - M(gpu_native.fleet.mig_layout) applies a config; both plan through the same code.
  - In O(mode=compare), every GPU in O(gpus) must be one of the node's GPUs.
  - The geometry follows C(nvidia-smi mig -lgipp) (placements as C({allowed starts}:size) in memory slots).
seealso:
  - name: mig-parted
    description: NVIDIA's MIG partition editor, which applies these configs.
    link: https://github.com/NVIDIA/mig-parted
"""

EXAMPLES = r"""
- name: Validate every layout of a mig-parted file for an 8x H100 node, offline
  gpu_native.fleet.mig_config:
    config: "{{ lookup('ansible.builtin.file', 'files/mig-config.yaml') | from_yaml }}"
    gpus: "{{ range(8) | map('community.general.dict_kv', 'index') | map('combine', {'device_id': '0x2330'}) }}"

- name: Validate one layout against the GPUs nvidia-smi finds on the node
  gpu_native.fleet.mig_config:
    config: "{{ mig_parted_config }}"
    select: all-balanced
    mig_strategy: mixed

- name: Check that a layout suits the device plugin's single strategy
  gpu_native.fleet.mig_config:
    config:
      version: v1
      mig-configs:
        all-1g.10gb:
          - devices: all
            mig-enabled: true
            mig-devices:
              "1g.10gb": 7
    gpus:
      - {index: 0, product: NVIDIA H100 80GB HBM3}
      - {index: 1, product: NVIDIA H100 80GB HBM3}
    mig_strategy: single

- name: Report drift of the node from the layout it should have
  gpu_native.fleet.mig_config:
    config: "{{ mig_parted_config }}"
    select: all-balanced
    mode: compare
  register: mig_drift

- name: Judge a support bundle offline
  gpu_native.fleet.mig_config:
    config: "{{ mig_parted_config }}"
    select: all-1g.10gb
    mode: compare
    captured:
      nvidia_smi_xml: "{{ lookup('ansible.builtin.file', 'bundle/nvidia-smi-q-x.xml') }}"
      mig_lgi: "{{ lookup('ansible.builtin.file', 'bundle/mig-lgi.txt') }}"
      mig_lci: "{{ lookup('ansible.builtin.file', 'bundle/mig-lci.txt') }}"
"""

RETURN = r"""
valid:
  description: True when every validated config is valid (schema, profile names, placement, strategy).
  returned: always
  type: bool
  sample: true
errors:
  description: One line per problem, naming config, entry index, GPU (index, model, device id) and profile.
  returned: always
  type: list
  elements: str
  sample:
    - "config all-7g entry 0: GPU 0 (H100-80GB, 0x233010DE): 7g.80gb: 2 requested but at most 1 fit on one GPU
      (starts {0}, size 8 of 8 memory slots)"
configs:
  description:
    - Per config name, C(valid), C(errors) and C(placements).
    - C(placements) holds one list per device entry, with one item per GPU the entry applies to
      (C(index), C(model), C(mig_enabled), C(instances)); each instance is C({profile, profile_id, start, size}).
      Models named only by the entry's C(device-filter) appear with C(index) null.
  returned: always
  type: dict
  sample:
    all-balanced:
      valid: true
      errors: []
      placements:
        - - index: 0
            model: H100-80GB
            mig_enabled: true
            instances:
              - {profile: 2g.20gb, profile_id: 14, start: 0, size: 2}
              - {profile: 1g.10gb, profile_id: 19, start: 2, size: 1}
              - {profile: 1g.10gb, profile_id: 19, start: 3, size: 1}
              - {profile: 3g.40gb, profile_id: 9, start: 4, size: 4}
gpus:
  description: The GPUs validated against, with the model each resolved to (null when not MIG-capable).
  returned: always
  type: list
  elements: dict
  sample:
    - {index: 0, device_id: "0x233010DE", product: NVIDIA H100 80GB HBM3, model: H100-80GB, pci_bus_id: "0000:1b:00.0"}
drift:
  description: Differences between the actual MIG state and O(select), each C({index, kind, expected, actual, message});
    C(kind) is C(mig_mode), C(mig_mode_pending), C(instances) or C(compute_instances).
  returned: when O(mode=compare)
  type: list
  elements: dict
  sample:
    - {index: 0, kind: mig_mode, expected: Enabled, actual: Disabled, message: "GPU 0: MIG mode is Disabled, the config wants Enabled"}
in_sync:
  description: True when RV(drift) is empty.
  returned: when O(mode=compare)
  type: bool
plan:
  description:
    - One item per drifting GPU - C(index), C(pci_bus_id), C(model), C(mig_enabled) (wanted),
      C(mode_change) (MIG mode must change or is pending), C(destroy) (existing instances must go),
      C(create) (the C(nvidia-smi mig -cgi) argument, C(<profile id>:<start>) pairs) and C(instances).
  returned: when O(mode=compare)
  type: list
  elements: dict
  sample:
    - {index: 0, pci_bus_id: "0000:1b:00.0", model: H100-80GB, mig_enabled: true, mode_change: true, destroy: false,
       create: "5:0,14:4,19:6", instances: []}
actual:
  description: The actual MIG state per GPU index - C(mig_mode), C(mig_mode_pending) and C(instances).
  returned: when O(mode=compare)
  type: dict
commands:
  description: The C(nvidia-smi) command lines run (live mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_node import (
    FIX_LAYOUT,
    MigNodeError,
    load_geometry,
    plan_node,
)


def argument_spec():
    spec = dict(
        config=dict(type="dict", required=True),
        select=dict(type="str"),
        gpus=dict(type="list", elements="dict", options=dict(
            index=dict(type="int", required=True),
            device_id=dict(type="str"),
            product=dict(type="str"),
            pci_bus_id=dict(type="str"),
        )),
        mode=dict(type="str", choices=["validate", "compare"], default="validate"),
        mig_strategy=dict(type="str", choices=["none", "single", "mixed"]),
        geometry=dict(type="dict"),
        captured=dict(type="dict", options=dict(
            nvidia_smi_xml=dict(type="str"),
            mig_lgi=dict(type="str"),
            mig_lci=dict(type="str"),
        )),
    )
    spec.update(node_tools.argument_spec())
    return spec


def make_tools(module):
    params = dict(module.params)
    captured = dict((k, v) for k, v in (params.get("captured") or {}).items() if v is not None)
    if captured:
        params["source"] = "captured"
    try:
        return node_tools.from_module_params(params, captured=captured)
    except node_tools.NodeToolsError as exc:
        module.fail_json(msg=str(exc))


def commands(tools):
    return [call.command for call in tools.calls if call.source == "live"]


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    tools = make_tools(module)
    compare_state = params["mode"] == "compare"
    if compare_state and not params["select"]:
        module.fail_json(msg="mode=compare needs select. Fix: name the config to compare against in select.")
    given = None
    if params["gpus"] is not None:
        given = [dict((k, v) for k, v in gpu.items() if v is not None) for gpu in params["gpus"]]
    try:
        geometry = load_geometry(params["geometry"])
        found = plan_node(tools, params["config"], params["select"], given, geometry,
                          mig_strategy=params["mig_strategy"], compare_state=compare_state)
    except MigNodeError as exc:
        facts = dict(exc.facts)
        if compare_state:
            facts.update(drift=[], plan=[], in_sync=False, actual={})
        module.fail_json(msg=exc.msg, commands=commands(tools), **facts)
    result = found["evaluation"]
    output = dict(changed=False, valid=result["valid"], errors=result["errors"], configs=result["configs"],
                  gpus=found["gpus"], commands=commands(tools))
    if not compare_state:
        if not result["valid"]:
            module.fail_json(msg="mig-parted config is invalid: %s%s. %s" % (
                result["errors"][0], " (and %d more)" % (len(result["errors"]) - 1) if len(result["errors"]) > 1 else "",
                FIX_LAYOUT), **output)
        module.exit_json(**output)
    output.update(drift=found["drift"], plan=found["plan"], in_sync=not found["drift"], actual=found["actual_report"])
    module.exit_json(**output)


if __name__ == "__main__":
    main()
