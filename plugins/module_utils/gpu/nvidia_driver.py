# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Node-side state of the NVIDIA kernel driver, parsed from the tools that report it.

Used by the ``nvidia_driver_info`` module (and through it the ``nvidia_driver``
role) to decide whether a driver change is safe and whether it worked:

* ``parse_dkms_status(text)``: ``dkms status`` lines (dkms 2.x and 3.x spellings);
* ``dkms_state_for_kernel(entries, module, kernel, version)``: what DKMS did for one kernel;
* ``find_device_users(proc_root)``: processes holding ``/dev/nvidia*`` open (what ``fuser`` does);
* ``parse_nvidia_smi_list(text)``: ``nvidia-smi -L`` GPU lines;
* ``secure_boot_from_efivar(data)`` / ``parse_mokutil_sb_state(text)``: Secure Boot state;
* ``parse_mokutil_test_key(text)``: whether a key is enrolled in the MOK list;
* ``upstream_version(package_version)``: ``535.261.03-1`` -> ``535.261.03``;
* ``gpu_architecture(device_id)``: PCI device id -> ``turing``/``ampere``/.../``blackwell`` (or ``unknown``);
* ``choose_kernel_module(requested, branch, gpus, open_offered)``: the kernel module flavour (open or
  proprietary) and the branch check for the GPUs on the PCI bus, with every refusal spelled out;
* ``ubuntu_prebuilt_module_packages(branch, flavour, kernel)``: Ubuntu's signed, prebuilt module packages.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import is_ascii_int, parse_int

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
#: ``nvidia-smi -L`` lines longer than this are not device lines (real ones are about 90 characters).
MAX_SMI_LINE = 512
_SMI_GPU_RE = re.compile(r"^GPU (?P<index>[0-9]+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[0-9a-fA-F-]+)\)\s*$")
_SMI_MIG_RE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<index>[0-9]+): \(UUID: (?P<uuid>MIG-[^)]+)\)\s*$")
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
        if not is_ascii_int(name, 10):
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
        gpu = _SMI_GPU_RE.match(line.rstrip()) if len(line) <= MAX_SMI_LINE else None
        if gpu and is_ascii_int(gpu.group("index"), 4):  # else not a GPU line (GPU <5000 digits>: ...)
            gpus.append({"index": int(gpu.group("index")), "name": gpu.group("name"),
                         "uuid": gpu.group("uuid"), "mig_devices": 0})
            continue
        mig = _SMI_MIG_RE.match(line.rstrip()) if len(line) <= MAX_SMI_LINE else None
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


# --- GPU architecture, driver branch floors and kernel module flavours -------
#
# PCI device id (vendor 10de) ranges per architecture, inclusive, lower-case
# hex.  They follow NVIDIA's chip families (GV100 1dxx; TU10x 1e/1f/21xx;
# GA100 20bx, GA10x 22xx and 24-25xx; GH100 23xx; AD10x 26-28xx; GB10x/GB20x 29-2fxx)
# as the "Compatible GPUs" table of NVIDIA's open-gpu-kernel-modules README
# lists their products.  The ranges are this collection's reading of that
# table, checked against the captures in tests/fixtures (H100 2330, A100 20b2,
# A40 2235, A10 2236); an id outside every range is reported as "unknown" and
# never guessed.
GPU_ARCHITECTURE_RANGES = (
    (0x1d80, 0x1dff, "volta"),
    (0x1e00, 0x1fff, "turing"),
    (0x2180, 0x21ff, "turing"),
    (0x20b0, 0x20ff, "ampere"),
    (0x2200, 0x22ff, "ampere"),
    (0x2400, 0x25ff, "ampere"),
    (0x2300, 0x23ff, "hopper"),
    (0x2680, 0x28ff, "ada"),
    (0x2900, 0x2fff, "blackwell"),
)
# Grace Hopper (GH200) superchips: a Hopper GPU that needs the open modules.
GRACE_HOPPER_DEVICE_IDS = ("2342", "2348")
# Oldest driver branch that drives each architecture.  blackwell 570: NVIDIA,
# "Software Migration Guide for NVIDIA Blackwell RTX GPUs" ("requires a
# compatible driver (R570 or higher)").  hopper 525, ada 525, ampere 450,
# turing 410, volta 384: the first production branches whose release notes
# list those GPUs (not re-confirmed here; every branch this collection offers
# is 535 or newer, so only the blackwell floor can refuse today).
MINIMUM_BRANCH = {"volta": 384, "turing": 410, "ampere": 450, "ada": 525, "hopper": 525, "blackwell": 570}
# NVIDIA driver installation guide, "Kernel Modules": the open flavour exists
# from the 515 branch, is the default from 560, and runs on Turing and newer
# only (it needs the GSP); Grace Hopper and Blackwell support only the open
# modules (NVIDIA, "NVIDIA Transitions Fully Towards Open-Source GPU Kernel
# Modules", 2024).
OPEN_FIRST_BRANCH = 515
OPEN_DEFAULT_BRANCH = 560
OPEN_CAPABLE = ("turing", "ampere", "ada", "hopper", "blackwell")
OPEN_ONLY = ("blackwell",)
PREFER_OPEN = ("hopper", "blackwell")
KERNEL_MODULE_CHOICES = ("auto", "open", "proprietary")


