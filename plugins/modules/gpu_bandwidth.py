#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_bandwidth
short_description: Measure GPU-to-GPU (NVLink/P2P) bandwidth with nvbandwidth and judge it per GPU model
version_added: 0.2.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - Runs NVIDIA's C(nvbandwidth -t <testcase>...) through the collection's tool runner and judges every GPU pair
    of each device-to-device matrix against a threshold for the GPU model. DCGM measures this bandwidth but does
    not judge it; a node whose NVLink lost links or fell back to PCIe passes C(dcgmi diag) and still serves
    tensor-parallel workloads slowly.
  - "Thresholds are data (module_utils C(nvbandwidth.NVLINK_CATALOG)), keyed by the product name C(nvidia-smi)
    prints: C(NVIDIA H100 80GB HBM3) (H100 SXM5, 900 GB/s), C(NVIDIA H200) (H200 SXM, 900 GB/s),
    C(NVIDIA A100-SXM4-80GB) and C(NVIDIA A100-SXM4-40GB) (600 GB/s), C(NVIDIA B200) (1.8 TB/s); each figure is
    NVIDIA's theoretical NVLink bandwidth per GPU, both directions together, with its source in RV(threshold)."
  - The pass line is our policy, not NVIDIA's. Every GPU pair must reach 70% of the theoretical bandwidth per
    direction (half the per-GPU total; 315 GB/s on H100 and H200 SXM, 210 GB/s on A100 SXM4, 630 GB/s on B200).
    O(thresholds) changes it per model.
  - A pair the tool did not measure (C(N/A) off the diagonal, no peer access), a waived testcase on a node with
    more than one GPU, a testcase the tool does not know, a run that errors, times out or prints nothing readable
    never passes.
  - "The verdict is RV(status): V(pass), V(fail), or V(skip) when there is nothing to judge: C(nvbandwidth) is not
    installed, the node has one GPU, or there is no threshold for the GPU model. With O(required=true) a skip is a
    failure."
  - "The module only reads; it never changes the GPUs. Still, the measurement saturates NVLink and disturbs the
    workloads on the GPUs, so in check mode it does not run by default: RV(status) is V(skip) with the reason
    C(check mode: nvbandwidth would run) and nothing is run. O(run_in_check_mode=true) runs it in check mode
    too."
extends_documentation_fragment:
  - gpu_native.fleet.node_tools
  - gpu_native.fleet.node_tools.captured
  - gpu_native.fleet.attributes
  - gpu_native.fleet.attributes.actiongroup_node_tools
attributes:
  check_mode:
    support: partial
    details: In check mode the measurement does not run unless O(run_in_check_mode=true); the module returns RV(status=skip).
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: linux
options:
  testcases:
    description:
      - The nvbandwidth testcases to run and judge, in order. Only the unidirectional device-to-device ones are
        judged (each cell is one direction of one GPU pair).
    type: list
    elements: str
    choices: [device_to_device_memcpy_read_ce, device_to_device_memcpy_write_ce, device_to_device_memcpy_read_sm,
              device_to_device_memcpy_write_sm]
    default: [device_to_device_memcpy_read_ce]
  timeout:
    description:
      - Seconds the C(nvbandwidth) run may take before its process group is killed and the check fails. A
        device-to-device testcase on 8 GPUs takes well under a minute.
      - Must be above 0 and at most 86400.
    type: int
    default: 600
  nvbandwidth:
    description:
      - Name or absolute path of C(nvbandwidth) (built from NVIDIA/nvbandwidth; no distribution packages it). A
        bare name is looked up on E(PATH), then in C(/usr/local/sbin), C(/usr/local/bin), C(/usr/sbin), C(/usr/bin),
        C(/sbin) and C(/bin).
    type: str
    default: nvbandwidth
  format:
    description:
      - V(text) reads the plain output (every version; it lists the GPUs, which names the model). V(json) runs
        C(nvbandwidth -j) (v0.5 and later); some versions leave its device list empty, so pass O(product) with it.
    type: str
    choices: [text, json]
    default: text
  product:
    description:
      - The GPU model as C(nvidia-smi) prints it (for example V(NVIDIA H100 80GB HBM3)), used to pick the
        threshold. Empty takes the one model the output lists, else asks C(nvidia-smi --query-gpu=name) (live, or
        O(captured.nvidia_smi)); nvbandwidth v0.10 lists no GPUs, so the model and the GPU count come from there.
    type: str
  thresholds:
    description:
      - Per-model overrides, product name to settings. C(min_gbps) is an absolute floor per pair and direction;
        C(fraction) (above 0, at most 1) is of the theoretical bandwidth per direction; C(total_gbps) is the
        theoretical NVLink bandwidth per GPU, both directions (needed for a model the catalog does not list, unless
        C(min_gbps) is set); C(source) is a note returned with the threshold. Set C(min_gbps) or C(fraction), not
        both. Unknown keys are refused, naming their path.
    type: dict
    default: {}
  required:
    description:
      - Turn every skip (C(nvbandwidth) missing, one GPU, no threshold for the model) into a failure.
    type: bool
    default: false
  captured:
    description:
      - The saved output, when O(source=captured).
    type: dict
    suboptions:
      nvbandwidth:
        description: What C(nvbandwidth -t ...) printed, text or JSON (told apart by the first character).
        type: str
      nvidia_smi:
        description:
          - What C(nvidia-smi --query-gpu=name --format=csv,noheader) printed on the node, one GPU a line.
          - Read when the nvbandwidth output lists no GPUs (v0.10 prints no C(Device) lines) or O(product) is empty;
            it gives the model and the GPU count.
        type: str
  fail_on_failure:
    description: Fail the task when RV(status) is V(fail). With V(false) the verdict is only returned.
    type: bool
    default: true
  run_in_check_mode:
    description:
      - Run the measurement in check mode too. It changes nothing on the GPUs, but it loads their links next to
        whatever else runs there; only opt in on a node that is drained.
      - It defaulted to V(true) in earlier releases.
    type: bool
    default: false
