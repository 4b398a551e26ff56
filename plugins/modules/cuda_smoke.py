#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cuda_smoke
short_description: Run a real CUDA kernel on every GPU and MIG device of a node
version_added: 0.2.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - The CUDA gate of the preflight. With no nvcc and no container, Python's C(ctypes) loads C(libcuda.so.1),
    JIT-loads a small PTX kernel (a fused multiply-add over 4 MiB of float32), launches it, copies the result
    back and checks every element.
  - It tests every GPU that C(nvidia-smi -L) lists, and every MIG device instead of its parent when MIG is on.
    Each device runs in its own child process with E(CUDA_VISIBLE_DEVICES) set to its UUID, so a driver crash
    or hang costs that child only; the module reports it and goes on.
  - "A failure names the CUDA call and C(cuGetErrorName)'s text (C(cuModuleLoadData failed:
    CUDA_ERROR_INVALID_PTX (218)))."
  - "Without a driver it fails cleanly with C(libcuda.so.1 not found: is the NVIDIA driver installed?); with
    O(fail_on_failure=false) it returns RV(passed=false) with that reason instead."
  - "The kernel only computes; the module changes nothing. Still, it creates a CUDA context on every GPU next to
    whatever else runs there, so in check mode it runs nothing by default: it returns RV(skipped=true) with the
    reason C(check mode: a CUDA kernel would run on every GPU). O(run_in_check_mode=true) runs it in check mode
    too."
  - C(nvidia-smi -L) lists the GPUs and MIG devices, through the collection's runner (O(nvidia_smi),
    O(command_timeout); 30 s by default).
extends_documentation_fragment:
  - gpu_native.fleet.node_tools
  - gpu_native.fleet.attributes
  - gpu_native.fleet.attributes.actiongroup_node_tools
attributes:
  check_mode:
    support: partial
    details: In check mode the kernel does not run unless O(run_in_check_mode=true); the module returns RV(skipped=true).
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: linux
options:
  library:
    description: The CUDA driver library to load.
    type: str
    default: libcuda.so.1
  devices:
    description:
      - UUIDs (C(GPU-...) or C(MIG-...)) to test. Empty means every device C(nvidia-smi -L) lists; when
        C(nvidia-smi) cannot list them, every device CUDA enumerates.
    type: list
    elements: str
    default: []
  device_timeout:
    description: Seconds one device may take (context creation, JIT, launch, copy) before it is judged failed.
    type: int
    default: 120
  timeout:
    description:
      - Seconds the whole run may take, every device included (1 to 86400). Devices are tested one after another;
        each gets at most what is left, and the devices not reached by then are reported as not tested (a failure).
    type: int
    default: 900
  fail_on_failure:
    description: Fail the task when a device failed. With V(false) the verdict is only returned.
    type: bool
    default: true
  run_in_check_mode:
    description:
      - Run the kernels in check mode too. They change nothing, but they take GPU memory and time next to
        whatever else runs there; only opt in on a node that is drained.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Run a kernel on every GPU (and every MIG device)
  gpu_native.fleet.cuda_smoke:

- name: Report without failing, for the preflight verdict
  gpu_native.fleet.cuda_smoke:
    fail_on_failure: false
  register: cuda
"""

RETURN = r"""
status:
  description:
    - The check result (docs/DEVELOPING.md, "How a check result looks"). V(pass) when at least one device was
      tested and every device passed, V(fail) otherwise (RV(reasons) says why), V(skip) in check mode when
      nothing was run.
  returned: always
  type: str
  choices: [pass, fail, skip, error]
  sample: pass
passed:
  description: Whether at least one device was tested and every device passed (RV(status=pass)); kept as an extra.
  returned: always
  type: bool
skipped:
  description:
    - V(true) in check mode when nothing was run (O(run_in_check_mode=false)); RV(reasons) says what would have
      run. RV(passed) is then V(false), since nothing was judged.
  returned: when the run was skipped
  type: bool
  sample: true
devices:
  description: One entry per device tested.
  returned: always
  type: list
  elements: dict
  sample: [{"index": "0", "uuid": "GPU-5b1b...", "name": "NVIDIA H200", "passed": true, "error": null,
            "error_name": null, "duration_ms": 412}]
reasons:
  description: One line per failed device, or why nothing could be tested.
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import cuda_smoke
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.module_args import nul_byte_message
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools


