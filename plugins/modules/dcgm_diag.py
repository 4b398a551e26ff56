#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: dcgm_diag
short_description: Run the DCGM GPU diagnostic and judge it strictly
version_added: 0.2.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - Runs C(dcgmi diag -r <level> -j) through the collection's tool runner, with a timeout suited to the level,
    and judges the result. This is the hardware gate of the preflight.
  - Reads the JSON of DCGM 3.x and 4.x (C(gpu_id), C(gpu_ids) or C(entity_id); C(Pass)/C(PASS), C(Skip)/C(SKIP);
    warnings as a string, a list, C({warning, error_id}) objects or C(null)), and the text table as a fallback
    when the output is not JSON.
  - Only a run whose every result is a pass or a skip passes. A run that errors (C(runtime_error)), times out,
    prints nothing or prints something that cannot be read never passes.
  - "The module only reads; it never changes the GPU. Still, the diagnostic loads every GPU for seconds to hours
    and disturbs the workloads on it, so in check mode it does not run by default; it returns RV(skipped=true)
    with the reason C(check mode: dcgmi diag -r 2 would run) and runs nothing. O(run_in_check_mode=true) runs it
    in check mode too."
extends_documentation_fragment:
  - gpu_native.fleet.attributes
attributes:
  check_mode:
    support: partial
    details: In check mode the diagnostic does not run unless O(run_in_check_mode=true); the module returns RV(skipped=true).
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: linux
options:
  level:
    description:
      - The C(dcgmi diag -r) run level. V(1) takes seconds, V(2) about 2 minutes, V(3) about 15 minutes (use it
        for new hardware), V(4) over an hour.
    type: int
    choices: [1, 2, 3, 4]
    default: 2
  timeout:
    description:
      - Seconds before the run is killed and judged a failure. Defaults to the level's length plus a margin
        (300, 900, 2700 and 9000 seconds for levels 1 to 4).
    type: int
  dcgmi:
    description: Name or absolute path of C(dcgmi).
    type: str
    default: dcgmi
  source:
    description:
      - V(live) runs C(dcgmi); V(captured) judges O(captured) through the same parser.
    type: str
    choices: [live, captured]
    default: live
  captured:
    description: A saved output, when O(source=captured).
    type: dict
    suboptions:
      json:
        description: Output of C(dcgmi diag -j).
        type: str
      text:
        description: Output of C(dcgmi diag) (the table).
        type: str
  fail_on_failure:
    description: Fail the task when the diagnostic did not pass. With V(false) the verdict is only returned.
    type: bool
    default: true
  run_in_check_mode:
    description:
      - Run the diagnostic in check mode too. It changes nothing on the GPU, but it stresses it next to whatever
        else runs there; only opt in on a node that is drained.
      - It defaulted to V(true) in earlier releases.
    type: bool
    default: false
  required:
    description:
      - Whether DCGM must be installed. With V(false) a missing C(dcgmi) is RV(status=skip) with its reason
        (the caller decides); with V(true) it is RV(status=fail). Like O(gpu_native.fleet.gpu_bandwidth#module:required).
    type: bool
    default: true
notes:
  - A failing run returns all its results as well as the failure, so a caller with O(fail_on_failure=true) can
    still read RV(failures) with C(ignore_errors) or in a C(rescue) block.
seealso:
  - name: DCGM diagnostics
    description: NVIDIA's description of the run levels and plugins.
    link: https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html
"""

EXAMPLES = r"""
- name: Hardware burn-in on a new node (level 3, about 15 minutes)
  gpu_native.fleet.dcgm_diag:
    level: 3

- name: Judge a diagnostic saved in a support bundle
  gpu_native.fleet.dcgm_diag:
    source: captured
    captured:
      json: "{{ lookup('ansible.builtin.file', 'bundle/dcgmi-diag-r2.json') }}"
    fail_on_failure: false
  register: diag
"""

RETURN = r"""
status:
  description:
    - The check result (docs/DEVELOPING.md, "How a check result looks"). V(pass) when every result passed or was
      skipped and at least one ran; V(fail) when a result failed, C(dcgmi) exited non-zero or is missing with
      O(required=true); V(skip) in check mode (nothing run) or when C(dcgmi) is missing with O(required=false);
      V(error) when nothing could be judged (a timeout, an output that cannot be read).
    - O(fail_on_failure) fails the task on V(fail) and V(error).
  returned: always
  type: str
  choices: [pass, fail, skip, error]
  sample: pass
passed:
  description: Whether every result passed or was skipped, and at least one ran (RV(status=pass)); kept as an extra.
  returned: always
  type: bool
  sample: false
skipped:
  description:
    - V(true) in check mode when the diagnostic was not run (O(run_in_check_mode=false)); RV(reasons) says what
      would have run. RV(passed) is then V(false), since nothing was judged.
  returned: when the run was skipped
  type: bool
  sample: true
tests:
  description:
    - Every test with its per-GPU results (C(gpu) is null when DCGM named no GPU).
    - C(summary) is DCGM 4.x's C(test_summary), the test's own verdict (C(status), C(message)); null before 4.x.
      A summary that says C(fail) fails the run even when no per-GPU result does.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "memory", "category": "Hardware", "results": [{"gpu": 0, "status": "fail", "message": "..."}]}]
failures:
  description: The failed results, one per test and GPU.
  returned: always
  type: list
  elements: dict
  sample: [{"test": "sm_stress", "gpu": 0, "message": "Max stress level of 2128.7 did not exceed ..."}]