notes:
  - Supports check mode.
  - A failing run returns all its results as well as the failure, so a caller with O(fail_on_failure=true) can
    still read RV(pairs) with C(ignore_errors) or in a C(rescue) block.
  - Other tenants' traffic on the GPUs lowers the figures; run it on a cordoned node.
seealso:
  - name: nvbandwidth
    description: NVIDIA's tool, its testcases and output.
    link: https://github.com/NVIDIA/nvbandwidth
  - name: Preflight, bandwidth
    description: How the preflight role runs this check and how to tune the thresholds.
    link: https://github.com/gpu-native/fleet/blob/main/docs/preflight.md
"""

EXAMPLES = r"""
- name: Judge NVLink bandwidth on a cordoned node (skips when nvbandwidth is not installed)
  gpu_native.fleet.gpu_bandwidth:
  register: bandwidth

- name: Require it, with both copy directions, and a stricter floor for H100 SXM
  gpu_native.fleet.gpu_bandwidth:
    testcases: [device_to_device_memcpy_read_ce, device_to_device_memcpy_write_ce]
    required: true
    thresholds:
      "NVIDIA H100 80GB HBM3":
        fraction: 0.8

- name: A model the catalog does not list
  gpu_native.fleet.gpu_bandwidth:
    nvbandwidth: /opt/nvbandwidth/nvbandwidth
    thresholds:
      "NVIDIA H800":
        total_gbps: 400
        source: "vendor datasheet"

- name: Judge an output saved in a support bundle
  gpu_native.fleet.gpu_bandwidth:
    source: captured
    captured:
      nvbandwidth: "{{ lookup('ansible.builtin.file', 'bundle/nvbandwidth-d2d-read.txt') }}"
    fail_on_failure: false
  register: bandwidth
"""

RETURN = r"""
status:
  description:
    - The check result (docs/DEVELOPING.md, "How a check result looks"). V(pass), V(fail), V(skip) (nothing to
      judge; the reason is in RV(reasons)) or V(error) (nothing was measured - nvbandwidth timed out, its output
      cannot be read, no driver - the reason names the cause and the fix). O(fail_on_failure) fails the task on
      V(fail) and V(error).
  returned: always
  type: str
  sample: fail
passed:
  description: Whether RV(status) is V(pass).
  returned: always
  type: bool
  sample: false
reasons:
  description: One line per failure (naming the testcase and the GPU pair) or, for a skip, why.
  returned: always
  type: list
  elements: str
  sample: ["device_to_device_memcpy_read_ce GPU 1 -> GPU 0: 162.45 GB/s, below 315.00 GB/s (70% of 450 GB/s per
            direction, NVIDIA H100 80GB HBM3)"]
product:
  description: The GPU model the threshold was looked up for (null when unknown).
  returned: always
  type: str
  sample: NVIDIA H100 80GB HBM3
