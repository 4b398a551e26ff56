# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers behind nvidia_driver_info: dkms status, /proc scan, nvidia-smi -L, Secure Boot."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvidia_driver as nd

# dkms 3.0.10 on Debian 12 in a container (captured from the test host) and on a GPU node.
DKMS_ADDED = "nvidia-current/535.261.03: added\n"
DKMS_V3 = (
    "nvidia-current/535.261.03, 6.1.0-28-amd64, x86_64: installed\n"
    "nvidia-current/535.261.03, 6.1.0-26-amd64, x86_64: installed (WARNING! Diff between built and installed module!)\n"
    "zfs/2.1.11, 6.1.0-28-amd64, x86_64: installed\n"
)
# dkms 2.8 (Ubuntu 22.04) spelling.
DKMS_V2 = "nvidia-srv, 535.183.01, 5.15.0-113-generic, x86_64: installed\nnvidia-srv, 535.183.01, 5.15.0-117-generic, x86_64: built\n"


def test_parse_dkms_added_only():
    entries = nd.parse_dkms_status(DKMS_ADDED)
    assert entries == [{"module": "nvidia-current", "version": "535.261.03", "kernel": None, "arch": None,
                        "state": "added", "note": None}]
    assert nd.dkms_state_for_kernel(entries, "nvidia-current", "6.18.44-fc-v782", "535.261.03") == "added"


def test_parse_dkms_v3_with_warning_note():
    entries = nd.parse_dkms_status(DKMS_V3)
    assert len(entries) == 3
    assert entries[1]["note"].startswith("WARNING! Diff")
    assert nd.dkms_state_for_kernel(entries, "nvidia-current", "6.1.0-28-amd64", "535.261.03") == "installed"
    # Installed for other kernels only: not built for the running one.
    assert nd.dkms_state_for_kernel(entries, "nvidia-current", "6.1.0-31-amd64", "535.261.03") == "added"
    # Another module or version is unknown to DKMS.
    assert nd.dkms_state_for_kernel(entries, "nvidia", "6.1.0-28-amd64") is None
    assert nd.dkms_state_for_kernel(entries, "nvidia-current", "6.1.0-28-amd64", "550.127.08") is None


def test_parse_dkms_v2_built_and_installed():
    entries = nd.parse_dkms_status(DKMS_V2)
    assert [e["kernel"] for e in entries] == ["5.15.0-113-generic", "5.15.0-117-generic"]
    assert nd.dkms_state_for_kernel(entries, "nvidia-srv", "5.15.0-117-generic", "535.183.01") == "built"
    # An upstream prefix matches a longer DKMS version, a different one does not.
    assert nd.dkms_state_for_kernel(entries, "nvidia-srv", "5.15.0-113-generic", "535") == "installed"
    assert nd.dkms_state_for_kernel(entries, "nvidia-srv", "5.15.0-113-generic", "535.18") is None


def test_parse_dkms_ignores_noise():
    assert nd.parse_dkms_status("Error! Could not locate dkms.conf file.\n\n") == []
    assert nd.parse_dkms_status(None) == []


def _fake_proc(tmp_path, pid, comm, targets):
    fd_dir = tmp_path / str(pid) / "fd"
    fd_dir.mkdir(parents=True)
    (tmp_path / str(pid) / "comm").write_text(comm + "\n")
    for number, target in enumerate(targets):
        os.symlink(target, str(fd_dir / str(number)))


def test_find_device_users(tmp_path):
    _fake_proc(tmp_path, 4242, "python3", ["/dev/nvidia0", "/dev/nvidiactl", "/dev/null", "/dev/nvidia-uvm"])
    _fake_proc(tmp_path, 77, "nvidia-persiste", ["/dev/nvidiactl"])
    _fake_proc(tmp_path, 99, "bash", ["/dev/pts/0", "/home/u/nvidia0.log"])
    (tmp_path / "self").mkdir()
    users = nd.find_device_users(str(tmp_path))
    assert users == [
        {"pid": 77, "command": "nvidia-persiste", "devices": ["/dev/nvidiactl"]},
        {"pid": 4242, "command": "python3", "devices": ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]},
    ]


def test_find_device_users_missing_proc(tmp_path):
    assert nd.find_device_users(str(tmp_path / "absent")) == []


SMI_LIST = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2b6d0f8a-6c1c-4fbb-8a0e-1c9b6c5d4e3f)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-513536b6-0c9f-4a1d-9d5e-2a3b4c5d6e7f)
  MIG 1g.10gb     Device  0: (UUID: MIG-1d3e2b9a-aaaa-bbbb-cccc-1234567890ab)
  MIG 1g.10gb     Device  1: (UUID: MIG-1d3e2b9a-aaaa-bbbb-cccc-1234567890ac)
"""


def test_parse_nvidia_smi_list():
    gpus = nd.parse_nvidia_smi_list(SMI_LIST)
    assert [(g["index"], g["name"], g["mig_devices"]) for g in gpus] == [
        (0, "NVIDIA H100 80GB HBM3", 0), (1, "NVIDIA A100-SXM4-80GB", 2)]
    assert gpus[0]["uuid"] == "GPU-2b6d0f8a-6c1c-4fbb-8a0e-1c9b6c5d4e3f"


def test_parse_nvidia_smi_list_without_driver():
    text = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n")
    assert nd.parse_nvidia_smi_list(text) == []


@pytest.mark.parametrize("data, expected", [
    (bytearray(b"\x06\x00\x00\x00\x01"), True),
    (bytearray(b"\x06\x00\x00\x00\x00"), False),
    (bytearray(b"\x06\x00"), None),
    (None, None),
])
def test_secure_boot_from_efivar(data, expected):
    assert nd.secure_boot_from_efivar(data) is expected


@pytest.mark.parametrize("text, expected", [
    ("SecureBoot enabled\n", True),
    ("SecureBoot disabled\nPlatform is in Setup Mode\n", False),
    ("EFI variables are not supported on this system\n", None),
])
def test_parse_mokutil_sb_state(text, expected):
    assert nd.parse_mokutil_sb_state(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("/var/lib/dkms/mok.pub is already enrolled\n", True),
    ("/var/lib/dkms/mok.pub is not enrolled\n", False),
    ("Failed to read /var/lib/dkms/mok.pub\n", None),
])
def test_parse_mokutil_test_key(text, expected):
    assert nd.parse_mokutil_test_key(text) is expected


@pytest.mark.parametrize("version, upstream", [
    ("535.261.03-1", "535.261.03"),
    ("3:550.127.08-1.el9", "550.127.08"),
    ("535.247.01-0ubuntu0.22.04.1", "535.247.01"),
    ("570.86.15", "570.86.15"),
    ("", None),
    ("latest", None),
])
def test_upstream_version(version, upstream):
    assert nd.upstream_version(version) == upstream
