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
        O(captured.nvidia_smi_xml)).
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
    type: dict
  captured:
    description:
      - Captured outputs to use instead of running C(nvidia-smi), for triage of a support bundle and for tests.
        Unknown keys are rejected.
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
  nvidia_smi:
    description:
      - Path or name of the C(nvidia-smi) binary, for live discovery and O(mode=compare).
    type: str
    default: nvidia-smi
notes:
  - Supports check mode; the module is read-only either way.
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

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig_geometry import (
    GeometryError,
    GeometryIndex,
    merge_geometry,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig_parted import (
    MigParseError,
    PlacementCache,
    actual_state,
    compare,
    evaluate,
    parse_lci,
    parse_lgi,
    resolve_gpus,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.nvidia_smi import (
    NvidiaSmiParseError,
    parse_query_xml,
)

FIX_LAYOUT = ("Fix: change the layouts named in errors (placements per model: nvidia-smi mig -lgipp, "
              "docs/mig.md) or select a config meant for this node's GPUs.")


class _Runner:
    """Runs nvidia-smi (or returns captured text) and records the commands."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.captured = module.params.get("captured") or {}
        self.commands = []
        self._binary = None

    def binary(self):
        if self._binary is None:
            path = self.module.get_bin_path(self.params["nvidia_smi"])
            if path is None:
                self.module.fail_json(
                    msg="nvidia-smi (%s) was not found on the node. Fix: install the NVIDIA driver utilities, set "
                        "nvidia_smi to its path, or pass gpus (and captured for compare) to work offline."
                        % self.params["nvidia_smi"], commands=self.commands)
            self._binary = path
        return self._binary

    def run(self, key, args, empty_ok=False):
        if self.captured.get(key) is not None:
            return self.captured[key]
        argv = [self.binary()] + args
        self.commands.append(" ".join(argv))
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            text = (out + err).strip()
            lowered = text.lower()
            if empty_ok and ("no gpu instances found" in lowered or "no compute instances found" in lowered
                             or "no mig-enabled devices found" in lowered):
                return ""
            first = text.splitlines()[0] if text else "no output"
            self.module.fail_json(
                msg="%s failed (rc=%d): %s. Fix: check the driver with nvidia-smi on the node." % (" ".join(argv), rc, first),
                rc=rc, stdout=out, stderr=err, commands=self.commands)
        return out


def _query_xml(runner):
    text = runner.run("nvidia_smi_xml", ["-q", "-x"])
    try:
        return parse_query_xml(text)
    except NvidiaSmiParseError as exc:
        runner.module.fail_json(
            msg="nvidia-smi -q -x output cannot be read: %s. Fix: check the driver (nvidia-smi -q -x) or pass gpus."
                % exc, commands=runner.commands)


def main():
    module = AnsibleModule(
        argument_spec=dict(
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
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    runner = _Runner(module)
    if params["mode"] == "compare" and not params["select"]:
        module.fail_json(msg="mode=compare needs select. Fix: name the config to compare against in select.")

    try:
        geometry = merge_geometry(params["geometry"])
    except GeometryError as exc:
        module.fail_json(msg="geometry is invalid: %s. Fix: correct the override (see the geometry option)." % exc)
    index = GeometryIndex(geometry)

    query = None
    if params["gpus"] is not None:
        given = [dict((k, v) for k, v in gpu.items() if v is not None) for gpu in params["gpus"]]
    else:
        query = _query_xml(runner)
        given = []
        for gpu in query["gpus"]:
            item = {"index": gpu["index"], "pci_bus_id": gpu.get("pci_bus_id")}
            if gpu.get("pci_device_id"):
                item["device_id"] = gpu["pci_device_id"]
            else:
                item["product"] = gpu.get("product")
            given.append(item)
        if not given:
            module.fail_json(msg="nvidia-smi -q -x lists no GPUs. Fix: check the driver, or pass gpus to validate offline.",
                             commands=runner.commands)
    gpus, gpu_errors = resolve_gpus(given, index)
    if gpu_errors:
        module.fail_json(msg="gpus is invalid: %s. Fix: give each GPU an index and a device_id or product."
                         % "; ".join(gpu_errors), errors=gpu_errors)

    strategy = params["mig_strategy"]
    result = evaluate(params["config"], gpus, geometry=geometry, select=params["select"],
                      mig_strategy=strategy, cache=PlacementCache(geometry))
    output = dict(changed=False, valid=result["valid"], errors=result["errors"], configs=result["configs"],
                  gpus=gpus, commands=runner.commands)

    if params["mode"] == "validate":
        if not result["valid"]:
            module.fail_json(msg="mig-parted config is invalid: %s%s. %s" % (
                result["errors"][0], " (and %d more)" % (len(result["errors"]) - 1) if len(result["errors"]) > 1 else "",
                FIX_LAYOUT), **output)
        module.exit_json(**output)

    # compare
    if query is None:
        query = _query_xml(runner)
    if not result["valid"] or params["select"] not in result["configs"]:
        output.update(drift=[], plan=[], in_sync=False, actual={})
        module.fail_json(msg="config %s is invalid, so there is nothing to compare against: %s. %s"
                         % (params["select"], result["errors"][0] if result["errors"] else "unknown", FIX_LAYOUT),
                         **output)
    any_mig = any(str(g.get("mig_mode") or "").lower() == "enabled" for g in query["gpus"])
    try:
        gi_rows = parse_lgi(runner.run("mig_lgi", ["mig", "-lgi"], empty_ok=True)) if any_mig or runner.captured.get("mig_lgi") else []
        ci_rows = parse_lci(runner.run("mig_lci", ["mig", "-lci"], empty_ok=True)) if any_mig or runner.captured.get("mig_lci") else []
    except MigParseError as exc:
        module.fail_json(msg="%s. Fix: check nvidia-smi mig -lgi/-lci on the node." % exc, **output)
    actual = actual_state(query["gpus"], gi_rows, ci_rows)
    known = set(g["index"] for g in gpus)
    for gpu in query["gpus"]:
        for item in gpus:
            if item["index"] == gpu["index"] and not item.get("pci_bus_id"):
                item["pci_bus_id"] = gpu.get("pci_bus_id")
    drift, plan = compare(result["configs"][params["select"]], actual, gpus)
    output.update(drift=drift, plan=plan, in_sync=not drift,
                  actual=dict((str(k), v) for k, v in sorted(actual.items()) if k in known))
    module.exit_json(**output)


if __name__ == "__main__":
    main()
