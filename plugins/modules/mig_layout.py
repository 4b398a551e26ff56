#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mig_layout
short_description: Apply a MIG layout from a mig-parted config to a node's GPUs at planned placements
version_added: 0.2.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - Plans with the same code as M(gpu_native.fleet.mig_config) (strict schema, exact placement, drift from the actual
    state) and then applies the plan.
  - With O(tool=nvidia-smi) it destroys the old instances of each drifting GPU, changes MIG modes, finishes pending
    mode changes with a GPU reset when O(gpu_reset) allows it, and creates the instances at their planned starts
    (C(nvidia-smi mig -i N -cgi <profile id>:<start>,... -C)).
  - With O(tool=mig-parted) it writes the whole config to O(mig_parted_config_path) and runs
    C(nvidia-mig-parted apply -f <path> -c <select>).
  - Before touching a GPU it refuses what the hardware would refuse (an unknown profile, an impossible placement,
    a GPU with compute processes when O(force=false)) with a one-line error naming the GPU and profile.
  - On a failure half-way it stops, and reports which GPUs were changed (RV(changed_gpus)) and which were not
    (RV(untouched_gpus)); no later step runs.
  - After applying it reads the node again and fails when the layout still drifts.
attributes:
  check_mode:
    support: full
    description: Reports the plan and C(changed), running only the read-only C(nvidia-smi) calls.
  diff_mode:
    support: full
    description: Returns, per GPU, the MIG layout before and after (or the one it would apply, in check mode).
  platform:
    support: full
    platforms: linux
options:
  config:
    description: The mig-parted document, as a mapping with C(version) and C(mig-configs).
    type: dict
    required: true
  select:
    description: The name of the config in C(mig-configs) to apply.
    type: str
    required: true
  state:
    description: V(present) makes the node's MIG layout match O(select).
    type: str
    choices: [present]
    default: present
  tool:
    description: How to apply. V(nvidia-smi) applies the plan itself; V(mig-parted) hands the config to mig-parted.
    type: str
    choices: [nvidia-smi, mig-parted]
    default: nvidia-smi
  mig_parted:
    description: Name or absolute path of C(nvidia-mig-parted), for O(tool=mig-parted).
    type: str
    default: nvidia-mig-parted
  mig_parted_config_path:
    description: Where O(tool=mig-parted) writes the config (atomically, mode 0644).
    type: path
    default: /etc/nvidia-mig-manager/gpu-native-config.yaml
  force:
    description: Apply even when a GPU that changes has compute processes (they lose their GPU).
    type: bool
    default: false
  gpu_reset:
    description:
      - Reset GPUs whose MIG mode change stays pending (C(nvidia-smi -i <GPUs> -r)). Only safe on a drained node.
      - When false, a pending change fails the task naming the GPUs.
    type: bool
    default: true
  timeout:
    description:
      - Seconds for the whole run, every C(nvidia-smi) or C(nvidia-mig-parted) call together (each call also keeps
        its own O(command_timeout)). A layout on many GPUs runs several commands per GPU; once this is spent nothing
        more runs and the task fails naming the GPUs changed and not changed, as for any failed command.
      - Between 1 and 86400.
    type: int
    default: 1800
  mig_strategy:
    description: The device plugin's C(migStrategy) the config is used with. V(single) adds its consistency check.
    type: str
    choices: [none, single, mixed]
  geometry:
    description: Additions or overrides to the MIG geometry, as for M(gpu_native.fleet.mig_config).
    type: dict
  captured:
    description:
      - Captured outputs replayed with O(source=captured), to plan offline in check mode. Unknown keys are rejected.
    type: dict
    suboptions:
      nvidia_smi_xml:
        description: Output of C(nvidia-smi -q -x).
        type: str
      mig_lgi:
        description: Output of C(nvidia-smi mig -lgi).
        type: str
      mig_lci:
        description: Output of C(nvidia-smi mig -lci).
        type: str
      compute_apps:
        description: Output of C(nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name --format=csv,noheader).
        type: str
extends_documentation_fragment:
  - gpu_native.fleet.node_tools
  - gpu_native.fleet.node_tools.captured
  - gpu_native.fleet.attributes
  - gpu_native.fleet.attributes.actiongroup_node_tools
