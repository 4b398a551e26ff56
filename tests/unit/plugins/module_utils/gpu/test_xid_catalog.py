# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's Xid catalog as data: the generated module equals the TSVs, every row maps to an action,
the NVLink5 (144-150) decode table per driver generation, and the kernel-log parser's new forms."""
import importlib.util
import os

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import xid
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import xid_catalog

from gpu_fixtures import FIXTURE_DIR, REPO

GENERATOR = os.path.join(REPO, "tests", "tools", "gen_xid_catalog.py")
CATALOG_TSV = os.path.join(FIXTURE_DIR, "13_nvidia_xid_catalog.tsv")
DECODE_TSV = os.path.join(FIXTURE_DIR, "14_nvidia_xid_144_150_decode.tsv")


def generator():
    spec = importlib.util.spec_from_file_location("gen_xid_catalog", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tsv_rows(path):
    with open(path) as handle:
        lines = [line.rstrip("\n") for line in handle if not line.startswith("#")]
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:] if line.strip()]


def test_fixture_copies_name_their_source():
    for path in (CATALOG_TSV, DECODE_TSV):
        with open(path) as handle:
            head = handle.readline()
        assert head.startswith("# Source: NVIDIA") and "analyzing-xid-catalog" in head


def test_generated_module_equals_the_tsvs():
    with open(os.path.join(REPO, "plugins", "module_utils", "gpu", "xid_catalog.py")) as handle:
        assert handle.read() == generator().render(), "run tests/tools/gen_xid_catalog.py"
    assert sorted(xid_catalog.XID_ROWS) == list(range(1, 173))
    assert len(xid_catalog.NVLINK5_DECODE) == len(tsv_rows(DECODE_TSV)) == 95


def test_every_catalog_row_maps_to_our_action():
    mapping = {"RESTART_APP": "restart_app", "RESET_GPU": "reset_gpu", "RESTART_BM": "reboot_node",
               "IGNORE": "ignore", "CONTACT_SUPPORT": "workflow"}
    decode = set((r[0], r[5]) for r in xid_catalog.NVLINK5_DECODE)
    for row in tsv_rows(CATALOG_TSV):
        number, bucket = int(row["xid"]), row["immediate_action"]
        action = xid.bucket_action(bucket)
        assert action in xid.ACTIONS, row
        if bucket in mapping:
            assert action == mapping[bucket], row
        elif bucket in xid.WORKFLOW_BUCKETS:
            assert action == xid.WORKFLOW_BUCKETS[bucket], row
        else:  # CHECK_MECHANICALS, UPDATE_SWFW, RESTART_VM, CHECK_UVM, (none)
            assert action == "workflow", row
        if "subcode=" in row["notes"]:  # the 144-150 subcode rows repeat the decode table
            assert (number, bucket) in decode, row
        else:
            assert xid.XID_CATALOG[number]["bucket"] == (None if bucket == "(none)" else bucket)


def test_overrides_keep_working_and_keep_nvidia_bucket():
    merged = xid.merge_overrides({160: "reboot_node", "999": "reset_gpu"})
    assert merged[160]["action"] == "reboot_node" and merged[160]["bucket"] == "IGNORE"
    assert merged[999]["action"] == "reset_gpu" and merged[999]["bucket"] is None
    assert xid.classify(160, "", merged) == "reboot_node" and xid.classify(160, "") == "ignore"
    assert xid.classify(149, "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x0)", xid.merge_overrides({149: "ignore"})) \
        == "ignore"


@pytest.mark.parametrize("version, generation", [
    ("565.57.01", "lt_r575"), ("570.158.01", "lt_r575"), ("575.57.08", "ge_r575"), ("580.65.06", "ge_r575"),
    (None, None), ("N/A", None),
])
def test_driver_generation(version, generation):
    assert xid.driver_generation(version) == generation


# Real lines: NVIDIA/NVSentinel csv_test.go (fixture 07 [I]), leptonai/gpud #1160 and #1174 (pre-R575 intrinfo
# form, and one R575+ 144 line); constructed lines (marked) match the R575+ column of the decode table.
L149_PEER = "NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
L149_SWUSER = "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
L149_V2 = "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x02600011 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"  # constructed
L145_V1 = "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
L145_V2 = "RLW_REMAP Nonfatal XC0 i0 Link 03 (0x00000004 0x00000100 0x00000000 0x00000000 0x00000000 0x00000000)"  # constructed
L145_RXPIPE_ACTION2 = "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x000004c2 0x00000001 0x0 0x0 0x0 0x0)"  # constructed
L144_V2 = "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)"


@pytest.mark.parametrize("number, line, generation, action, bucket", [
    (149, L149_PEER, "lt_r575", "reset_gpu", "RESET_GPU"),           # subcode 0x25 INVESTIGATE_PEER_DEVICE
    (149, L149_SWUSER, "lt_r575", "ignore", "IGNORE"),               # 0x26: IGNORE although the line says Fatal
    (149, L149_SWUSER, "ge_r575", "reset_gpu", None),                # no R575+ row: the line's Fatal word
    (149, L149_V2, "ge_r575", "ignore", "IGNORE"),
    (149, L149_V2, "lt_r575", "reset_gpu", None),
    (145, L145_V1, "lt_r575", "ignore", "IGNORE"),
    (145, L145_V1, "ge_r575", "workflow", None),                     # Nonfatal and no row: reported only
    (145, L145_V2, "ge_r575", "ignore", "IGNORE"),
    (145, L145_V2, "lt_r575", "workflow", None),
    (145, L145_RXPIPE_ACTION2, "lt_r575", "reset_gpu", "RESET_GPU"),  # action2 pattern (bit 10) matches
    (144, L144_V2, "ge_r575", "ignore", "IGNORE"),
    (144, L144_V2, None, "ignore", "IGNORE"),                        # unknown driver: both columns tried
])
def test_nvlink5_decode_per_driver_generation(number, line, generation, action, bucket):
    decoded = xid.decode_nvlink5(number, line, generation)
    assert (decoded["action"], decoded["bucket"]) == (action, bucket), decoded["rule"]


