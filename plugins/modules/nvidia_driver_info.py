#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_info
short_description: Report the NVIDIA kernel driver's state on a node
version_added: 0.1.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - Reads what a driver change depends on and what proves it worked, without changing anything.
  - NVIDIA GPUs and NVSwitches from sysfs (PCI class 0302/0300 and 0680, vendor 10de).
  - Processes holding C(/dev/nvidia*) open, found through C(/proc/*/fd) like C(fuser) does.
  - What DKMS did with the driver's module for the running kernel (C(dkms status)).
  - Whether the kernel module is loaded and at which version, and who signed its file (C(modinfo)).
  - The Secure Boot state (EFI variable, else C(mokutil --sb-state)) and whether a MOK certificate is enrolled
    (C(mokutil --test-key)).
  - The GPUs C(nvidia-smi -L) lists, judged from its output rather than its exit code.
  - Used by the P(gpu_native.fleet.nvidia_driver#role) role; useful on its own for audits.
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
  dkms_module:
    description:
      - Name under which DKMS registers the driver's module.
      - C(nvidia-current) on Debian, C(nvidia-srv) for Ubuntu's C(-server) packages, C(nvidia) for NVIDIA's CUDA repository.
    type: str
    default: nvidia
  dkms_version:
    description:
      - Only consider DKMS entries of this version (exact, or an upstream prefix such as C(535.261.03)).
      - Empty means any version.
    type: str
    default: ''
  kernel_module_file:
    description:
      - Name of the driver's module file (without C(.ko)) that C(modinfo) looks up for the signer.
    type: str
    default: nvidia
  kernel:
    description:
      - Kernel release to check DKMS and the module file against. Empty means the running kernel.
    type: str
    default: ''
  mok_certificate:
    description:
      - Certificate DKMS signs modules with (for example C(/var/lib/dkms/mok.pub)).
      - When Secure Boot is on and this file exists, the module reports whether it is enrolled.
    type: path
  query_nvidia_smi:
    description:
      - Run C(nvidia-smi -L) when it is installed.
    type: bool
    default: true
extends_documentation_fragment:
  - gpu_native.fleet.node_tools
  - gpu_native.fleet.attributes
  - gpu_native.fleet.attributes.actiongroup_node_tools
notes:
  - Supports check mode; it never changes anything.
  - In a container the host's kernel has no headers, so DKMS only registers the module (state C(added)),
    and C(nvidia-smi) finds no driver. Both are reported, not treated as errors.
seealso:
  - name: gpu_native.fleet.nvidia_driver role
    description: Installs and verifies the driver using this module.
    link: https://github.com/gpu-native/fleet/blob/main/docs/node_stack.md
"""

EXAMPLES = r"""
- name: Read the driver state
  gpu_native.fleet.nvidia_driver_info:
    dkms_module: nvidia-current
    dkms_version: 535.261.03
    kernel_module_file: nvidia-current
    mok_certificate: /var/lib/dkms/mok.pub
  register: driver_state

- name: Refuse to continue while the GPU is in use
  ansible.builtin.assert:
    that: driver_state.device_users | length == 0
    fail_msg: "GPU in use by PIDs {{ driver_state.device_users | map(attribute='pid') | list }}"
"""

RETURN = r"""
kernel:
  description: Kernel release the checks refer to.
  returned: always
  type: str
  sample: 6.1.0-28-amd64
pci_gpus:
  description:
    - NVIDIA GPUs found in sysfs (class 0302 or 0300, vendor 10de).
    - C(architecture) is the GPU architecture of the device id (C(volta), C(turing), C(ampere), C(ada), C(hopper),
      C(blackwell)), C(unknown) for an id outside the collection's table; it decides the driver branch floor and the
      kernel module flavour (see the P(gpu_native.fleet.nvidia_driver#role) role).
  returned: always
  type: list
  elements: dict
  sample: [{"pci_bus_id": "0000:3b:00.0", "class_code": "0302", "vendor_id": "10de", "device_id": "2330",
            "architecture": "hopper"}]
pci_nvswitches:
  description: NVIDIA NVSwitches found in sysfs (class 0680, vendor 10de).
  returned: always
  type: list
  elements: dict
  sample: []
device_users:
  description: Processes holding an NVIDIA device node open.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "command": "python3", "devices": ["/dev/nvidia0", "/dev/nvidiactl"]}]
dkms:
  description: What DKMS reports for the driver's module.
  returned: always
  type: dict
  contains:
    present:
      description: Whether the C(dkms) command exists.
      type: bool
    entries:
      description: Parsed C(dkms status) lines for the module.
      type: list
      elements: dict
    state:
      description: C(installed) or C(built) for the kernel, C(added) when registered but not built, null when unknown to DKMS.
      type: str
    headers_present:
      description: Whether C(/lib/modules/<kernel>/build) exists (the kernel headers DKMS builds against).
      type: bool
  sample: {"present": true, "state": "added", "headers_present": false, "entries": []}
module:
  description: The kernel module.
  returned: always
  type: dict
  contains:
    loaded:
      description: Whether the C(nvidia) module is loaded.
      type: bool
    version:
      description: Version of the loaded module, null when not loaded.
      type: str
    signer:
      description: Signer of the module file for the kernel (C(modinfo -F signer)), null when unsigned or absent.
      type: str
    file:
      description: Path of the module file for the kernel, null when absent.
      type: str
  sample: {"loaded": false, "version": null, "signer": null, "file": null}
nouveau_loaded:
  description: Whether the nouveau module is loaded (it blocks the NVIDIA driver until a reboot).
  returned: always
  type: bool
  sample: false
secure_boot:
  description: Secure Boot state.
  returned: always
  type: dict
  contains:
    enabled:
      description: True, false, or null when the machine has no EFI or the state cannot be read.
      type: bool
    source:
      description: Where the state came from (C(efivar), C(mokutil) or C(none)).
      type: str
    mok_certificate_enrolled:
      description: Whether O(mok_certificate) is enrolled; null when not checked.
      type: bool
  sample: {"enabled": false, "source": "efivar", "mok_certificate_enrolled": null}
nvidia_smi:
  description: What C(nvidia-smi -L) reported.
  returned: always
  type: dict
  contains:
    present:
      description: Whether C(nvidia-smi) is installed.
      type: bool
    rc:
      description: Exit code, null when not run or when it did not answer within O(command_timeout).
      type: int
    gpus:
      description: GPUs listed (C(index), C(name), C(uuid), C(mig_devices)).
      type: list
      elements: dict
    message:
      description: The first line of its output when it listed no GPU (for example the "couldn't communicate" error).
      type: str
  sample: {"present": true, "rc": 9, "gpus": [], "message": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_driver import (
    SECURE_BOOT_EFIVAR,
    dkms_state_for_kernel,
    find_device_users,
    gpu_architecture,
    parse_dkms_status,
    parse_mokutil_sb_state,
    parse_mokutil_test_key,
    parse_nvidia_smi_list,
    secure_boot_from_efivar,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.module_args import nul_byte_message
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.pci import (
    nvidia_gpus,
    nvidia_nvswitches,
    read_sysfs_pci_devices,
)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def _run(module, args):
    """Run a tool through the shared runner: (rc, stdout, stderr), or None when it is missing.

    A timeout gives rc None and the runner's one-line message as stderr."""
    result = module.tools.run(args[0], args[1:])
    if result.status == node_tools.MISSING:
        return None
    if result.status == node_tools.TIMEOUT:
        return None, result.stdout, result.message
    return result.rc, result.stdout, result.stderr


def _dkms(module, kernel):
    result = {"present": False, "entries": [], "state": None,
              "headers_present": os.path.isdir("/lib/modules/%s/build" % kernel)}
    ran = _run(module, ["dkms", "status"])
    if ran is None:
        return result
    entries = [e for e in parse_dkms_status(ran[1]) if e["module"] == module.params["dkms_module"]]
    result.update(present=True, entries=entries,
                  state=dkms_state_for_kernel(entries, module.params["dkms_module"], kernel,
                                              module.params["dkms_version"] or None))
    return result


def _kernel_module(module, kernel):
    loaded = os.path.isdir("/sys/module/nvidia")
    info = {"loaded": loaded, "version": _read("/sys/module/nvidia/version") if loaded else None,
            "signer": None, "file": None}
    ran = _run(module, ["modinfo", "-k", kernel, "-n", module.params["kernel_module_file"]])
    if ran is not None and ran[0] == 0 and ran[1].strip():
        info["file"] = ran[1].strip()
        signer = _run(module, ["modinfo", "-k", kernel, "-F", "signer", module.params["kernel_module_file"]])
        if signer is not None and signer[0] == 0:
            info["signer"] = signer[1].strip() or None
    return info


def _secure_boot(module):
    state = {"enabled": None, "source": "none", "mok_certificate_enrolled": None}
    try:
        with open(SECURE_BOOT_EFIVAR, "rb") as handle:
            state["enabled"] = secure_boot_from_efivar(bytearray(handle.read()))
            state["source"] = "efivar"
    except (IOError, OSError):
        ran = _run(module, ["mokutil", "--sb-state"])
        if ran is not None:
            state["enabled"] = parse_mokutil_sb_state(ran[1] + ran[2])
            state["source"] = "mokutil"
    certificate = module.params["mok_certificate"]
    if state["enabled"] and certificate and os.path.exists(certificate):
        ran = _run(module, ["mokutil", "--test-key", certificate])
        if ran is not None:
            state["mok_certificate_enrolled"] = parse_mokutil_test_key(ran[1] + ran[2])
    return state


def _nvidia_smi(module):
    result = {"present": False, "rc": None, "gpus": [], "message": None}
    if not module.params["query_nvidia_smi"]:
        return result
    ran = _run(module, ["nvidia-smi", "-L"])
    if ran is None:
        return result
    rc, out, err = ran
    gpus = parse_nvidia_smi_list(out)
    message = None
    if rc is None:
        message = err  # the runner's timeout line
    elif not gpus:
        lines = [line.strip() for line in (out + "\n" + err).splitlines() if line.strip()]
        message = lines[0] if lines else None
    result.update(present=True, rc=rc, gpus=gpus, message=message)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dkms_module=dict(type="str", default="nvidia"),
            dkms_version=dict(type="str", default=""),
            kernel_module_file=dict(type="str", default="nvidia"),
            kernel=dict(type="str", default=""),
            mok_certificate=dict(type="path"),
            query_nvidia_smi=dict(type="bool", default=True),
            **node_tools.argument_spec(source=False)
        ),
        supports_check_mode=True,
    )
    message = nul_byte_message(module.params, ("dkms_module", "dkms_version", "kernel_module_file", "kernel",
                                               "mok_certificate", "nvidia_smi"))
    if message:
        module.fail_json(msg=message)
    try:
        module.tools = node_tools.from_module_params(module.params)
    except node_tools.NodeToolsError as exc:
        module.fail_json(msg=str(exc))
    kernel = module.params["kernel"] or os.uname()[2]
    devices = read_sysfs_pci_devices()
    module.exit_json(
        changed=False,
        kernel=kernel,
        pci_gpus=[dict(gpu, architecture=gpu_architecture(gpu.get("device_id"))) for gpu in nvidia_gpus(devices)],
        pci_nvswitches=nvidia_nvswitches(devices),
        device_users=find_device_users(),
        dkms=_dkms(module, kernel),
        module=_kernel_module(module, kernel),
        nouveau_loaded=os.path.isdir("/sys/module/nouveau"),
        secure_boot=_secure_boot(module),
        nvidia_smi=_nvidia_smi(module),
    )


if __name__ == "__main__":
    main()
