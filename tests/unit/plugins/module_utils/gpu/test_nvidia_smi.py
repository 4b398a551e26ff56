# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi parsers on the real captures (01, 03, 04, 08, 09) and constructed edge cases."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvidia_smi as smi

from gpu_fixtures import text

XML_A100 = "01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt"
H100 = "03_nvsmi_table_and_q_h100_sxm_x8_healthy.txt"
A40 = "04_nvsmi_table_err_gpu_xid119_partA.txt"
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


@pytest.mark.parametrize("value, expected", [
    ("19968 MiB", 19968), ("67.03 W", 67.03), ("N/A", None), ("[N/A]", None), ("38 %", 38),
    ("Unknown Error", None), ("-8 C", -8), ("1" * 22, None), ("1" * 100000 + " MiB", None),
], ids=lambda v: repr(v)[:24])
def test_parse_number(value, expected):
    assert smi.parse_number(value) == expected


def test_field_table_reads_xml_and_text_alike():
    """One field table: the same GPU as -q -x and as -q gives the same dict."""
    xml = smi.parse_query_xml(text(XML_H100))["gpus"][0]
    query = smi.parse_query_text(text(H100, "B"))["gpus"][0]
    keys = [row[0] for row in smi.GPU_FIELDS]
    assert len(keys) > 15
    for key in ("pci_device_id", "mig_mode", "persistence_mode", "recovery_action", "reset_required"):
        assert xml[key] is not None and xml[key] == query[key], key


# --- hostile input (issue #10) ------------------------------------------------
def test_doctype_flood_is_linear():
    """#10.2: "<!DOCTYPE a [" * 40000 took 54 s in a quadratic regex."""
    doc = "<nvidia_smi_log>" + "<!DOCTYPE a [" * 40000
    with pytest.raises(smi.NvidiaSmiParseError):
        smi.parse_query_xml(doc)


def test_internal_dtd_subset_is_refused():
    with pytest.raises(smi.NvidiaSmiParseError, match="internal DTD subset"):
        smi.parse_query_xml('<!DOCTYPE nvidia_smi_log [<!ELEMENT a ANY>]><nvidia_smi_log/>')


@pytest.mark.parametrize("depth", [1000, 2000, 50000])
def test_deep_xml_is_refused_not_a_recursion_error(depth):
    """#10.5: 1000 nested elements raised "maximum recursion depth exceeded"."""
    doc = "<nvidia_smi_log><gpu>" + "<a>" * depth + "x" + "</a>" * depth + "</gpu></nvidia_smi_log>"
    with pytest.raises(smi.NvidiaSmiParseError, match="nests deeper than 32 levels"):
        smi.parse_query_xml(doc)


def test_deep_query_text_is_refused():
    doc = "Driver Version : 1\nGPU 00000000:01:00.0\n" + "".join(" " * (i + 1) + "K%d :\n" % i for i in range(2000))
    with pytest.raises(smi.NvidiaSmiParseError, match="nests deeper"):
        smi.parse_query_text(doc)


def test_invalid_utf8_from_a_file_lookup():
    """#10.6: lookup('file') hands invalid UTF-8 over as lone surrogates; ElementTree refused them."""
    raw = text(XML_H100).encode("utf-8").replace(b"NVIDIA H100 80GB HBM3", b"NVIDIA \xff\xfe H100", 1)
    as_lookup_reads_it = raw.decode("utf-8", "surrogateescape")
    assert "\udcff" in as_lookup_reads_it
    report = smi.parse_query_xml(as_lookup_reads_it)
    assert report["gpus"][0]["product"] == "NVIDIA \ufffd\ufffd H100"


@pytest.mark.parametrize("count", ["10000000000000000000000", "1025", "-1"])
def test_absurd_attached_gpus_is_refused(count):
    """#10.11: 10^22 attached GPUs was accepted (as a float)."""
    doc = "<nvidia_smi_log><attached_gpus>%s</attached_gpus></nvidia_smi_log>" % count
    with pytest.raises(smi.NvidiaSmiParseError, match="not a GPU count"):
        smi.parse_query_xml(doc)
    with pytest.raises(smi.NvidiaSmiParseError, match="not a GPU count"):
        smi.parse_query_text("Driver Version : 550.54.15\nAttached GPUs : %s\n" % count)


def test_oversized_input_is_refused(monkeypatch):
    monkeypatch.setattr(smi, "MAX_INPUT_CHARS", 1000)
    for parser in (smi.parse_query_xml, smi.parse_query_text, smi.parse_table):
        with pytest.raises(smi.NvidiaSmiParseError, match="longer than"):
            parser("x" * 1001)
