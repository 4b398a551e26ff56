#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: spec_matrix
short_description: Check a GPU node against the standard spec matrix
version_added: 0.1.0
author:
  - gpu_native.fleet maintainers (@gpu-native)
description:
  - Collects, in one pass, the versions and settings a GPU node is held to (OS, kernel, NVIDIA driver, CUDA,
    NVIDIA Container Toolkit, containerd, kubelet, kernel modules, sysctl values, packages, services and the
    GPUs' count, product and modes) and judges them against one profile of the spec matrix.
  - Returns one result per item, with what was expected and what was found, so drift is actionable from the
    job output, AWX reports and readiness metrics alike.
  - Checks the node's versions against the Kubernetes/NVIDIA compatibility table (the table from the
    collection's docs, which the matrix may extend or replace) when the profile has a C(kubernetes) section.
  - Read-only. Files are read directly (C(/proc), C(/sys), os-release, the dpkg status file); at most one call
    each of C(nvidia-smi -q -x), C(nvidia-ctk --version), C(containerd --version), C(kubelet --version),
    C(systemctl show) (all services at once) and C(rpm -q) (only without a dpkg database), and only when the
    profile needs them.
  - A missing tool or driver never breaks the run. The item's RV(results[].actual) is V(null), its
    RV(results[].note) says why (for example V(driver not loaded)), and its status is V(fail) when the thing is
    absent or V(unknown) when it could not be determined.
  - The schema of O(matrix) is described in the collection's C(docs/spec_matrix.md).
extends_documentation_fragment:
  - gpu_native.fleet.attributes
options:
  matrix:
    description:
      - The spec matrix, usually the inventory variable C(gpu_native_spec_matrix).
      - Top-level keys are C(version) (V(1)), C(profiles) (profile name to profile), C(compatibility) (a list of
        rows that replaces the shipped table) and C(compatibility_extra) (rows tried before the table).
      - Profile sections, all optional, are C(description), C(match), C(os), C(kernel), C(driver), C(cuda),
        C(container_toolkit), C(containerd), C(device_plugin), C(kubernetes), C(kernel_modules), C(sysctl),
        C(packages), C(services) and C(gpu).
      - Values are constraints, an exact version or value (a version also matches versions in its series,
        V(1.33) matches V(1.33.2)), a comma-separated list of comparisons such as V(>=5.15.0-100, <5.16)
        with the operators C(>=), C(>), C(<=), C(<), C(==), C(!=), or V(/regex/).
      - Version items (C(kernel.release), C(driver.version), C(packages.*), compatibility rows...) need versions
        (V(550.*.*) is refused; a version matches its series, or use comparisons); counts (C(gpu.count),
        C(gpu.memory_total_mib), C(match.gpu_count)) need whole numbers, as integers or text such as V("8"),
        never booleans.
      - Package versions compare exactly as the node's package manager does (dpkg's order on dpkg systems, rpm's
        C(rpm.vercmp) on rpm systems); versions printed by tools (kernel release, driver, CUDA, nvidia-ctk,
        containerd, kubelet) compare with dpkg's order after dropping a leading C(v), a kernel flavour and SemVer
        build metadata. The table in C(docs/spec_matrix.md) says which rule applies to which item.
      - A C(sysctl) key names a file under C(/proc/sys) (V(vm.max_map_count)); keys with C(..), an absolute path,
        an empty component, a backslash, whitespace or control characters are refused. On the node a file whose
        real path leaves C(/proc/sys) is not read.
      - Unknown keys and malformed constraints fail the task, naming their path
        (for example C(profiles.h100-serving.sysctl_typo)), before anything is collected.
    type: dict
    required: true
  profile:
    description:
      - Name of the profile to judge the node against.
      - When omitted, the first profile (in matrix order) whose C(match) holds on the node is used; failing
        that, the only profile without a C(match).
    type: str
  fail_on_drift:
    description:
      - Fail the task when the node is not compliant (any item V(fail) or V(unknown)).
      - "The failure message lists every such item as C(check.name: expected X, got Y); all return values are
        still returned with the failure."
      - With V(false) the task succeeds and RV(compliant) tells the result.
    type: bool
    default: true
  facts_only:
    description:
      - Collect and return RV(facts) for everything the matrix can ask about, without judging.
      - RV(results) is then empty and RV(compliant) is V(null).
    type: bool
    default: false
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
notes:
  - Needs Python 3.8 or newer on the node and nothing else; it runs on any Linux host, with or without GPUs.
  - The device plugin runs as a cluster DaemonSet, not on the node, so its version is the one the profile
    declares in C(device_plugin.version); it is used only by the compatibility check.