notes:
  - Supports check mode (reports the plan and C(changed), runs only the read-only C(nvidia-smi) calls) and diff mode
    (the MIG layout per GPU before and after, as text).
  - With O(source=captured) the module only plans; use it in check mode.
  - When a mode change is still pending after the reset, RV(reboot_required) is true and no instances are created on
    those GPUs; reboot and run the module again (the role gpu_native.fleet.mig does that when allowed).
seealso:
  - module: gpu_native.fleet.mig_config
  - name: mig-parted
    description: NVIDIA's MIG partition editor.
    link: https://github.com/NVIDIA/mig-parted
"""

EXAMPLES = r"""
- name: Apply layout all-balanced on a drained node
  gpu_native.fleet.mig_layout:
    config: "{{ mig_parted_config }}"
    select: all-balanced
  register: mig_applied

- name: Show what would change, per GPU
  gpu_native.fleet.mig_layout:
    config: "{{ mig_parted_config }}"
    select: all-1g.10gb
  check_mode: true
  diff: true

- name: Let mig-parted apply the layout
  gpu_native.fleet.mig_layout:
    config: "{{ mig_parted_config }}"
    select: all-balanced
    tool: mig-parted
"""

RETURN = r"""
status:
  description:
    - The check result (docs/DEVELOPING.md, "How a check result looks"). V(pass) when the GPUs hold the layout
      (already, or after this run), V(fail) while they drift (check mode lists the drift; a run that waits for a
      GPU reset or reboot says so), V(error) when the task failed before it could judge or apply.
  returned: always
  type: str
  choices: [pass, fail, skip, error]
  sample: pass
reasons:
  description: Empty on a pass; else one line per drift or why the layout is not there yet.
  returned: always
  type: list
  elements: str
plan:
  description: One item per GPU that drifted, as RV(gpu_native.fleet.mig_config#module:plan) returns it.
  returned: always
  type: list
  elements: dict
  sample:
    - {index: 0, pci_bus_id: "0000:1b:00.0", model: H100-80GB, mig_enabled: true, mode_change: true, destroy: false,
       create: "5:0,14:4,19:6", instances: []}
drift:
  description: What differed before the run, each C({index, kind, expected, actual, message}).
  returned: always
  type: list
  elements: dict
changed_gpus:
  description: Indexes of the GPUs the module changed (on failure, those changed before it).
  returned: always
  type: list
  elements: int
  sample: [0, 1]
untouched_gpus:
  description: Planned GPUs that were not changed when the module failed half-way.
  returned: on failure while applying
  type: list
  elements: int
reboot_required:
  description: True when a MIG mode change is still pending after the GPU reset (see RV(pending_gpus)).
  returned: always
  type: bool
pending_gpus:
  description: GPUs whose MIG mode change waits for a reboot.
  returned: always
  type: list
  elements: int
steps:
  description: The changing commands run, each C({command, result}).
  returned: always
  type: list
  elements: dict
commands:
  description: Every command line run (live mode).
  returned: always
  type: list
  elements: str
resources:
  description:
    - The extended resources the NVIDIA device plugin should advertise for the layout with O(mig_strategy)
      (V(mixed) - C(nvidia.com/mig-<profile>) and C(nvidia.com/gpu) for GPUs without MIG; V(single) -
      C(nvidia.com/gpu) per instance); null for other strategies, and under V(single) for a layout with MIG on
      some GPUs and off on others (the device plugin refuses to start there; a warning says so).
  returned: always
  type: dict
  sample: {"nvidia.com/gpu": "6", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "2", "nvidia.com/mig-4g.40gb": "2"}
mixed_resources:
  description:
    - The layout's devices named as under V(mixed), whatever O(mig_strategy) - C(nvidia.com/mig-<profile>) per
      instance and C(nvidia.com/gpu) per GPU without MIG - which is how NVIDIA's DRA driver publishes them (a
      MIG-enabled GPU only through its MIG devices). The mig role waits for a DRA node's ResourceSlices to show them.
  returned: always
  type: dict
  sample: {"nvidia.com/gpu": "6", "nvidia.com/mig-1g.10gb": "2"}
