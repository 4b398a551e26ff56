# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node-side state of the NVIDIA kernel driver, parsed from the tools that report it.

Used by the ``nvidia_driver_info`` module (and through it the ``nvidia_driver``
role) to decide whether a driver change is safe and whether it worked:

* ``parse_dkms_status(text)``: ``dkms status`` lines (dkms 2.x and 3.x spellings);
* ``dkms_state_for_kernel(entries, module, kernel, version)``: what DKMS did for one kernel;
* ``find_device_users(proc_root)``: processes holding ``/dev/nvidia*`` open (what ``fuser`` does);
* ``parse_nvidia_smi_list(text)``: ``nvidia-smi -L`` GPU lines;
* ``secure_boot_from_efivar(data)`` / ``parse_mokutil_sb_state(text)``: Secure Boot state;
* ``parse_mokutil_test_key(text)``: whether a key is enrolled in the MOK list;
* ``upstream_version(package_version)``: ``535.261.03-1`` -> ``535.261.03``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

# dkms 3.x: "nvidia-current/535.261.03, 6.1.0-28-amd64, x86_64: installed"
# dkms 2.x: "nvidia, 535.104.05, 5.15.0-86-generic, x86_64: installed"
# registered only: "nvidia-current/535.261.03: added"
# a trailing " (WARNING ...)" or " (original_module exists)" may follow the state.
_DKMS_V3_RE = re.compile(
    r"^(?P<module>[^/,\s]+)/(?P<version>[^,:\s]+)(?:,\s*(?P<kernel>[^,:\s]+)(?:,\s*(?P<arch>[^:\s]+))?)?:\s*(?P<state>\w+)(?P<note>.*)$"
)
_DKMS_V2_RE = re.compile(
    r"^(?P<module>[^/,\s]+),\s*(?P<version>[^,:\s]+)(?:,\s*(?P<kernel>[^,:\s]+)(?:,\s*(?P<arch>[^:\s]+))?)?:\s*(?P<state>\w+)(?P<note>.*)$"
)
# "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2b6d0f8a-...)"; MIG lines are indented "  MIG 1g.10gb ..."
_SMI_GPU_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[0-9a-fA-F-]+)\)\s*$")
_SMI_MIG_RE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<index>\d+): \(UUID: (?P<uuid>MIG-[^)]+)\)\s*$")
_UPSTREAM_RE = re.compile(r"^(?:\d+:)?(?P<upstream>\d+(?:\.\d+)+)")
_DEVICE_RE = re.compile(r"^/dev/nvidia(?:\d+|ctl|-uvm|-uvm-tools|-modeset|-nvswitch\d*|-nvlink|-caps/.+)?$")

# The EFI global variable GUID under which firmware publishes SecureBoot.
SECURE_BOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def parse_dkms_status(text):
    """Parse ``dkms status`` output into a list of entry dicts.

    Each entry: ``{module, version, kernel, arch, state, note}``; ``kernel`` and
    ``arch`` are None for a module that is only registered (``added``).
    Unknown lines (warnings, blank lines) are ignored.
    """
    entries = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        match = _DKMS_V3_RE.match(line) or _DKMS_V2_RE.match(line)
        if not match:
            continue
        entries.append({
            "module": match.group("module"),
            "version": match.group("version"),
            "kernel": match.group("kernel"),
            "arch": match.group("arch"),
            "state": match.group("state").lower(),
            "note": match.group("note").strip(" ()") or None,
        })
    return entries


def dkms_state_for_kernel(entries, module, kernel, version=None):
    """What DKMS did with ``module`` (optionally at ``version``) for ``kernel``.

    Returns ``installed`` or ``built`` when DKMS produced the module for that
    kernel, ``added`` when the module is registered but was never built for it
    (typically: no kernel headers), or None when DKMS does not know the module.
    ``version`` matches the DKMS version exactly or as an upstream prefix.
    """
    relevant = [
        e for e in entries
        if e["module"] == module and (not version or e["version"] == version or e["version"].startswith(version + "."))
    ]
    if not relevant:
        return None
    for wanted in ("installed", "built"):
        for entry in relevant:
            if entry["kernel"] == kernel and entry["state"] == wanted:
                return wanted
    return "added"


def find_device_users(proc_root="/proc"):
    """Processes holding an NVIDIA device node open, like ``fuser /dev/nvidia*``.

    Returns a list of ``{pid, command, devices}`` sorted by pid.  Processes that
    vanish or cannot be read while scanning are skipped.
    """
    users = []
    try:
        names = os.listdir(proc_root)
    except (IOError, OSError):
        return users
    for name in names:
        if not name.isdigit():
            continue
        fd_dir = os.path.join(proc_root, name, "fd")
        try:
            fds = os.listdir(fd_dir)
        except (IOError, OSError):
            continue
        devices = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except (IOError, OSError):
                continue
            if _DEVICE_RE.match(target):
                devices.add(target)
        if not devices:
            continue
        try:
            with open(os.path.join(proc_root, name, "comm")) as handle:
                command = handle.read().strip()
        except (IOError, OSError):
            command = None
        users.append({"pid": int(name), "command": command, "devices": sorted(devices)})
    return sorted(users, key=lambda user: user["pid"])


def parse_nvidia_smi_list(text):
    """Parse ``nvidia-smi -L``: a list of ``{index, name, uuid, mig_devices}``."""
    gpus = []
    for line in (text or "").splitlines():
        gpu = _SMI_GPU_RE.match(line.rstrip())
        if gpu:
            gpus.append({"index": int(gpu.group("index")), "name": gpu.group("name"),
                         "uuid": gpu.group("uuid"), "mig_devices": 0})
            continue
        mig = _SMI_MIG_RE.match(line.rstrip())
        if mig and gpus:
            gpus[-1]["mig_devices"] += 1
    return gpus


def secure_boot_from_efivar(data):
    """Secure Boot state from the raw SecureBoot EFI variable.

    The file holds 4 attribute bytes followed by one data byte (1 = enabled).
    Returns True, False, or None when the data is too short to tell.
    """
    if data is None or len(data) < 5:
        return None
    value = data[4]
    if not isinstance(value, int):  # Python 2 style str data
        value = ord(value)
    return value == 1


def parse_mokutil_sb_state(text):
    """``mokutil --sb-state``: True (enabled), False (disabled) or None (no EFI / unknown)."""
    lowered = (text or "").lower()
    if "secureboot enabled" in lowered:
        return True
    if "secureboot disabled" in lowered:
        return False
    return None


def parse_mokutil_test_key(text):
    """``mokutil --test-key CERT``: True when enrolled, False when not, None otherwise."""
    lowered = (text or "").lower()
    if "is already enrolled" in lowered:
        return True
    if "is not enrolled" in lowered:
        return False
    return None


def upstream_version(package_version):
    """The NVIDIA upstream version inside a package version, or None.

    ``535.261.03-1`` -> ``535.261.03``; ``3:550.127.08-1.el9`` -> ``550.127.08``;
    ``535.247.01-0ubuntu0.22.04.1`` -> ``535.247.01``.
    """
    match = _UPSTREAM_RE.match(str(package_version or "").strip())
    return match.group("upstream") if match else None