seealso:
  - name: Spec matrix guide
    description: Schema, constraint language, compatibility table and examples.
    link: https://github.com/gpu-native/fleet/tree/main/docs/spec_matrix.md
"""

EXAMPLES = r"""
- name: Check the node against its spec profile (fails on drift)
  gpu_native.fleet.spec_matrix:
    matrix: "{{ gpu_native_spec_matrix }}"

- name: Check against a named profile and keep going on drift (compliance report)
  gpu_native.fleet.spec_matrix:
    matrix: "{{ gpu_native_spec_matrix }}"
    profile: h100-serving
    fail_on_drift: false
  register: spec

- name: Print the drift as a table
  ansible.builtin.debug:
    msg: "{{ spec | gpu_native.fleet.spec_matrix_report(only_problems=true) }}"

- name: A small inline matrix
  gpu_native.fleet.spec_matrix:
    matrix:
      version: 1
      profiles:
        default:
          os: {id: debian, version: "12"}
          kernel: {release: ">=6.1, <6.2"}
          kernel_modules: {absent: [nouveau]}
          sysctl: {vm.max_map_count: ">=262144"}
          services: {containerd: [running, enabled]}

- name: Only collect the facts the matrix can ask about
  gpu_native.fleet.spec_matrix:
    matrix: "{{ gpu_native_spec_matrix }}"
    facts_only: true
  register: node_spec_facts
"""

RETURN = r"""
status:
  description:
    - The check result (docs/DEVELOPING.md, "How a check result looks"). V(pass) when RV(compliant), V(fail) on
      drift (one reason naming every item not compliant), V(skip) with O(facts_only=true), V(error) when no
      profile can be chosen (the task fails).
  returned: always
  type: str
  choices: [pass, fail, skip, error]
  sample: pass
reasons:
  description: Empty on a pass; else one line saying why (the drift line names every item and the fix).
  returned: always
  type: list
  elements: str
compliant:
  description:
    - V(true) when every result has status V(pass); V(false) when any is V(fail) or V(unknown) (kept as an extra).
    - V(null) with O(facts_only=true).
  returned: always
  type: bool
  sample: false
profile:
  description: Name of the profile the node was judged against (V(null) when none could be chosen with O(facts_only)).
  returned: always
  type: str
  sample: h100-serving
profile_selected_by:
  description: How the profile was chosen, V(requested) (the O(profile) option), V(match) or V(default).
  returned: always
  type: str
  sample: match
results:
  description:
    - One entry per judged item, in section order (os, kernel, driver, cuda, container_toolkit, containerd,
      kubernetes, kernel_modules, sysctl, packages, services, gpu, compatibility), items in matrix order.
    - This structure is stable; readiness metrics and AWX reports consume it.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The matrix section, for example V(sysctl), V(gpu) or V(compatibility).
      type: str
      sample: sysctl
    name:
      description:
        - The item within the section, for example V(vm.max_map_count), V(version), V(nvidia_uvm).
        - For V(compatibility), V(row) tells which table row applies; V(driver), V(container_toolkit),
          V(containerd), V(cuda) and V(device_plugin) are that row's requirements.
      type: str
      sample: vm.max_map_count
    expected:
      description:
        - The constraint as written in the matrix (numbers and booleans as text), or a state such as
          V(loaded), V(not loaded), V(absent), V(present), V(running, enabled).
      type: str
      sample: ">=262144"
    actual:
      description:
        - What the node has, as text (V(gpu.count) as an integer); V(null) when absent or undeterminable.
        - For GPU fields that differ between GPUs, a tally such as V(enabled x7, disabled x1).
        - For V(compatibility.row), the label of the row that applies, for example V(kubernetes 1.33).
      type: raw
      sample: "65530"
    status:
      description: V(pass), V(fail) (drift, or the thing is absent) or V(unknown) (could not be determined).
      type: str
      choices: [pass, fail, unknown]
      sample: fail
    note:
      description:
        - Why an item is V(null) or failing (V(driver not loaded), V(kubelet not installed), offending GPUs by
          index and bus id, the compatibility row used), else V(null).
      type: str
      sample: "GPU 7 (00000000:C3:00.0): disabled"
  sample:
    - {check: kernel, name: release, expected: ">=5.15.0-100, <5.16", actual: 5.15.0-105-generic,
       status: pass, note: null}
    - {check: driver, name: version, expected: 550.127.08, actual: null, status: fail,
       note: "driver not loaded: no /proc/driver/nvidia/version"}
