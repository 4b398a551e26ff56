# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi parsers on the real captures (01, 03, 04, 08, 09) and constructed edge cases."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils import nvidia_smi as smi

from gpu_fixtures import text

XML_A100 = "01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt"
H100 = "03_nvsmi_table_and_q_h100_sxm_x8_healthy.txt"
A40 = "04_nvsmi_table_err_gpu_xid119_partA.txt"
CSV = "08_nvsmi_query_gpu_csv.txt"
MIG = "09_nvsmi_mig_tables_part.txt"
XML_H100 = "constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt"
XML_A40 = "constructed_nvsmi_qx_a40_x8_gpu4_unknown_error.xml.txt"


# --- -q -x ------------------------------------------------------------------
def test_xml_a100_mig_fixture():
    report = smi.parse_query_xml(text(XML_A100))
    assert (report["driver_version"], report["cuda_version"]) == ("535.54.03", "12.2")
    assert report["attached_gpus"] == 4 and len(report["gpus"]) == 1  # telegraf trimmed the log
    gpu = report["gpus"][0]
    assert gpu["index"] == 0 and gpu["minor_number"] == 1
    assert gpu["pci_bus_id"] == "0000:01:00.0"
    assert gpu["pci_device_id"] == "0x20B210DE"
    assert gpu["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu["product"] == "NVIDIA A100-SXM4-80GB"
    assert (gpu["mig_mode"], gpu["mig_mode_pending"]) == ("Enabled", "Enabled")
    assert [d["gpu_instance_id"] for d in gpu["mig_devices"]] == [3, 4, 5, 6]
    assert {d["multiprocessor_count"] for d in gpu["mig_devices"]} == {14}
    assert {d["memory_total_mib"] for d in gpu["mig_devices"]} == {19968}
    assert gpu["memory_total_mib"] == 81920 and gpu["memory_used_mib"] == 50
    assert gpu["utilization_gpu_pct"] is None  # parent utilisation is N/A under MIG
    assert gpu["remapped_rows"] is None        # <remapped_rows>N/A</remapped_rows> is a scalar
    assert gpu["ecc_errors"]["volatile_uncorrectable"] == 0
    assert gpu["ecc_mode"] == "Enabled" and gpu["persistence_mode"] == "Disabled"
    assert gpu["temperature_c"] == 27 and gpu["unknown_error_fields"] == []


def test_xml_constructed_h100_and_a40():
    h100 = smi.parse_query_xml(text(XML_H100))
    assert len(h100["gpus"]) == h100["attached_gpus"] == 8
    assert all(g["mig_devices"] == [] for g in h100["gpus"])  # <mig_devices>None</mig_devices>
    assert h100["gpus"][0]["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert h100["gpus"][0]["recovery_action"] == "None"
    a40 = smi.parse_query_xml(text(XML_A40))
    bad = [g for g in a40["gpus"] if g["unknown_error_fields"]]
    assert [g["pci_bus_id"] for g in bad] == ["0000:83:00.0"]
    assert "temperature/gpu_temp" in bad[0]["unknown_error_fields"]


def test_xml_doctype_is_never_resolved(tmp_path):
    secret = tmp_path / "secret.dtd"
    secret.write_text('<!ENTITY leak "LEAKED">')
    doc = ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log SYSTEM "%s">\n'
           "<nvidia_smi_log><driver_version>550.54.15</driver_version><attached_gpus>0</attached_gpus>"
           "</nvidia_smi_log>" % secret)
    assert smi.parse_query_xml(doc)["driver_version"] == "550.54.15"
    entity_doc = ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]>\n'
                  "<nvidia_smi_log><driver_version>&b;</driver_version></nvidia_smi_log>")
    with pytest.raises(smi.NvidiaSmiParseError, match="entities"):
        smi.parse_query_xml(entity_doc)


@pytest.mark.parametrize("bad", ["", "   ", "<nvidia_smi_log><gpu>", "<other/>", "plain text"])
def test_xml_unparseable_is_one_line_error(bad):
    with pytest.raises(smi.NvidiaSmiParseError) as err:
        smi.parse_query_xml(bad)
    assert "\n" not in str(err.value)