threshold:
  description:
    - The threshold used (null without one). C(min_gbps) is the floor per pair and direction; C(total_gbps) and
      C(source) are NVIDIA's theoretical figure and where it is published; C(fraction) and C(policy) are ours;
      C(origin) says whether it came from the catalog, an override or both.
  returned: always
  type: dict
  sample: {"product": "NVIDIA H100 80GB HBM3", "min_gbps": 315.0, "peak_gbps_per_direction": 450.0,
           "total_gbps": 900.0, "fraction": 0.7, "origin": "catalog", "source": "NVIDIA Hopper architecture page ...",
           "policy": "gpu_native.fleet policy, not an NVIDIA figure: ..."}
pairs:
  description: Every GPU pair of every judged matrix, one direction each (C(gbps) null when not measured; C(passed)
    null without a threshold).
  returned: always
  type: list
  elements: dict
  sample: [{"testcase": "device_to_device_memcpy_read_ce", "from_gpu": 0, "to_gpu": 1, "gbps": 370.9, "passed": true}]
worst:
  description: The slowest pair (or the first pair not measured when a threshold applies); null when none was read.
  returned: always
  type: dict
  sample: {"testcase": "device_to_device_memcpy_read_ce", "from_gpu": 1, "to_gpu": 0, "gbps": 162.45}
testcases:
  description: Per requested testcase, its status, the matrix description, the lowest and highest pair, counts and
    the C(coefficient_of_variation) nvbandwidth prints from v0.9 on (null before).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "device_to_device_memcpy_read_ce", "status": "ran", "min_gbps": 370.26, "max_gbps": 372.96,
            "pairs": 56, "failed_pairs": 0, "description": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
            "coefficient_of_variation": 0.0}]
gpu_count:
  description: GPUs the output lists, else the GPUs nvidia-smi lists (nvbandwidth v0.10 lists none); null when neither.
  returned: always
  type: int
  sample: 8
devices:
  description: The GPUs the output lists (index, name, PCI bus id when printed).
  returned: always
  type: list
  elements: dict
nvbandwidth_version:
  description: The version the output names, when it names one.
  returned: always
  type: str
  sample: v0.8
command:
  description: How C(nvbandwidth) was run (or replayed) and what happened.
  returned: always
  type: dict
  sample: {"command": "/usr/local/bin/nvbandwidth -t device_to_device_memcpy_read_ce", "status": "ok", "rc": 0}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvbandwidth as nvb
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import first_line

TOOL_OPTIONS = ("nvidia_smi", "nvbandwidth")


def empty_result(command=None):
    return {"status": "fail", "passed": False, "reasons": [], "product": None, "threshold": None, "pairs": [],
            "worst": None, "testcases": [], "gpu_count": None, "devices": [], "nvbandwidth_version": None,
            "command": command or {}}


def _skip_or_fail(out, reason, required):
    if required:
        out["status"] = "fail"
        out["reasons"] = ["%s (the bandwidth check is required)" % reason]
    else:
        out["status"] = "skip"
        out["reasons"] = [reason]
    out["passed"] = False
    return out


def _query_gpus(tools):
    """``(model, count, why)`` from ``nvidia-smi --query-gpu=name`` (live, or captured.nvidia_smi).

    ``model`` is None (``why`` says why) unless every GPU is of one model; ``count`` is the GPUs listed."""
    result = tools.run("nvidia-smi", ["--query-gpu=name", "--format=csv,noheader"], capture_key="nvidia_smi")
    if not result.ok:
        return None, None, result.message
    listed = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    names = sorted(set(listed))
    if len(names) != 1:
        return None, len(listed) or None, "nvidia-smi names %s" % (", ".join(names) or "no GPU")
    return names[0], len(listed), None