summary:
  description: Counts of results by status.
  returned: always
  type: dict
  contains:
    pass:
      description: Items with status V(pass).
      type: int
    fail:
      description: Items with status V(fail).
      type: int
    unknown:
      description: Items with status V(unknown).
      type: int
    total:
      description: All items.
      type: int
  sample: {pass: 31, fail: 2, unknown: 0, total: 33}
facts:
  description:
    - The raw values collected, only for sources that were consulted (all of them with O(facts_only)).
    - Keys C(os) (os-release fields, lower-cased), C(kernel.release), C(driver) (C(version), C(loaded),
      C(source)), C(cuda.version), C(gpu) (C(count), C(pci_count), C(gpus) with C(index), C(pci_bus_id),
      C(pci_device_id), C(uuid), C(product), C(persistence_mode), C(ecc_mode), C(ecc_mode_pending), C(mig_mode),
      C(mig_mode_pending), C(memory_total_mib)), C(container_toolkit) (C(version), C(source)),
      C(containerd.version), C(kubernetes.kubelet_version), C(kernel_modules) (list), C(sysctl), C(packages)
      (name to version or V(null)), C(package_manager), C(services) (unit to C(load_state), C(active_state),
      C(sub_state), C(unit_file_state)), C(commands) (the subprocesses run) and C(notes) (source to reason).
  returned: always
  type: dict
  sample:
    kernel: {release: 6.1.0-18-amd64}
    driver: {version: null, loaded: false, source: null}
    notes: {driver: "driver not loaded: no /proc/driver/nvidia/version"}
    commands: [containerd --version]
compatibility:
  description: The effective compatibility table (shipped rows, replaced or extended by the matrix), in lookup order.
  returned: always
  type: list
  elements: dict
  sample:
    - {kubernetes: "1.33", device_plugin: ">=0.17", driver: ">=550", container_toolkit: ">=1.17",
       source: "operator's guide, March 2026; device plugin ceiling dropped per k8s-device-plugin README"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import NodeFacts
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_matrix import (
    ProfileSelectionError,
    SpecMatrixError,
    drift_message,
    judge_profile,
    matrix_wanted_names,
    public_compatibility,
    select_profile,
    summarize,
    validate_matrix,
)


def run_module(module, facts):
    params = module.params
    try:
        matrix = validate_matrix(params["matrix"])
    except SpecMatrixError as exc:
        module.fail_json(msg="invalid gpu_native_spec_matrix: %s. Fix: correct these keys or constraints "
                             "(schema in docs/spec_matrix.md)" % exc, errors=exc.errors)
    result = {"changed": False, "compliant": None, "profile": None, "profile_selected_by": None, "results": [],
              "summary": summarize([]), "compatibility": public_compatibility(matrix["compatibility"])}
    if params["facts_only"]:
        packages, services, sysctl = matrix_wanted_names(matrix)
        facts.want(packages=packages, services=services, sysctl=sysctl)
        facts.collect_all()
        if matrix["profiles"]:
            try:
                result["profile"], result["profile_selected_by"] = select_profile(matrix, facts, params["profile"])
            except ProfileSelectionError:
                pass
        result["facts"] = facts.as_dict()
        module.exit_json(**check_result.result(check_result.SKIP, ["facts_only: the facts were gathered, nothing "
                                                                   "was judged"], **result))
    try:
        name, how = select_profile(matrix, facts, params["profile"])
    except ProfileSelectionError as exc:
        result["facts"] = facts.as_dict()
        module.fail_json(msg="cannot choose a spec profile: %s" % exc,
                         **check_result.result(check_result.ERROR, ["cannot choose a spec profile: %s" % exc], **result))
    results = judge_profile(matrix, name, facts)
    summary = summarize(results)
    result.update(profile=name, profile_selected_by=how, results=results, summary=summary,
                  compliant=summary["fail"] == 0 and summary["unknown"] == 0, facts=facts.as_dict())
    result = check_result.result(check_result.status_of(result["compliant"]),
                                 [] if result["compliant"] else [drift_message(name, results)], **result)
    if not result["compliant"] and params["fail_on_drift"]:
        module.fail_json(msg=drift_message(name, results), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            matrix=dict(type="dict", required=True),
            profile=dict(type="str"),
            fail_on_drift=dict(type="bool", default=True),
            facts_only=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module, NodeFacts())


if __name__ == "__main__":
    main()