def test_xml_old_and_renamed_tags_constructed():
    # constructed: DTD v10-style ECC (single_bit/double_bit), <clocks_throttle_reasons>, <name>, gpu id only on the element
    doc = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v10.dtd">
<nvidia_smi_log>
  <driver_version>418.87.01</driver_version>
  <cuda_version>10.1</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:00:1E.0">
    <name>Tesla V100-SXM2-16GB</name>
    <uuid>GPU-4c5f2a1e-0000-4000-8000-000000000001</uuid>
    <clocks_throttle_reasons><clocks_throttle_reason_gpu_idle>Active</clocks_throttle_reason_gpu_idle></clocks_throttle_reasons>
    <fb_memory_usage><total>16160 MiB</total><used>0 MiB</used><free>16160 MiB</free></fb_memory_usage>
    <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
    <ecc_errors>
      <volatile>
        <single_bit><device_memory>4</device_memory><total>4</total></single_bit>
        <double_bit><device_memory>2</device_memory><total>2</total></double_bit>
      </volatile>
    </ecc_errors>
    <retired_pages><pending_retirement>Yes</pending_retirement></retired_pages>
  </gpu>
</nvidia_smi_log>
"""
    gpu = smi.parse_query_xml(doc)["gpus"][0]
    assert gpu["product"] == "Tesla V100-SXM2-16GB"
    assert gpu["pci_bus_id"] == "0000:00:1e.0"
    assert gpu["ecc_errors"]["volatile_uncorrectable"] == 2
    assert gpu["ecc_errors"]["volatile_correctable"] == 4
    assert gpu["retired_pages_pending"] is True
    assert gpu["mig_mode"] is None and gpu["memory_total_mib"] == 16160


# --- -q ---------------------------------------------------------------------
def test_query_text_h100_fixture():
    report = smi.parse_query_text(text(H100, "B"))
    assert report["attached_gpus"] == 8 and len(report["gpus"]) == 1
    gpu = report["gpus"][0]
    assert gpu["pci_bus_id"] == "0000:18:00.0" and gpu["pci_device_id"] == "0x233010DE"
    assert gpu["uuid"] == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
    assert gpu["recovery_action"] == "None" and gpu["reset_required"] is False
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["mig_mode"] == "Disabled" and gpu["memory_total_mib"] == 81559
    assert gpu["ecc_errors"]["volatile_uncorrectable"] == 0 and gpu["unknown_error_fields"] == []


QUERY_BROKEN = """
==============NVSMI LOG==============

Timestamp                                 : Tue Mar  4 10:12:01 2025
Driver Version                            : 550.127.05
CUDA Version                              : 12.4

Attached GPUs                             : 2
Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error
GPU 00000000:3B:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    GPU UUID                              : GPU-7e7d2a20-56b8-3220-e75c-1f3185864bda
    Temperature
        GPU Current Temp                  : Unknown Error
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 1
        Pending                           : Yes
        Remapping Failure Occurred        : No
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 3
    MIG Devices                           : None