def gpu_architecture(device_id):
    """Architecture of an NVIDIA PCI device id (``2330``, ``0x2330``, ``0x233010DE``); ``unknown`` if not in the table."""
    text = str(device_id or "").strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if len(text) == 8 and text.endswith("10de"):  # nvidia-smi's pci.device_id: device then vendor
        text = text[:4]
    if not 0 < len(text) <= 8 or any(char not in "0123456789abcdef" for char in text):
        return "unknown"
    number = int(text, 16)
    for low, high, name in GPU_ARCHITECTURE_RANGES:
        if low <= number <= high:
            return name
    return "unknown"


def _describe(gpus):
    return ", ".join("%s (device %s)" % (g.get("pci_bus_id") or "?", g.get("device_id") or "?") for g in gpus)


def choose_kernel_module(requested, branch, gpus, open_offered=True, source="this source", installed=None):
    """Decide the kernel module flavour for ``branch`` and the NVIDIA GPUs on the PCI bus.

    ``gpus``: ``pci.nvidia_gpus`` dicts (``pci_bus_id``, ``device_id``).  ``open_offered``:
    whether the OS/source has an open flavour for the branch.  ``installed``: the
    flavour installed now (``open``/``proprietary``/None); ``auto`` keeps it
    when it can drive the GPUs, so a plain re-run never swaps the modules of a
    working node.  Returns
    ``{flavour, reason, architectures, gpus, problems}``; ``problems`` lists
    one-line refusals (cause, then the fix) and ``flavour`` is None when there
    are any.
    """
    problems = []
    requested = str(requested or "auto")
    annotated = []
    for gpu in gpus or []:
        device = str(gpu.get("device_id") or "").lower()
        entry = dict(gpu)
        entry["architecture"] = gpu_architecture(device)
        entry["grace_hopper"] = device in GRACE_HOPPER_DEVICE_IDS
        annotated.append(entry)
    architectures = sorted(set(g["architecture"] for g in annotated))
    result = {"flavour": None, "reason": "", "architectures": architectures, "gpus": annotated, "problems": problems}
    if requested not in KERNEL_MODULE_CHOICES:
        problems.append("nvidia_driver_kernel_module=%s is not one of %s. Fix: choose one of them."
                        % (requested, ", ".join(KERNEL_MODULE_CHOICES)))
        return result
    try:
        branch_number = parse_int(str(branch).split(".", maxsplit=1)[0], "the driver branch", max_digits=4)
    except (TypeError, ValueError):
        problems.append("driver branch %r is not a number. Fix: set nvidia_driver_branch such as 570." % (branch,))
        return result

    for arch in sorted(MINIMUM_BRANCH):
        behind = [g for g in annotated if g["architecture"] == arch]
        if behind and branch_number < MINIMUM_BRANCH[arch]:
            problems.append(
                "branch %d cannot drive the %s GPU(s) at %s: %s needs branch %d or newer. "
                "Fix: set nvidia_driver_branch to %d or newer (with nvidia_driver_source=cuda_repo if the OS "
                "archive has none)." % (branch_number, arch.capitalize(), _describe(behind), arch.capitalize(),
                                        MINIMUM_BRANCH[arch], MINIMUM_BRANCH[arch]))

    needs_open = [g for g in annotated if g["architecture"] in OPEN_ONLY or g["grace_hopper"]]
    cannot_open = [g for g in annotated if g["architecture"] not in OPEN_CAPABLE and g["architecture"] != "unknown"]
    prefers_open = [g for g in annotated if g["architecture"] in PREFER_OPEN]
    has_open = open_offered and branch_number >= OPEN_FIRST_BRANCH
    no_open_why = ("branch %d has no open kernel modules (they start with %d)" % (branch_number, OPEN_FIRST_BRANCH)
                   if branch_number < OPEN_FIRST_BRANCH else "%s offers no open kernel module package for branch %d"
                   % (source, branch_number))

    if needs_open and cannot_open:
        problems.append(
            "this node mixes GPUs that need the open kernel modules (%s) with GPUs the open modules cannot drive (%s); "
            "no single driver runs both. Fix: do not mix these GPUs in one node."
            % (_describe(needs_open), _describe(cannot_open)))
    elif requested == "proprietary" and needs_open:
        problems.append(
            "nvidia_driver_kernel_module=proprietary cannot drive %s: NVIDIA supports only the open kernel modules on "
            "Grace Hopper and Blackwell. Fix: set nvidia_driver_kernel_module to open or auto." % _describe(needs_open))
    elif requested == "open" and cannot_open:
        problems.append(
            "nvidia_driver_kernel_module=open cannot drive %s: the open kernel modules need a Turing or newer GPU "
            "(%s). Fix: set nvidia_driver_kernel_module to proprietary or auto."
            % (_describe(cannot_open), ", ".join(sorted(set(g["architecture"] for g in cannot_open)))))
    elif (requested == "open" or needs_open) and not has_open:
        problems.append(
            "%s, but %s. Fix: choose a branch with an open flavour (%d or newer%s)."
            % ("nvidia_driver_kernel_module=open was asked for" if requested == "open"
               else "%s need(s) the open kernel modules" % _describe(needs_open), no_open_why, OPEN_FIRST_BRANCH,
               ", or nvidia_driver_source=cuda_repo" if open_offered is False else ""))
    if problems:
        return result

    if requested != "auto":
        result.update(flavour=requested, reason="nvidia_driver_kernel_module=%s" % requested)
    elif installed == "open" and not cannot_open and has_open or installed == "proprietary" and not needs_open:
        result.update(flavour=installed, reason="keeps the installed %s modules (auto never swaps them on a working "
                                                "node; set nvidia_driver_kernel_module to switch)" % installed)
    elif needs_open:
        result.update(flavour="open", reason="required by %s" % _describe(needs_open))
    elif cannot_open:
        result.update(flavour="proprietary", reason="the open modules cannot drive %s" % _describe(cannot_open))
    elif not has_open:
        result.update(flavour="proprietary", reason=no_open_why)
    elif branch_number >= OPEN_DEFAULT_BRANCH:
        result.update(flavour="open", reason="open is NVIDIA's default from branch %d" % OPEN_DEFAULT_BRANCH)
    elif prefers_open:
        result.update(flavour="open", reason="recommended for %s" % _describe(prefers_open))
    else:
        result.update(flavour="proprietary", reason="branch %d defaults to the proprietary modules" % branch_number)
    return result