def test_nvlink5_xid_154_eval_and_unparsed_lines():
    decoded = xid.decode_nvlink5(145, "RLW_REMAP Nonfatal XC0 i0 Link 03 (0x00000004 0x00000001 0x0)", "ge_r575")
    assert decoded["action"] == "xid_154_eval" and decoded["bucket"] == "XID_154_EVAL"
    judged = xid.judge_line(145, "RLW_REMAP Nonfatal XC0 i0 Link 03 (0x00000004 0x00000001 0x0)", None, "ge_r575")
    assert judged["follows"] == 154 and judged["action"] == "restart_app"
    assert xid.decode_nvlink5(149, "something Fatal happened", None)["action"] == "reset_gpu"
    assert xid.decode_nvlink5(149, "garbled", None)["action"] == "workflow"


@pytest.mark.parametrize("message, action", [
    ("NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "reset_gpu"),  # fixture 07 [I]
    ("NVLink: non-fatal error detected on link 3(0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)", "workflow"),
])
def test_xid_74_fatal_text(message, action):
    assert xid.classify(74, message) == action


def test_xid_45_with_and_without_cause():
    # open-gpu-kernel-modules#1150
    judged = xid.judge_line(45, "Ch 00000001 caused by previous Xid 149")
    assert (judged["action"], judged["caused_by"], judged["bucket"]) == ("ignore", 149, "WORKFLOW_XID_45")
    alone = xid.judge_line(45, "Ch 00000010")
    assert (alone["action"], alone["caused_by"]) == ("workflow", None)


@pytest.mark.parametrize("code, action", [(1, "reset_gpu"), (2, "reboot_node"), (3, "drain_p2p"), (4, "reset_gpu"),
                                          (6, "reset_gpu"), (7, "reboot_node")])
def test_xid_154_codes(code, action):
    assert xid.xid_154_action("GPU recovery action changed from 0x0 (None) to 0x%x (whatever)" % code) == (action, False)


def test_sxid_severity_switch_and_link():
    log = ("[ 1108.858286] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28 sourcetrack timeout error (First)\n"
           "[38889.018130] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Link 04 RX Short Error Rate\n"
           "[38889.018131] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 12028, Data {0x000001c0, 0x00bd5c8a}\n")
    events = xid.parse_kernel_log(log)["sxid_events"]
    assert [(e["xid"], e["switch"], e["pci_bus_id"], e["fatal"], e["link"]) for e in events] == [
        (24007, "nvidia-nvswitch0", "0000:c3:00.0", True, 28),
        (20009, "nvidia-nvswitch1", "0000:06:00.0", False, 4),
        (12028, "nvidia-nvswitch1", "0000:06:00.0", None, None),
    ]


# NVIDIA/NVSentinel#155 (open kernel module 570, dmesg): bus id and failure on different lines.
FALLEN_MULTILINE = (
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
    "               NVRM: fallen off the bus and is not responding to commands.\n"
    "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
)


def test_multiline_fallen_off_the_bus():
    parsed = xid.parse_kernel_log(FALLEN_MULTILINE)
    assert [(e["pci_bus_id"], e["kind"], e["line"]) for e in parsed["bus_errors"]] == [("0000:b3:00.0", "fallen_off_bus", 1)]


def test_multiline_in_journal_form():
    journal = "".join("Oct 25 10:00:0%d host kernel: %s\n" % (n, line.strip()) for n, line in
                      enumerate(FALLEN_MULTILINE.replace("[ 1843.308145] ", "").replace("[ 1843.439662] ", "")
                                .splitlines()))
    parsed = xid.parse_kernel_log(journal)
    assert [(e["pci_bus_id"], e["kind"]) for e in parsed["bus_errors"]] == [("0000:b3:00.0", "fallen_off_bus")]


def test_continuation_does_not_jump_over_other_kernel_lines():
    log = ("[1.0] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
           "[1.1] usb 1-1: new device\n"
           "      NVRM: fallen off the bus and is not responding to commands.\n")
    assert [e["pci_bus_id"] for e in xid.parse_kernel_log(log)["bus_errors"]] == [None]


def test_hostile_long_line_is_bounded():
    """Issue #10 item 3: one 660 KB line of "NVRM: Xid (" used to take minutes; the line is cut, not scanned."""
    parsed = xid.parse_kernel_log("NVRM: Xid (" * 60000)
    assert parsed["events"] == [] and parsed["limits"] == {"chars_dropped": 0, "lines_cut": 1}


def test_oversized_log_keeps_its_newest_part():
    filler = ("x" * 99 + "\n") * ((xid.MAX_KERNEL_LOG_CHARS // 100) + 10)
    parsed = xid.parse_kernel_log("NVRM: Xid (PCI:0000:01:00): 79, old\n" + filler
                                  + "NVRM: Xid (PCI:0000:02:00): 79, new\n")
    assert [e["pci_bus_id"] for e in parsed["events"]] == ["0000:02:00.0"]
    assert parsed["limits"]["chars_dropped"] > 0


def test_driver_load_line_versions():
    parsed = xid.parse_kernel_log(
        "[ 1843.439669] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
        "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025\n"
        "[Sun Jul 28 09:15:27 2024] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n")
    assert parsed["driver_versions"] == ["570.158.01", "535.183.01"] and parsed["driver_loads"] == [1, 2]
