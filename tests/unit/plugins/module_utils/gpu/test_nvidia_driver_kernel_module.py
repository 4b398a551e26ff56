"""Open or proprietary kernel modules and the branch floor per GPU architecture (nvidia_driver module_utils)."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_driver import (
    MINIMUM_BRANCH,
    choose_kernel_module,
    gpu_architecture,
    kernel_flavour,
    ubuntu_prebuilt_module_packages,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.pci import nvidia_gpus, parse_lspci

from testlib import fixture_text


def gpu(device, bus="0000:3b:00.0"):
    return {"pci_bus_id": bus, "class_code": "0302", "vendor_id": "10de", "device_id": device}


H100 = gpu("2330")          # captured (tests/fixtures/nvidia/10_lspci_nvidia_gpu_nvswitch.txt)
GH200 = gpu("2342")
B200 = gpu("2901")
A100 = gpu("20b2")
A40 = gpu("2235")
L40S = gpu("26b9")
T4 = gpu("1eb8")
V100 = gpu("1db5")


@pytest.mark.parametrize("device, arch", [
    ("2330", "hopper"), ("0x2330", "hopper"), ("0x233010DE", "hopper"), ("2342", "hopper"), ("2335", "hopper"),
    ("20b2", "ampere"), ("2235", "ampere"), ("2236", "ampere"), ("25b6", "ampere"),
    ("26b9", "ada"), ("27b8", "ada"), ("1eb8", "turing"), ("2182", "turing"), ("1db5", "volta"),
    ("2901", "blackwell"), ("2b85", "blackwell"),
    ("ffff", "unknown"), ("", "unknown"), (None, "unknown"), ("zz", "unknown"),
])
def test_architecture_of_device_ids(device, arch):
    assert gpu_architecture(device) == arch


CHIP_ARCHITECTURE = {"GV": "volta", "TU": "turing", "GA": "ampere", "AD": "ada", "GH": "hopper", "GB": "blackwell"}


def test_captured_lspci_gpus_match_their_chip_names():
    """Real lspci captures: the chip pci.ids names (GA100, GA102GL, GH100...) agree with the device-id table."""
    gpus = nvidia_gpus(parse_lspci(fixture_text("nvidia", "10_lspci_nvidia_gpu_nvswitch.txt")))
    named = 0
    for found in gpus:
        words = [w for w in found["description"].split() if w[:2] in CHIP_ARCHITECTURE and w[2:3].isdigit()]
        if words:
            named += 1
            assert gpu_architecture(found["device_id"]) == CHIP_ARCHITECTURE[words[0][:2]], found
    assert named >= 2
    # The GB200 capture prints "Device 2941" (unnamed in pci.ids; the capture's header says Blackwell).
    assert {gpu_architecture(g["device_id"]) for g in gpus if g["device_id"] == "2941"} == {"blackwell"}


# (requested, branch, gpus, open_offered, installed) -> (flavour, reason fragment)
CHOICES = [
    ("auto", "535", [A100], True, None, "proprietary", "branch 535 defaults to the proprietary modules"),
    ("auto", "570", [A100], True, None, "open", "open is NVIDIA's default from branch 560"),
    ("auto", "580", [], True, None, "open", "default from branch 560"),
    ("auto", "535", [H100] * 8, True, None, "open", "recommended for"),
    ("auto", "570", [B200], True, None, "open", "required by 0000:3b:00.0 (device 2901)"),
    ("auto", "535", [GH200], True, None, "open", "required by"),
    ("auto", "570", [V100], True, None, "proprietary", "the open modules cannot drive"),
    ("auto", "570", [V100, A100], True, None, "proprietary", "the open modules cannot drive"),
    ("auto", "570", [A40], False, None, "proprietary", "offers no open kernel module package for branch 570"),
    ("auto", "570", [H100], True, "proprietary", "proprietary", "keeps the installed proprietary modules"),
    ("auto", "535", [A100], True, "open", "open", "keeps the installed open modules"),
    ("auto", "570", [B200], True, "proprietary", "open", "required by"),
    ("auto", "570", [V100], True, "open", "proprietary", "the open modules cannot drive"),
    ("open", "535", [L40S, T4], True, None, "open", "nvidia_driver_kernel_module=open"),
    ("proprietary", "570", [H100], True, None, "proprietary", "nvidia_driver_kernel_module=proprietary"),
]


@pytest.mark.parametrize("requested, branch, gpus, offered, installed, flavour, reason", CHOICES)
def test_choice(requested, branch, gpus, offered, installed, flavour, reason):
    result = choose_kernel_module(requested, branch, gpus, offered, "nvidia_driver_source=distro", installed)
    assert result["problems"] == []
    assert result["flavour"] == flavour
    assert reason in result["reason"]


REFUSALS = [
    ("proprietary", "570", [B200], True, "nvidia_driver_kernel_module=proprietary cannot drive 0000:3b:00.0 (device 2901)"),
    ("proprietary", "570", [GH200], True, "NVIDIA supports only the open kernel modules on Grace Hopper and Blackwell"),
    ("open", "570", [V100], True, "the open kernel modules need a Turing or newer GPU (volta)"),
    ("open", "570", [A100], False, "nvidia_driver_source=distro offers no open kernel module package for branch 570"),
    ("open", "470", [A100], True, "branch 470 has no open kernel modules (they start with 515)"),
    ("auto", "550", [B200], True, "branch 550 cannot drive the Blackwell GPU(s) at 0000:3b:00.0 (device 2901): "
                                  "Blackwell needs branch 570 or newer. Fix: set nvidia_driver_branch to 570"),
    ("auto", "570", [B200], False, "need(s) the open kernel modules, but nvidia_driver_source=distro offers no open"),
    ("auto", "570", [B200, V100], True, "this node mixes GPUs that need the open kernel modules"),
    ("sometimes", "570", [A100], True, "nvidia_driver_kernel_module=sometimes is not one of auto, open, proprietary"),
    ("auto", "latest", [A100], True, "driver branch 'latest' is not a number"),
]


@pytest.mark.parametrize("requested, branch, gpus, offered, fragment", REFUSALS)
def test_refusals_name_the_cause_and_the_fix(requested, branch, gpus, offered, fragment):
    result = choose_kernel_module(requested, branch, gpus, offered, "nvidia_driver_source=distro")
    assert result["flavour"] is None
    assert any(fragment in problem for problem in result["problems"]), result["problems"]
    assert all("Fix:" in problem for problem in result["problems"])


def test_every_architecture_has_a_branch_floor_and_blackwell_needs_570():
    assert MINIMUM_BRANCH["blackwell"] == 570
    assert set(MINIMUM_BRANCH) == {"volta", "turing", "ampere", "ada", "hopper", "blackwell"}


def test_result_carries_architectures_per_gpu():
    result = choose_kernel_module("auto", "570", [H100, GH200], True)
    assert result["architectures"] == ["hopper"]
    assert [(g["architecture"], g["grace_hopper"]) for g in result["gpus"]] == [("hopper", False), ("hopper", True)]


@pytest.mark.parametrize("kernel, flavour, expected", [
    ("6.8.0-60-generic", "open", ["linux-modules-nvidia-570-server-open-6.8.0-60-generic",
                                  "linux-modules-nvidia-570-server-open-generic"]),
    ("5.15.0-105-generic", "proprietary", ["linux-modules-nvidia-570-server-5.15.0-105-generic",
                                           "linux-modules-nvidia-570-server-generic"]),
    ("6.8.0-1015-aws", "open", ["linux-modules-nvidia-570-server-open-6.8.0-1015-aws",
                                "linux-modules-nvidia-570-server-open-aws"]),
])
def test_ubuntu_prebuilt_module_packages(kernel, flavour, expected):
    assert ubuntu_prebuilt_module_packages("570", flavour, kernel) == expected


def test_prebuilt_needs_an_ubuntu_kernel_release():
    assert kernel_flavour("6.1.0-28-amd64") == "amd64"
    assert kernel_flavour("5.14.0-427.13.1.el9_4.x86_64") is None
    with pytest.raises(ValueError, match="is not an Ubuntu kernel release"):
        ubuntu_prebuilt_module_packages("570", "open", "5.14.0-427.13.1.el9_4.x86_64")
