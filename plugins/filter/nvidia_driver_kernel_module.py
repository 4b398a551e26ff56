# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_driver_kernel_module: open or proprietary kernel modules for a branch and the GPUs on the PCI bus.

The decision and its data (architectures, branch floors, open-only GPUs) live in
plugins/module_utils/gpu/nvidia_driver.py; the nvidia_driver role calls this filter.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import type_name
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_driver import (
    choose_kernel_module,
    ubuntu_prebuilt_module_packages,
)


def nvidia_driver_kernel_module(gpus, requested="auto", branch="", open_offered=True, source="this source",
                                installed=None):
    """See nvidia_driver_kernel_module.yml."""
    if gpus is None:
        gpus = []
    if isinstance(gpus, (str, bytes)) or not isinstance(gpus, Sequence):
        raise AnsibleFilterError("nvidia_driver_kernel_module expects the list of PCI GPUs (nvidia_driver_info's "
                                 "pci_gpus), got %s" % type_name(gpus))
    for position, gpu in enumerate(gpus):
        if not isinstance(gpu, Mapping):
            raise AnsibleFilterError("nvidia_driver_kernel_module: PCI GPU %d is %s, not a mapping with pci_bus_id and "
                                     "device_id. Fix: pass nvidia_driver_info's pci_gpus as they are" % (position, type_name(gpu)))
    if installed and not isinstance(installed, str):
        raise AnsibleFilterError("nvidia_driver_kernel_module: installed is %s, not open, proprietary or null. Fix: "
                                 "pass nvidia_driver_info's kernel_module_flavour" % type_name(installed))
    return choose_kernel_module(requested, branch, [dict(g) for g in gpus], bool(open_offered), source,
                                installed or None)


def nvidia_driver_ubuntu_prebuilt_packages(kernel, branch, flavour):
    """Ubuntu's prebuilt, signed module packages for ``kernel``; see nvidia_driver_ubuntu_prebuilt_packages.yml."""
    try:
        return ubuntu_prebuilt_module_packages(branch, flavour, kernel)
    except ValueError as exc:
        raise AnsibleFilterError("%s. Fix: nvidia_driver_ubuntu_prebuilt_modules needs an Ubuntu kernel "
                                 "(such as 6.8.0-60-generic), or set it to false to build with DKMS." % exc)


class FilterModule(object):
    """gpu_native.fleet NVIDIA driver filters."""

    def filters(self):
        return {"nvidia_driver_kernel_module": nvidia_driver_kernel_module,
                "nvidia_driver_ubuntu_prebuilt_packages": nvidia_driver_ubuntu_prebuilt_packages}