def evaluate(result, testcases, product=None, overrides=None, required=False, tools=None):
    """A runner result -> the module's return values (logic shared with the unit tests)."""
    out = empty_result(result.as_dict())
    if result.status == node_tools.MISSING:
        return _skip_or_fail(out, "%s Fix: install NVIDIA's nvbandwidth (NVIDIA/nvbandwidth, built with cmake) or "
                                  "point nvbandwidth at it" % result.message, required)
    if result.status in (node_tools.TIMEOUT, node_tools.UNREADABLE, node_tools.NOT_CAPTURED,
                         node_tools.NO_DRIVER):
        # nothing was measured: the check could not be made (the contract's error, never a pass)
        out["status"] = check_result.ERROR
        out["reasons"] = [result.message]
        return out
    try:
        parsed = nvb.parse(result.stdout)
    except nvb.NvbandwidthParseError as exc:
        out["reasons"] = [result.message if result.status == node_tools.FAILED else
                          "nvbandwidth output cannot be read: %s. Fix: run nvbandwidth on the node, or pass its "
                          "unmodified output" % exc]
        return out
    nvb.name_waived(parsed, testcases)
    out["devices"] = parsed["devices"]
    out["nvbandwidth_version"] = parsed["version"]
    if result.status == node_tools.FAILED or parsed["errors"] and not any(
            entry["status"] == "ran" for entry in parsed["testcases"]):
        # rc != 0 (a CUDA, NVML or verification error) or an error with no result: never a pass.
        cause = parsed["errors"][0] if parsed["errors"] else first_line(result.stderr or result.stdout, 300, ellipsis=False)
        out["reasons"] = ["nvbandwidth failed%s: %s" % (" (rc=%s)" % result.rc if result.rc else "",
                                                        cause or "no message")]
        return out
    chosen, why = nvb.product_of(parsed, product)
    gpu_count = None
    # nvbandwidth v0.10 lists no GPUs (no "Device N:" lines): nvidia-smi names the model and counts them
    if (chosen is None or not parsed["devices"]) and tools is not None and (
            tools.source == "live" or (tools.captured or {}).get("nvidia_smi") is not None):
        model, gpu_count, nvidia_smi_why = _query_gpus(tools)
        if chosen is None:
            chosen = model
            if model is None:
                why = "%s; %s" % (why, nvidia_smi_why)
    threshold, no_threshold = nvb.threshold_for(chosen, overrides) if chosen else (None, why)
    verdict = nvb.judge(parsed, testcases, threshold, no_threshold, required=required, gpu_count=gpu_count)
    out.update(verdict)
    out["product"] = chosen
    out["threshold"] = threshold
    return out


def main():
    argument_spec = node_tools.argument_spec(tools=TOOL_OPTIONS)
    argument_spec.update(
        testcases=dict(type="list", elements="str", choices=sorted(nvb.JUDGED_TESTCASES),
                       default=list(nvb.DEFAULT_TESTCASES)),
        timeout=dict(type="int", default=600),
        format=dict(type="str", choices=["text", "json"], default="text"),
        product=dict(type="str"),
        thresholds=dict(type="dict", default={}),
        required=dict(type="bool", default=False),
        captured=dict(type="dict", options=dict(nvbandwidth=dict(type="str"), nvidia_smi=dict(type="str"))),
        fail_on_failure=dict(type="bool", default=True),
        run_in_check_mode=dict(type="bool", default=False),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    if not 0 < params["timeout"] <= 86400:
        module.fail_json(msg="timeout is %d. Fix: pass a number of seconds between 1 and 86400." % params["timeout"])
    testcases = params["testcases"]
    if not testcases:
        module.fail_json(msg="testcases is empty. Fix: name at least one, e.g. device_to_device_memcpy_read_ce.")
    if len(set(testcases)) != len(testcases):
        module.fail_json(msg="testcases names one twice (%s). Fix: list each once." % ", ".join(testcases))
    try:
        overrides = nvb.validate_overrides(params["thresholds"])
    except nvb.ThresholdError as exc:
        module.fail_json(msg=str(exc))
    args = ["-t"] + list(testcases) + (["-j"] if params["format"] == "json" else [])
    try:
        if params["source"] == "captured":
            captured = params["captured"] or {}
            if captured.get("nvbandwidth") is None:
                module.fail_json(msg="source=captured needs captured.nvbandwidth. Fix: pass the saved output of "
                                     "nvbandwidth -t %s." % " ".join(testcases))
            tools = node_tools.NodeTools(source="captured", captured=captured)
            result = tools.run("nvbandwidth", args, capture_key="nvbandwidth")
        else:
            if params["captured"]:
                module.fail_json(msg="captured is only read with source=captured. Fix: set source: captured or "
                                     "drop it.")
            if module.check_mode and not params["run_in_check_mode"]:
                out = empty_result()
                out.update(status="skip", reasons=[
                    "check mode: nvbandwidth -t %s would run; nothing was run (run_in_check_mode=true runs it)"
                    % " ".join(testcases)])
                module.exit_json(changed=False, **check_result.result(**out))
            tools = node_tools.from_module_params(params, captured={}, tools=TOOL_OPTIONS)
            result = tools.run("nvbandwidth", args, timeout=params["timeout"])
    except node_tools.NodeToolsError as exc:
        module.fail_json(msg=str(exc))
    out = evaluate(result, testcases, product=params["product"], overrides=overrides, required=params["required"],
                   tools=tools)
    out = check_result.result(**out)
    if out["status"] in (check_result.FAIL, check_result.ERROR) and params["fail_on_failure"]:
        module.fail_json(msg="; ".join(out["reasons"]) or "the bandwidth check did not pass.", changed=False, **out)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