"""  # constructed: a handle failure, Unknown Error and a pending remap in one report


def test_query_text_constructed_faults():
    report = smi.parse_query_text(QUERY_BROKEN)
    assert report["handle_errors"] == [{
        "pci_bus_id": "0000:0b:00.0",
        "message": "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error"}]
    gpu = report["gpus"][0]
    assert gpu["unknown_error_fields"] == ["Temperature/GPU Current Temp"]
    assert gpu["remapped_rows"]["pending"] is True and gpu["remapped_rows"]["uncorrectable"] == 1
    assert gpu["ecc_errors"]["volatile_uncorrectable"] == 3
    assert gpu["mig_devices"] == []


def test_query_text_garbage():
    with pytest.raises(smi.NvidiaSmiParseError):
        smi.parse_query_text("hello\nworld\n")


# --- table ------------------------------------------------------------------
def test_table_h100_healthy():
    table = smi.parse_table(text(H100, "A"))
    assert (table["driver_version"], table["cuda_version"]) == ("565.57.01", "12.7")
    assert [g["index"] for g in table["gpus"]] == list(range(8))
    assert table["gpus"][7]["pci_bus_id"] == "0000:db:00.0"
    assert not any(g["err"] for g in table["gpus"])
    assert {g["mig_mode"] for g in table["gpus"]} == {"Disabled"}
    assert table["gpus"][0]["memory_total_mib"] == 81559 and table["processes"] == []


def test_table_a40_err_row():
    table = smi.parse_table(text(A40, "A"))
    assert [g["index"] for g in table["gpus"] if g["err"]] == [4]
    gpu4 = table["gpus"][4]
    assert gpu4["pci_bus_id"] == "0000:83:00.0" and gpu4["product"] is None
    assert {"temperature", "gpu_util", "mig_mode"} <= set(gpu4["err_fields"])
    assert table["gpus"][4]["memory_total_mib"] == 46068  # still printed on an ERR! row
    assert table["processes"] == [{"gpu_index": 2, "gi": None, "ci": None, "pid": 2111354, "type": "C",
                                   "name": "...eratornet/venv/bin/python", "memory_mib": 818}]


def test_table_mig_domain_0001():
    table = smi.parse_table(text(MIG, "A100-80GB] nvidia-smi (MIG"))
    assert len(table["gpus"]) == 1
    gpu = table["gpus"][0]
    assert gpu["pci_bus_id"] == "0001:00:00.0" and gpu["ecc"] == "On" and gpu["mig_mode"] == "Enabled"


def test_table_handle_error_and_no_driver_constructed():
    head = text(H100, "A").splitlines()
    # constructed: the real tool prints the handle error before the table and omits that GPU
    output = "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n" + "\n".join(head)
    table = smi.parse_table(output)
    assert table["handle_errors"][0]["pci_bus_id"] == "0000:0b:00.0"
    no_driver = smi.parse_table(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n")
    assert no_driver["no_driver"] is True and no_driver["gpus"] == []
    with pytest.raises(smi.NvidiaSmiParseError):
        smi.parse_table("Segmentation fault\n")


# --- CSV ----------------------------------------------------------------------
def test_csv_header_with_units_and_na():
    rows = smi.parse_query_csv(text(CSV, "a"))
    assert rows[0]["name"] == "Tesla P100-PCIE-16GB"
    assert rows[0]["fan.speed"] is None and rows[0]["memory.free"] == "16280"


def test_csv_canonical_header_and_elision():
    lines = [line for line in text(CSV, "b").splitlines() if line != "[...]"]  # the author's elision
    rows = smi.parse_query_csv("\n".join(lines))
    assert [r["pci.bus_id"] for r in rows] == ["00000000:04:00.0", "00000000:8B:00.0"]


def test_csv_noheader_mig_and_na():
    rows = smi.parse_query_csv(text(CSV, "c"), ["name", "pci.bus_id", "mig.mode.current", "mig.mode.pending"])
    assert rows[0]["mig.mode.current"] == "Enabled"
    assert rows[1]["mig.mode.current"] is None and rows[1]["mig.mode.pending"] is None


def test_csv_values_with_units():
    rows = smi.parse_query_csv(text(CSV, "d"))
    assert smi.parse_number(rows[0]["fan.speed"]) == 38
    assert smi.parse_number(rows[0]["memory.used"]) == 575
    assert rows[0]["serial"] is None and rows[1]["index"] == "1"


def test_csv_wrong_width_is_error():
    with pytest.raises(smi.NvidiaSmiParseError, match="row 1"):
        smi.parse_query_csv("name, uuid\nonly-one\n")


@pytest.mark.parametrize("value, expected", [
    ("19968 MiB", 19968), ("67.03 W", 67.03), ("N/A", None), ("[N/A]", None), ("38 %", 38),
    ("Unknown Error", None), ("-8 C", -8),
])
def test_parse_number(value, expected):
    assert smi.parse_number(value) == expected