gpus:
  description: The node's GPUs with the model each resolved to.
  returned: always
  type: list
  elements: dict
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.http_deadline import Deadline
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.regular_file import kind_of, read_regular
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_node import (
    MIG_PARTED,
    Applier,
    MigNodeError,
    compute_apps,
    layout_lines,
    load_geometry,
    plan_node,
    step_text,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_plan import expected_resources, single_strategy_refusal


def _fail(module, tools, exc, **extra):
    facts = dict(changed=False, changed_gpus=[], steps=[], reboot_required=False, pending_gpus=[])
    facts.update(extra)
    facts.update(exc.facts)
    module.fail_json(msg=exc.msg, commands=_commands(tools),
                     **check_result.result(check_result.ERROR, [exc.msg], **facts))


def _done(module, tools, result, status, reasons=None):
    """Exit with the check-result contract: pass when the GPUs hold the layout, fail while they drift."""
    module.exit_json(commands=_commands(tools), **check_result.result(status, reasons, **result))


def _commands(tools):
    return [call.command for call in tools.calls if call.source == "live"]


def _refuse_busy(tools, found, force):
    """GPUs of the plan with compute processes, unless force."""
    if force:
        return
    apps = compute_apps(tools, found["query"])
    busy = [item for item in found["plan"] if apps.get(item["index"])]
    if busy:
        item = busy[0]
        raise MigNodeError(
            "GPU %d (%s) is in use by %s; changing it to %s would take the GPU from them. Fix: stop those processes "
            "(drain the node), or set force: true." % (
                item["index"], item["model"], ", ".join(apps[item["index"]]),
                "MIG disabled" if not item["mig_enabled"] else (item["create"] and ", ".join(
                    i["profile"] for i in item["instances"])) or "no instances"))


def _config_target(path):
    """The file ``mig_parted_config_path`` names: the real file behind a symlink (the link stays a link).

    Raises MigNodeError, before anything changes, when it is (or leads to) a directory, FIFO, device or socket.
    """
    target = os.path.realpath(path)
    try:
        kind = kind_of(os.stat(target).st_mode)
    except OSError:
        kind = None  # absent (or unreadable: the write says why)
    if kind is not None:
        raise MigNodeError("mig_parted_config_path %s%s is %s. Nothing was changed. Fix: point it at a file "
                           "(it is written as the mig-parted config)." % (
                               path, " (-> %s)" % target if target != path else "", kind))
    return target


def _write_config(module, path, config):
    """Write the mig-parted config to ``path`` (already checked by :func:`_config_target`); True when it changed."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"  # JSON is YAML; mig-parted reads either
    if os.path.exists(path):
        try:
            if read_regular(path, len(text.encode("utf-8"))) == text.encode("utf-8"):
                return False
        except (IOError, OSError) as exc:
            raise MigNodeError("mig_parted_config_path %s cannot be read: %s. Nothing was changed. Fix: point it at "
                               "a readable file." % (path, exc.strerror or exc))
    handle, temp = tempfile.mkstemp(dir=directory, prefix=".mig-config.")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.chmod(temp, 0o644)
    module.atomic_move(temp, path)
    return True


def main():
    spec = dict(
        config=dict(type="dict", required=True),
        select=dict(type="str", required=True),
        state=dict(type="str", choices=["present"], default="present"),
        tool=dict(type="str", choices=["nvidia-smi", "mig-parted"], default="nvidia-smi"),
        mig_parted=dict(type="str", default=MIG_PARTED),
        mig_parted_config_path=dict(type="path", default="/etc/nvidia-mig-manager/gpu-native-config.yaml"),
        force=dict(type="bool", default=False),
        gpu_reset=dict(type="bool", default=True),
        mig_strategy=dict(type="str", choices=["none", "single", "mixed"]),
        geometry=dict(type="dict"),
        timeout=dict(type="int", default=1800),
    )
    spec.update(node_tools.argument_spec(tools=("nvidia_smi",)))
    spec["captured"] = dict(type="dict", options=dict(
        nvidia_smi_xml=dict(type="str"), mig_lgi=dict(type="str"), mig_lci=dict(type="str"),
        compute_apps=dict(type="str")))
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    if not 1 <= params["timeout"] <= 86400:
        module.fail_json(msg="timeout is %d. Fix: pass seconds between 1 and 86400 (the whole run's deadline)."
                         % params["timeout"])
    try:
        tools = node_tools.from_module_params(params, captured=dict(
            (k, v) for k, v in (params.get("captured") or {}).items() if v is not None))
        tools.paths[MIG_PARTED] = params["mig_parted"]
        tools.deadline = Deadline(params["timeout"])
    except node_tools.NodeToolsError as exc:
        module.fail_json(msg=str(exc))
    if params["source"] == "captured" and not module.check_mode:
        module.fail_json(msg="source=captured only plans and cannot apply. Fix: run in check mode, or use source=live.")
    if params["source"] != "captured" and any(v is not None for v in (params.get("captured") or {}).values()):
        module.fail_json(msg="captured is only read with source=captured. Fix: set source: captured or drop captured.")

    try:
        config_target = _config_target(params["mig_parted_config_path"]) if params["tool"] == "mig-parted" else None
        geometry = load_geometry(params["geometry"])
        found = plan_node(tools, params["config"], params["select"], None, geometry,
                          mig_strategy=params["mig_strategy"], compare_state=True)
    except MigNodeError as exc:
        _fail(module, tools, exc)
    plan = found["plan"]
    gpus = found["gpus"]
    if params["mig_strategy"] == "single":
        refused = single_strategy_refusal(found["evaluation"]["configs"][params["select"]])
        if refused:
            module.warn(refused)
    result = dict(changed=bool(plan), plan=plan, drift=found["drift"], gpus=gpus, changed_gpus=[], steps=[],
                  reboot_required=False, pending_gpus=[],
                  resources=expected_resources(found["evaluation"]["configs"][params["select"]], params["mig_strategy"]),
                  mixed_resources=expected_resources(found["evaluation"]["configs"][params["select"]], "mixed"))
    if module._diff:
        result["diff"] = {"before_header": "MIG layout (now)", "after_header": "MIG layout %s" % params["select"],
                          "before": layout_lines(gpus, found["actual"]),
                          "after": layout_lines(gpus, found["actual"], plan)}
    if not plan:
        _done(module, tools, result, check_result.PASS)
    try:
        _refuse_busy(tools, found, params["force"])
    except MigNodeError as exc:
        _fail(module, tools, exc, plan=plan, drift=found["drift"])
    if module.check_mode:
        result["changed_gpus"] = [item["index"] for item in plan]
        _done(module, tools, result, check_result.FAIL, [d["message"] for d in found["drift"]]
              or ["GPUs %s differ from layout %s" % (", ".join(str(i["index"]) for i in plan), params["select"])])

    applier = Applier(tools, plan)
    try:
        if params["tool"] == "mig-parted":
            _write_config(module, config_target, params["config"])
            args = ["apply", "-f", params["mig_parted_config_path"], "-c", params["select"]]
            outcome = tools.run(MIG_PARTED, args)
            applier.steps.append({"command": step_text(MIG_PARTED, args), "result": outcome.status})
            if not outcome.ok:
                raise MigNodeError(
                    "%s: %s. Fix: see the mig-parted output (returned as steps); mig-parted applies the whole config, "
                    "so check every GPU with nvidia-smi mig -lgi." % (step_text(MIG_PARTED, args), outcome.message),
                    changed=True, changed_gpus=[item["index"] for item in plan], untouched_gpus=[])
            applier.changed_gpus = [item["index"] for item in plan]
        else:
            applier.destroy()
            applier.modes()
            pending = applier.pending(params["gpu_reset"])
            if pending:
                result.update(changed_gpus=sorted(applier.changed_gpus), steps=applier.steps, reboot_required=True,
                              pending_gpus=pending)
            applier.create(skip=pending)
            if pending:
                _done(module, tools, result, check_result.FAIL,
                      ["GPUs %s wait for a GPU reset or a reboot to finish the layout. Fix: reboot the node (or drain "
                       "it and allow gpu_reset), then run again" % ", ".join(str(index) for index in pending)])
        after = plan_node(tools, params["config"], params["select"], None, geometry,
                          mig_strategy=params["mig_strategy"], compare_state=True)
    except MigNodeError as exc:
        facts = dict(changed=bool(applier.changed_gpus), changed_gpus=sorted(applier.changed_gpus),
                     untouched_gpus=[i["index"] for i in plan if i["index"] not in applier.changed_gpus],
                     steps=applier.steps, plan=plan, drift=found["drift"])
        facts.update(exc.facts)
        exc.facts = facts
        _fail(module, tools, exc)
    result.update(changed_gpus=sorted(applier.changed_gpus), steps=applier.steps)
    if after["drift"]:
        module.fail_json(msg="after applying, the node still drifts: %s. Fix: check the GPUs with nvidia-smi mig -lgi "
                             "and run again." % "; ".join(d["message"] for d in after["drift"]),
                         commands=_commands(tools), **check_result.result(
                             check_result.FAIL, [d["message"] for d in after["drift"]], **result))
    _done(module, tools, result, check_result.PASS)


if __name__ == "__main__":
    main()