def kernel_flavour(kernel_release):
    """Ubuntu kernel flavour of a release: ``5.15.0-105-generic`` -> ``generic``; None when it has none."""
    match = re.match(r"^\d+\.\d+\.\d+-\d+-(?P<flavour>[a-z][a-z0-9-]*)$", str(kernel_release or ""))
    return match.group("flavour") if match else None


def ubuntu_prebuilt_module_packages(branch, flavour, kernel_release):
    """Ubuntu's signed, prebuilt module packages (linux-restricted-modules) for a -server branch.

    Returns ``[for the running kernel, the flavour's meta package]``, such as
    ``linux-modules-nvidia-570-server-open-6.8.0-60-generic`` and
    ``linux-modules-nvidia-570-server-open-generic`` (the meta package follows
    kernel upgrades).  Raises ValueError when the kernel release has no flavour.
    """
    kernel_kind = kernel_flavour(kernel_release)
    if kernel_kind is None:
        raise ValueError("kernel %r is not an Ubuntu kernel release (<version>-<abi>-<flavour>)" % (kernel_release,))
    stem = "linux-modules-nvidia-%s-server%s" % (branch, "-open" if flavour == "open" else "")
    return ["%s-%s" % (stem, kernel_release), "%s-%s" % (stem, kernel_kind)]
