# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Xid catalog and kernel-log parser (fixture 07 groups plus constructed lines)."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import xid

from gpu_fixtures import text

KERNEL = "07_kernel_xid_lines_real_part.txt"


@pytest.mark.parametrize("action, numbers", [
    ("reset_gpu", [46, 48, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158]),
    ("reboot_node", [79]),
    ("workflow", [45, 74, 144, 145, 146, 147, 148, 149, 150, 171, 172]),
    ("restart_app", [13, 31, 94]),
    ("ignore", [43, 63, 92, 93, 160, 161]),
])
def test_catalog_actions_follow_nvidia(action, numbers):
    """NVIDIA's immediate buckets (tests/fixtures/nvidia/13_nvidia_xid_catalog.tsv), taken alone."""
    for number in numbers:
        assert xid.XID_CATALOG[number]["action"] == action, number
        assert xid.classify(number, "") == action, number


def test_unknown_xid_defaults_to_workflow():
    assert 999 not in xid.XID_CATALOG
    assert xid.classify(999, "anything") == "workflow"


@pytest.mark.parametrize("message, expected", [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", ("reset_gpu", False)),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", ("reboot_node", False)),
    ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", ("drain_p2p", False)),
    ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", ("reset_gpu", False)),
    ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", (None, True)),
    ("garbled", ("workflow", False)),
])
def test_xid_154_by_text(message, expected):
    assert xid.xid_154_action(message) == expected


def test_overrides_and_their_errors():
    merged = xid.merge_overrides({"13": "reset_gpu", 171: "reboot_node"})
    assert merged[13]["action"] == "reset_gpu" and merged[171]["action"] == "reboot_node"
    assert xid.XID_CATALOG[13]["action"] == "restart_app"  # the built-in catalog is untouched
    assert xid.classify(154, "to 0x1 (GPU Reset Required)", xid.merge_overrides({154: "ignore"})) == "ignore"
    with pytest.raises(xid.XidCatalogError, match=r"xid_actions\.13: 'explode' is not an action"):
        xid.merge_overrides({13: "explode"})
    with pytest.raises(xid.XidCatalogError, match=r"xid_actions\.abc: the key is not an Xid number"):
        xid.merge_overrides({"abc": "ignore"})


def test_dmesg_ctime_group_a():
    parsed = xid.parse_kernel_log(text(KERNEL, "A"))
    events = parsed["events"]
    assert [e["xid"] for e in events] == [13, 13, 13, 109]
    assert events[0]["timestamp"] == "Fri Aug 30 11:43:09 2024"
    assert events[0]["pid"] is None and events[0]["name"] is None  # pid='<unknown>', name=<unknown>
    assert events[3]["pid"] == 1797828 and events[3]["name"] == "pt_main_thread"
    assert events[3]["message"].startswith("Ch 00000008, errorString CTX SWITCH TIMEOUT")
    assert {e["pci_bus_id"] for e in events} == {"0000:cb:00.0"}


def test_uuid_map_and_driver_load_group_b():
    parsed = xid.parse_kernel_log(text(KERNEL, "B"))
    assert parsed["uuid_map"]["0000:00:08.0"] == "GPU-c24840ec-8de1-83d5-b126-08000173ae32"
    assert parsed["driver_loads"] == [1]
    assert [e["xid"] for e in parsed["events"]] == [43, 43, 31, 94]
    assert parsed["events"][2]["name"] == "python3.10"


def test_raw_dmesg_and_no_prefix_groups_c_e():
    c = xid.parse_kernel_log(text(KERNEL, "C"))["events"]
    assert [(e["xid"], e["timestamp"]) for e in c] == [(48, "430954.509105"), (63, "430954.532443"), (94, "430954.533994")]
    e = xid.parse_kernel_log(text(KERNEL, "E"))["events"][0]
    assert (e["xid"], e["pid"], e["name"], e["timestamp"]) == (63, 1896, None, None)  # no name= in 510
    assert e["pci_bus_id"] == "0000:10:1c.0"