def _targets(module, tools, notes):
    if module.params["devices"]:
        return [{"index": str(i), "name": None, "uuid": uuid} for i, uuid in enumerate(module.params["devices"])]
    listing = tools.run("nvidia-smi", ["-L"], capture_key="nvidia_smi_l")
    if listing.ok:
        targets = cuda_smoke.parse_nvidia_smi_l(listing.stdout)
        if targets:
            return targets
        notes.append("nvidia-smi -L listed no GPU; testing the devices CUDA enumerates.")
    else:
        notes.append("%s Testing the devices CUDA enumerates." % listing.message)
    counted = cuda_smoke.smoke_device(library=module.params["library"], timeout=module.params["device_timeout"],
                                      action="count")
    if not counted.get("passed"):
        return counted
    return [{"index": str(i), "name": None, "uuid": str(i)} for i in range(counted["count"])]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            library=dict(type="str", default=cuda_smoke.LIBRARY),
            devices=dict(type="list", elements="str", default=[]),
            device_timeout=dict(type="int", default=120),
            timeout=dict(type="int", default=900),
            fail_on_failure=dict(type="bool", default=True),
            run_in_check_mode=dict(type="bool", default=False),
            **node_tools.argument_spec(source=False)
        ),
        supports_check_mode=True,
    )
    params = module.params
    message = nul_byte_message(params, ("library", "devices", "nvidia_smi"))
    if message:
        module.fail_json(msg=message)
    if not 0 < params["timeout"] <= 86400:
        module.fail_json(msg="timeout is %d. Fix: pass seconds between 1 and 86400 (the whole run's deadline)."
                         % params["timeout"])
    if not 0 < params["device_timeout"] <= 3600:
        module.fail_json(msg="device_timeout is %d. Fix: pass seconds between 1 and 3600." % params["device_timeout"])
    if module.check_mode and not params["run_in_check_mode"]:
        module.exit_json(changed=False, **check_result.result(
            check_result.SKIP, ["check mode: a CUDA kernel would run on %s; nothing was run (run_in_check_mode=true "
                                "runs it)" % ("%d listed device(s)" % len(params["devices"]) if params["devices"]
                                              else "every GPU")],
            skipped=True, passed=False, devices=[]))
    try:
        tools = node_tools.NodeTools(paths={"nvidia-smi": params["nvidia_smi"]}, timeout=params["command_timeout"])
    except node_tools.NodeToolsError as exc:
        module.fail_json(msg=str(exc))
    try:
        cuda_smoke.check_library(params["library"])
    except cuda_smoke.LibraryMissing as exc:
        # a verdict like any other failed device: fail_on_failure decides, as llm_smoke does for connection errors
        missing = check_result.result(check_result.FAIL, [str(exc)], passed=False, devices=[])
        if params["fail_on_failure"]:
            module.fail_json(msg=str(exc), **missing)
        module.exit_json(changed=False, **missing)
    notes = []
    targets = _targets(module, tools, notes)
    devices = []
    reasons = []
    if isinstance(targets, dict):
        reasons.append("no CUDA device could be enumerated: %s" % targets.get("error"))
        targets = []
    deadline = time.monotonic() + params["timeout"]
    for position, target in enumerate(targets):
        left = deadline - time.monotonic()
        if left < 1:
            untested = targets[position:]
            reasons.append("%d device(s) not tested (%s): the run's timeout of %d s was reached. Fix: raise timeout, "
                           "or test fewer devices at once (devices)" % (
                               len(untested), ", ".join(t["index"] for t in untested[:8]) +
                               (", ..." if len(untested) > 8 else ""), params["timeout"]))
            break
        result = cuda_smoke.smoke_device(target["uuid"], params["library"], min(params["device_timeout"], int(left)))
        entry = {"index": target["index"], "uuid": target["uuid"], "name": result.get("name") or target["name"],
                 "passed": bool(result.get("passed")), "error": result.get("error"),
                 "error_name": result.get("error_name"), "duration_ms": result.get("duration_ms")}
        devices.append(entry)
        if not entry["passed"]:
            reasons.append("device %s (%s): %s" % (entry["index"], entry["uuid"], entry["error"]))
    if not devices and not reasons:
        reasons.append("no device to test: nvidia-smi -L and CUDA found none")
    passed = bool(devices) and not reasons
    for note in notes:
        module.warn(note)
    result = check_result.result(check_result.status_of(passed), reasons, changed=False, passed=passed,
                                 devices=devices)
    if not passed and params["fail_on_failure"]:
        module.fail_json(msg="CUDA smoke test failed: %s" % "; ".join(reasons[:3]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
