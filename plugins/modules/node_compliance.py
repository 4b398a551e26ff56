#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_compliance
short_description: Read-only compliance checks of a GPU node in one module execution
version_added: 0.1.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - Runs the node-side compliance checks of C(playbooks/compliance.yml) in one execution, so that a fleet run costs
    one round trip per host. Each check keeps its own result in RV(checks).
  - V(spec) judges the host against its spec matrix profile (the logic of M(gpu_native.fleet.spec_matrix)).
  - V(gpu_health) is the verdict of M(gpu_native.fleet.gpu_health), with the device-plugin count when given.
  - V(containerd) reads C(containerd config dump) and checks that O(runtime_name) is registered with
    C(BinaryName) O(runtime_binary).
  - V(readiness) reads C(gpu_native_node_validation_last_success_ts_seconds) from the readiness agent's
    textfile and checks that it is at most O(readiness_max_age) seconds old.
  - V(isolation) reads the NVIDIA Container Toolkit's config file O(toolkit_config) (TOML, a regular file of at most
    1 MiB) and checks that it still has C(accept-nvidia-visible-devices-envvar-when-unprivileged = false) and
    C(accept-nvidia-visible-devices-as-volume-mounts = true), the GPU isolation settings of the container_toolkit
    role. A missing file or key is a V(fail) (the toolkit's defaults let an unprivileged container take GPUs from
    C(NVIDIA_VISIBLE_DEVICES)); a file that cannot be read or parsed is an V(error). Needs a TOML reader on the
    node's Python (C(tomllib) on 3.11+, else C(tomli) or C(toml)).
  - Tool outputs are cached for the execution, so C(nvidia-smi -q -x) runs once.
  - It never changes the node, and it fails only when its options are wrong; drift is reported in RV(compliant).
extends_documentation_fragment:
  - gpu_native.fleet.node_tools
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
  checks:
    description: The checks to run; the others are reported as V(skip).
    type: list
    elements: str
    choices: [spec, gpu_health, containerd, readiness, isolation]
    default: [spec, gpu_health, containerd, readiness, isolation]
  matrix:
    description: The spec matrix (C(gpu_native_spec_matrix)). Without it the V(spec) check is skipped.
    type: dict
  profile:
    description: The profile to judge; selected by the matrix's C(match) rules when omitted.
    type: str
  spec_root:
    description: Root prefixed to every file the spec facts read (simulated hosts and tests).
    type: path
    default: /
  lspci:
    description: Path or name of C(lspci).
    type: str
    default: lspci
  pci_sysfs_root:
    description: Read when C(lspci) is missing.
    type: path
    default: /sys/bus/pci/devices
  kernel_log:
    description: V(auto) (journal, then dmesg) or a file with the kernel log.
    type: str
    default: auto
  xid_since:
    description: How far back the journal is read for Xids (as M(gpu_native.fleet.gpu_health)).
    type: str
    default: 24h
  expected_gpus:
    description: GPU count the node must show.
    type: int
  device_plugin_count:
    description: C(nvidia.com/gpu) allocatable on the node object, when the API was reachable.
    type: int
  xid_actions:
    description: Overrides of the Xid catalog (as M(gpu_native.fleet.gpu_health)).
    type: dict
    default: {}
  containerd:
    description: Path or name of C(containerd).
    type: str
    default: containerd
  runtime_name:
    description: The runtime handler that must be registered.
    type: str
    default: nvidia
  runtime_binary:
    description: The C(BinaryName) it must point at.
    type: str
    default: /usr/bin/nvidia-container-runtime
  readiness_textfile:
    description: The readiness agent's textfile. Without it the V(readiness) check is skipped.
    type: path
  readiness_max_age:
    description: Oldest acceptable last successful validation, in seconds.
    type: int
    default: 600
  toolkit_config:
    description: The NVIDIA Container Toolkit's config file the V(isolation) check reads.
    type: path
    default: /etc/nvidia-container-runtime/config.toml
notes:
  - Supports check mode; it is read-only either way.
seealso:
  - module: gpu_native.fleet.spec_matrix
  - module: gpu_native.fleet.gpu_health