def test_nvidia_test_strings_group_i():
    events = xid.parse_kernel_log(text(KERNEL, "I"))["events"]
    by_xid = dict((e["xid"], e) for e in events)
    assert by_xid[149]["pci_bus_id"] == "0018:01:00.0" and "Fatal" in by_xid[149]["message"]
    assert by_xid[74]["pci_bus_id"] == "0003:00:00.0"
    assert by_xid[69]["pci_bus_id"] == "0001:ab:cd.0"  # odd device number kept as printed
    recovery = [e["message"] for e in events if e["xid"] == 154]
    assert recovery[0].endswith("to 0x1 (GPU Reset Required)") and recovery[1].endswith("to 0x0 (None)")


def test_journal_prefix_and_parenthesised_name_group_j():
    parsed = xid.parse_kernel_log(text(KERNEL, "J"))
    events = parsed["events"]
    assert [e["xid"] for e in events] == [62, 154, 109]
    assert events[0]["timestamp"] == "Feb 20 01:34:20" and events[0]["pid"] is None
    assert events[2]["name"] == "(udev-worker)" and events[2]["pid"] == 619
    assert parsed["uuid_map"] == {"0000:2d:00.0": "GPU-e6514a33-4652-a527-3b8e-05f66dd304d8"}


def test_fallen_off_bus_group_o():
    parsed = xid.parse_kernel_log(text(KERNEL, "O"))
    assert parsed["events"][0]["xid"] == 79 and parsed["events"][0]["pid"] is None
    assert parsed["bus_errors"] == [{
        "line": 2, "timestamp": "74889.644138", "pci_bus_id": "0000:02:00.0", "kind": "fallen_off_bus",
        "raw": "[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.", "at_probe": False}]


def test_relative_dmesg_prefix_fixture_04():
    events = xid.parse_kernel_log(text("04_nvsmi_table_err_gpu_xid119_partA.txt", "A"))["events"]
    assert [(e["xid"], e["pci_bus_id"], e["timestamp"]) for e in events] == [(119, "0000:83:00.0", "+6.010643")]


CONSTRUCTED_LOG = """\
2024-08-30T11:43:09+0000 node-7 kernel: NVRM: Xid (PCI:0000:01:00 GPU-I:05): 43, pid=4242, name=vllm serve (worker 3), Ch 00000008
kernel: NVRM: Xid (0000:03:00): 13, 0003 00000000 0000c1c0 00000144 00000000 00000080
NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
Aug 30 11:45:00 node-7 kernel: NVRM: GPU 0000:5d:00.0: GPU is lost
nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 10 egress non-posted PRIV error (First)
Mar 04 10:00:00 node-7 kernel: NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 3
NVRM: Xid (PCI:0000:9a:00): 999
"""  # constructed: MIG, names with spaces and parentheses, old format, ISO prefix, bus errors without Xid, SXid


def test_constructed_edge_lines():
    parsed = xid.parse_kernel_log(CONSTRUCTED_LOG)
    mig = parsed["events"][0]
    assert (mig["pci_bus_id"], mig["gi"], mig["pid"], mig["name"]) == ("0000:01:00.0", 5, 4242, "vllm serve (worker 3)")
    assert mig["timestamp"] == "2024-08-30T11:43:09+0000" and mig["message"] == "Ch 00000008"
    old = parsed["events"][1]
    assert (old["xid"], old["pci_bus_id"], old["pid"], old["name"]) == (13, "0000:03:00.0", None, None)
    assert [(b["pci_bus_id"], b["kind"]) for b in parsed["bus_errors"]] == [
        ("0000:3b:00.0", "fallen_off_bus"), ("0000:5d:00.0", "gpu_lost")]
    assert [s["xid"] for s in parsed["sxid_events"]] == [12028]
    assert [e["xid"] for e in parsed["events"]] == [43, 13, 74, 999]
    assert parsed["events"][3]["message"] == ""