warnings_found:
  description: Results with the C(Warn) status (they do not fail the run).
  returned: always
  type: list
  elements: dict
reasons:
  description: One line per reason the run did not pass (or, for a skip, why nothing ran).
  returned: always
  type: list
  elements: str
dcgm_version:
  description: The DCGM version the output names, when it names one (DCGM 4.x JSON - the top-level C(metadata.version)).
  returned: always
  type: str
  sample: "4.2.3"
command:
  description: How C(dcgmi) was run (or replayed) and what happened.
  returned: always
  type: dict
  sample: {"command": "/usr/bin/dcgmi diag -r 2 -j", "status": "ok", "rc": 0, "duration_s": 118.2}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import dcgm
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeTools


def judge(result, required=True):
    """Parse a runner result into the module's return values (the check-result contract: status and reasons).

    A missing ``dcgmi`` is a skip with its reason unless ``required`` (then a failure, as gpu_bandwidth does);
    a timeout, an unreadable output or a replay without the output is an error: nothing was judged.
    """
    out = {"status": check_result.FAIL, "passed": False, "tests": [], "failures": [], "warnings_found": [],
           "reasons": [], "dcgm_version": None, "command": result.as_dict()}
    if result.status == "missing":
        if required:
            out["reasons"].append("%s Fix: install DCGM (datacenter-gpu-manager) on the node, or point dcgmi at it "
                                  "(the DCGM check is required)" % result.message)
        else:
            out["status"] = check_result.SKIP
            out["reasons"].append("%s (the DCGM check is not required: skipped)" % result.message)
        return out
    if result.status not in ("ok", "failed"):
        # timeout, unreadable, not captured: nothing to judge.
        out["status"] = check_result.ERROR
        out["reasons"].append(result.message)
        return out
    text = result.stdout
    parsed = None
    errors = []
    for parser in (dcgm.parse_json, dcgm.parse_table):
        try:
            parsed = parser(text)
            break
        except dcgm.DcgmParseError as exc:
            errors.append(str(exc))
    if parsed is None:
        if len(errors) > 1 and errors[0] == "no JSON object in the output":
            errors.pop(0)  # a table: its parser's error says more
        reason = ("dcgmi output cannot be read (%s). Fix: run dcgmi diag -j on the node, or pass its unmodified "
                  "output" % errors[0])
        if result.status == "failed":
            reason = result.message
        out["reasons"].append(reason)
        out["status"] = check_result.FAIL if result.status == "failed" else check_result.ERROR
        return out
    summary = dcgm.summarise(parsed)
    out.update(tests=parsed["tests"], dcgm_version=parsed["dcgm_version"], passed=summary["passed"],
               failures=summary["failures"], warnings_found=summary["warnings"])
    if summary["failures"]:
        out["reasons"].append("dcgmi diag failed: %s" % dcgm.failure_line(summary["failures"]))
    if result.status == "failed" and out["passed"]:
        # A non-zero exit with a clean report is still not a pass.
        out["passed"] = False
        out["reasons"].append(result.message)
    out["status"] = check_result.PASS if out["passed"] else check_result.FAIL
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            level=dict(type="int", choices=list(dcgm.LEVELS), default=2),
            timeout=dict(type="int"),
            dcgmi=dict(type="str", default="dcgmi"),
            source=dict(type="str", choices=["live", "captured"], default="live"),
            captured=dict(type="dict", options=dict(json=dict(type="str"), text=dict(type="str"))),
            fail_on_failure=dict(type="bool", default=True),
            run_in_check_mode=dict(type="bool", default=False),
            required=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    timeout = params["timeout"]
    if timeout is not None and not 0 < timeout <= 86400:
        module.fail_json(msg="timeout is %d. Fix: pass a number of seconds between 1 and 86400." % timeout)
    if params["source"] == "captured":
        captured = params["captured"] or {}
        if captured.get("json") is None and captured.get("text") is None:
            module.fail_json(msg="source=captured needs captured.json or captured.text. Fix: pass the saved "
                                 "output of dcgmi diag.")
        key = "json" if captured.get("json") is not None else "text"
        tools = NodeTools(source="captured", captured=captured)
        result = tools.run("dcgmi", ["diag", "-r", str(params["level"]), "-j"], capture_key=key)
    else:
        if params["captured"]:
            module.fail_json(msg="captured is only read with source=captured. Fix: set source: captured or drop it.")
        if module.check_mode and not params["run_in_check_mode"]:
            module.exit_json(changed=False, **check_result.result(
                check_result.SKIP, ["check mode: dcgmi diag -r %d would run; nothing was run (run_in_check_mode=true "
                                    "runs it)" % params["level"]],
                skipped=True, passed=False, tests=[], failures=[], warnings_found=[], dcgm_version=None, command={}))
        tools = NodeTools(paths={"dcgmi": params["dcgmi"]})
        result = tools.run("dcgmi", ["diag", "-r", str(params["level"]), "-j"],
                           timeout=timeout or dcgm.LEVEL_TIMEOUTS[params["level"]])
    out = judge(result, required=params["required"])
    out = check_result.result(**out)
    if out["status"] in (check_result.FAIL, check_result.ERROR) and params["fail_on_failure"]:
        module.fail_json(msg="; ".join(out["reasons"]) or "dcgmi diag did not pass.", changed=False, **out)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
