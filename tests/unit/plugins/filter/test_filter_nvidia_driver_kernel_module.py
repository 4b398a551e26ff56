"""The nvidia_driver_kernel_module / nvidia_driver_ubuntu_prebuilt_packages filters (the role's entry points)."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter.nvidia_driver_kernel_module import (
    FilterModule,
    nvidia_driver_kernel_module,
    nvidia_driver_ubuntu_prebuilt_packages,
)

H100 = {"pci_bus_id": "0000:18:00.0", "class_code": "0302", "vendor_id": "10de", "device_id": "2330"}


def test_filter_passes_the_role_arguments_through():
    result = nvidia_driver_kernel_module([H100], "auto", "580", True, "nvidia_driver_source=cuda_repo", "")
    assert result["flavour"] == "open" and result["architectures"] == ["hopper"]
    result = nvidia_driver_kernel_module([H100], "auto", "580", True, "x", "proprietary")
    assert result["flavour"] == "proprietary" and "keeps the installed" in result["reason"]


def test_no_gpus_on_a_test_host():
    assert nvidia_driver_kernel_module(None, "auto", "535")["flavour"] == "proprietary"


def test_a_string_instead_of_the_gpu_list_is_refused_with_a_plain_type():
    with pytest.raises(AnsibleFilterError, match=r"expects the list of PCI GPUs \(nvidia_driver_info's pci_gpus\), got str"):
        nvidia_driver_kernel_module("0000:18:00.0", "auto", "535")


def test_prebuilt_packages_and_their_refusal():
    assert nvidia_driver_ubuntu_prebuilt_packages("6.8.0-60-generic", "570", "open")[1] == \
        "linux-modules-nvidia-570-server-open-generic"
    with pytest.raises(AnsibleFilterError, match="or set it to false to build with DKMS"):
        nvidia_driver_ubuntu_prebuilt_packages("5.14.0-427.el9.x86_64", "570", "open")


def test_filters_are_registered():
    assert set(FilterModule().filters()) == {"nvidia_driver_kernel_module", "nvidia_driver_ubuntu_prebuilt_packages"}


@pytest.mark.parametrize("gpus,installed,message", [
    (["10de:2330"], None, "PCI GPU 0 is str, not a mapping"),
    ([None], None, "PCI GPU 0 is null, not a mapping"),
    ([], {"open": True}, "installed is dict, not open, proprietary or null"),
])
def test_malformed_input_is_the_filters_own_error(gpus, installed, message):
    """Found by tests/fuzz/test_filters_fuzz.py: a raw ValueError/TypeError before."""
    with pytest.raises(AnsibleFilterError, match=message):
        nvidia_driver_kernel_module(gpus, "auto", "570", True, "test", installed)