"""

EXAMPLES = r"""
- name: Compliance checks in one round trip
  gpu_native.fleet.node_compliance:
    matrix: "{{ gpu_native_spec_matrix }}"
    readiness_textfile: /var/lib/prometheus/node-exporter/gpu_native_readiness.prom
  register: compliance
"""

RETURN = r"""
status:
  description:
    - The check result (docs/DEVELOPING.md, "How a check result looks"). V(fail) when a check failed, else
      V(error) when a check could not judge, V(skip) when every check was skipped, else V(pass).
  returned: always
  type: str
  choices: [pass, fail, skip, error]
  sample: pass
reasons:
  description: "One line per check that failed or errored (C(<check> <status>: <actual>))."
  returned: always
  type: list
  elements: str
  sample: ["containerd fail: runtime nvidia is not registered (runtimes: runc)"]
compliant:
  description: True when no check failed or errored (skipped checks do not count); RV(status) is V(pass) or V(skip).
  returned: always
  type: bool
checks:
  description: One result per check, in the order spec, gpu_health, containerd, readiness, isolation.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The check's name.
      type: str
    status:
      description: V(pass), V(fail), V(error) (the check could not judge) or V(skip).
      type: str
    expected:
      description: What the check expects, as text.
      type: str
    actual:
      description: What it found, as text.
      type: str
    items:
      description: The failing items (spec rows, GPU health reasons, or the toolkit settings that are wrong).
      type: list
    parse_ms:
      description: Milliseconds the check itself took on the node (reading and parsing), without the tools' run time.
        Absent for skipped checks.
      type: float
    tool_ms:
      description: Milliseconds spent waiting for the tools this check ran first (cached runs are free).
        Absent for skipped checks.
      type: float
tool_runs:
  description: Tool executions (each argv runs once).
  returned: always
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd import containerd_config
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.fleet_compliance import CHECKS, TOOLKIT_CONFIG, run_checks
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools


def main():
    module = AnsibleModule(
        argument_spec=dict(
            checks=dict(type="list", elements="str", choices=list(CHECKS), default=list(CHECKS)),
            matrix=dict(type="dict"),
            profile=dict(type="str"),
            spec_root=dict(type="path", default="/"),
            lspci=dict(type="str", default="lspci"),
            pci_sysfs_root=dict(type="path", default="/sys/bus/pci/devices"),
            kernel_log=dict(type="str", default="auto"),
            xid_since=dict(type="str", default="24h"),
            expected_gpus=dict(type="int"),
            device_plugin_count=dict(type="int"),
            xid_actions=dict(type="dict", default={}),
            containerd=dict(type="str", default="containerd"),
            runtime_name=dict(type="str", default="nvidia"),
            runtime_binary=dict(type="str", default=containerd_config.DEFAULT_BINARY),
            readiness_textfile=dict(type="path"),
            readiness_max_age=dict(type="int", default=600),
            toolkit_config=dict(type="path", default=TOOLKIT_CONFIG),
            **node_tools.argument_spec(source=False)
        ),
        supports_check_mode=True,
    )
    params = module.params
    for name in ("expected_gpus", "device_plugin_count", "readiness_max_age"):
        if params[name] is not None and params[name] < 0:
            module.fail_json(msg="%s is %d. Fix: use 0 or more." % (name, params[name]))
    if not os.path.isdir(params["spec_root"]):
        module.fail_json(msg="spec_root %s is not a directory. Fix: pass an existing directory (default /)."
                             % params["spec_root"])
    try:
        result = run_checks(params)
    except node_tools.NodeToolsError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **overall(result))


def overall(result):
    """The node's check result over its checks: a failed check fails it, else an errored one is an error."""
    checks = result.get("checks") or []
    statuses = [item["status"] for item in checks]
    if check_result.FAIL in statuses:
        status = check_result.FAIL
    elif check_result.ERROR in statuses:
        status = check_result.ERROR
    elif statuses and all(value == check_result.SKIP for value in statuses):
        status = check_result.SKIP
    else:
        status = check_result.PASS
    reasons = ["%s %s: %s" % (item["check"], item["status"], item["actual"]) for item in checks
               if item["status"] in (check_result.FAIL, check_result.ERROR)
               or status == check_result.SKIP]
    return check_result.result(status, reasons, **result)


if __name__ == "__main__":
    main()
