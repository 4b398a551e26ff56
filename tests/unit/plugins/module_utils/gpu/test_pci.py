# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCI bus ids, lspci and sysfs GPU counting (fixture 10 plus constructed cases)."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import pci

from gpu_fixtures import text

LSPCI = "10_lspci_nvidia_gpu_nvswitch.txt"


@pytest.mark.parametrize("spelling, expected", [
    ("00000000:3B:00.0", "0000:3b:00.0"),       # nvidia-smi
    ("PCI:0000:3b:00", "0000:3b:00.0"),         # kernel log, no function
    ("3b:00.0", "0000:3b:00.0"),                # lspci
    ("0000:3b:00.0", "0000:3b:00.0"),           # lspci -D
    ("0001:00:00.0", "0001:00:00.0"),           # Hyper-V domain
    ("c941:00:02.0", "c941:00:02.0"),
    ("00000001:00:00.0", "0001:00:00.0"),       # nvidia-smi, non-zero domain
    ("PCI:0018:01:00", "0018:01:00.0"),
    ("10000:E1:00.3", "10000:e1:00.3"),         # VMD domain wider than 16 bits (constructed)
    (" 00000000:83:00.0 ", "0000:83:00.0"),
])
def test_normalize_every_spelling(spelling, expected):
    assert pci.normalize_bus_id(spelling) == expected


def test_spellings_compare_as_numbers():
    assert pci.bus_id_key("00000000:3B:00.0") == pci.bus_id_key("PCI:0000:3b:00") == (0, 0x3b, 0, 0)
    assert pci.same_bus_id("3b:00.0", "00000000:3B:00.0")
    assert not pci.same_bus_id("0001:3b:00.0", "0000:3b:00.0")
    assert not pci.same_bus_id("garbage", "0000:3b:00.0")


@pytest.mark.parametrize("bad", ["", "GPU-513536b6", "3b:00", "0000:3b:00.9", "zz:00.0", None])
def test_invalid_bus_id_is_one_line_error(bad):
    with pytest.raises(pci.PciBusIdError) as err:
        pci.normalize_bus_id(bad)
    assert "\n" not in str(err.value)


def test_find_bus_id_ignores_times():
    assert pci.find_bus_id("[Fri Aug 30 11:43:09 2024] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.") == "0000:3b:00.0"
    assert pci.find_bus_id("Feb 20 01:34:20 host kernel: nothing here") is None
    assert pci.find_bus_id("device 3b:00.0 lost") == "0000:3b:00.0"


@pytest.mark.parametrize("part, gpus, switches, first_gpu", [
    ("a", 8, 6, "0001:00:00.0"),   # Azure NDv4: Hyper-V domains, NVSwitch 10de:1af1 unnamed
    ("b", 1, 0, "0000:06:00.0"),   # KVM: the only VGA [0300] is virtio, not NVIDIA
    ("c", 4, 0, "0008:01:00.0"),   # GB200 without -nn: class and vendor from names
    ("d1", 8, 4, "0000:1b:00.0"),  # HGX H100 -Dnn with a shell prompt line and ASPEED VGA
    ("d2", 8, 4, "0000:0d:00.0"),
])
def test_lspci_fixture_counts_exclude_nvswitches(part, gpus, switches, first_gpu):
    devices = pci.parse_lspci(text(LSPCI, part))
    assert pci.count_nvidia_gpus(devices) == gpus
    assert len(pci.nvidia_nvswitches(devices)) == switches
    assert pci.nvidia_gpus(devices)[0]["pci_bus_id"] == first_gpu


def test_lspci_fields():
    devices = pci.parse_lspci(text(LSPCI, "d1"))
    switch = [d for d in devices if d["pci_bus_id"] == "0000:07:00.0"][0]
    assert (switch["class_code"], switch["vendor_id"], switch["device_id"]) == ("0680", "10de", "22a3")
    gpu = [d for d in devices if d["pci_bus_id"] == "0000:1b:00.0"][0]
    assert (gpu["class_code"], gpu["class_name"], gpu["device_id"]) == ("0302", "3D controller", "2330")
    gb200 = pci.parse_lspci(text(LSPCI, "c"))
    assert [d["device_id"] for d in pci.nvidia_gpus(gb200)] == ["2941"] * 4


def test_lspci_numeric_form_constructed():
    # constructed: `lspci -n` form
    devices = pci.parse_lspci("0000:1b:00.0 0302: 10de:2330 (rev a1)\n0000:07:00.0 0680: 10de:22a3 (rev a1)\n")
    assert pci.count_nvidia_gpus(devices) == 1


def _sysfs_device(root, name, class_value, vendor, device):
    path = root / name
    path.mkdir()
    (path / "class").write_text(class_value + "\n")
    (path / "vendor").write_text(vendor + "\n")
    (path / "device").write_text(device + "\n")


def test_sysfs_reader_counts_gpus_not_switches(tmp_path):
    _sysfs_device(tmp_path, "0000:1b:00.0", "0x030200", "0x10de", "0x2330")
    _sysfs_device(tmp_path, "0000:43:00.0", "0x030200", "0x10de", "0x2330")
    _sysfs_device(tmp_path, "0000:07:00.0", "0x068000", "0x10de", "0x22a3")  # NVSwitch
    _sysfs_device(tmp_path, "0000:04:00.0", "0x030000", "0x1a03", "0x2000")  # ASPEED VGA
    _sysfs_device(tmp_path, "c941:00:02.0", "0x030000", "0x10de", "0x2236")  # VGA-class NVIDIA
    (tmp_path / "not-a-device").mkdir()
    devices = pci.read_sysfs_pci_devices(str(tmp_path))
    assert pci.count_nvidia_gpus(devices) == 3
    assert [d["pci_bus_id"] for d in pci.nvidia_nvswitches(devices)] == ["0000:07:00.0"]
    assert pci.read_sysfs_pci_devices(str(tmp_path / "missing")) == []


def test_long_lines_are_not_device_lines():
    """A 100 000-space class part made the lazy class regex quadratic; such a line is no lspci line."""
    line = "0000:01:00.0 " + " " * 100000 + "x [0302]: NVIDIA Corporation Device [10de:2330]"
    assert pci.parse_lspci(line + "\n0000:02:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2330]\n") == [
        pci._device("0000:02:00.0", "0302", "3D controller", "10de", "2330", "NVIDIA Corporation Device [10de:2330]")]


def test_oversized_lspci_is_refused(monkeypatch):
    monkeypatch.setattr(pci, "MAX_LSPCI_CHARS", 100)
    with pytest.raises(pci.LspciParseError, match="longer than"):
        pci.parse_lspci("x" * 101)
