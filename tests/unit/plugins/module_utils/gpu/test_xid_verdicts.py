# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_health verdicts driven by NVIDIA's Xid catalog (issue #12 section 1)."""
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health as gh

from gpu_fixtures import text
from test_xid_catalog import FALLEN_MULTILINE, L145_V2, L149_PEER, L149_V2

H100_XML = "constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt"
H100 = "03_nvsmi_table_and_q_h100_sxm_x8_healthy.txt"
R575_LOAD = "[    5.000000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build\n"
R570_LOAD = "[    5.000000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build\n"


def healthy_h100(**extra):
    inputs = {"nvidia_smi_xml": text(H100_XML), "nvidia_smi": text(H100, "A")}
    inputs.update(extra)
    return inputs


def events(result):
    return dict((e["xid"], e) for e in result["xid_events"])


def test_xid_160_is_a_channel_retirement_event_not_a_reboot():
    line = "NVRM: Xid (PCI:0000:18:00): 160, Channel Retirement Event\n"
    result = gh.evaluate(healthy_h100(kernel_log=line))
    assert result["gpu_ready"], result["reasons"]
    assert (events(result)[160]["action"], events(result)[160]["bucket"]) == ("ignore", "IGNORE")
    assert events(result)[160]["investigatory"] == "INVESTIGATE_SW"


def test_xid_45_caused_by_follows_its_cause():
    log = ("NVRM: Xid (PCI:0000:18:00): 149, " + L149_PEER + "\n"
           "NVRM: Xid (PCI:0000:18:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149\n")
    result = gh.evaluate(healthy_h100(kernel_log=log))
    found = events(result)
    assert (found[45]["action"], found[45]["caused_by"], found[45]["bucket"]) == ("ignore", 149, "WORKFLOW_XID_45")
    assert found[149]["action"] == "reset_gpu" and not result["gpu_ready"]
    assert any("Xid 149" in reason for reason in result["reasons"])
    assert not any("Xid 45 " in reason for reason in result["reasons"])


def test_xid_45_cause_outside_the_window_is_judged_as_the_cause():
    line = "NVRM: Xid (PCI:0000:18:00): 45, pid=1, name=python3, Ch 00000001 caused by previous Xid 79\n"
    found = events(gh.evaluate(healthy_h100(kernel_log=line)))
    assert (found[45]["action"], found[45]["caused_by"]) == ("reboot_node", 79)


def test_xid_45_alone_is_workflow_and_leaves_the_gpu_ready():
    result = gh.evaluate(healthy_h100(kernel_log="NVRM: Xid (PCI:0000:18:00): 45, pid=1, name=app, Ch 00000010\n"))
    assert result["gpu_ready"] and events(result)[45]["action"] == "workflow"


def test_xid_74_fatal_marks_the_gpu():
    line = ("NVRM: Xid (PCI:0000:18:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link "
            "14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)\n")
    result = gh.evaluate(healthy_h100(kernel_log=line))
    assert not result["gpu_ready"] and events(result)[74]["action"] == "reset_gpu"


def test_nvlink5_lines_decoded_with_the_kernel_driver_generation():
    # kernel log only: the generation comes from the driver load line
    before = gh.evaluate({"kernel_log": R570_LOAD + "NVRM: Xid (PCI:0018:01:00): 149, " + L149_V2 + "\n"})
    after = gh.evaluate({"kernel_log": R575_LOAD + "NVRM: Xid (PCI:0018:01:00): 149, " + L149_V2 + "\n"})
    assert events(before)[149]["action"] == "reset_gpu" and events(before)[149]["decode"]["bucket"] is None
    assert events(after)[149]["action"] == "ignore" and events(after)[149]["decode"]["bucket"] == "IGNORE"
    assert events(after)[149]["decode"]["generation"] == "ge_r575"
    decoded_145 = events(gh.evaluate({"kernel_log": R575_LOAD + "NVRM: Xid (PCI:0018:01:00): 145, " + L145_V2 + "\n"}))
    assert decoded_145[145]["action"] == "ignore" and decoded_145[145]["decode"]["subcode"] == "RLW_REMAP"


def test_xid_154_eval_follows_the_gpus_xid_154():
    # constructed: RLW_REMAP errorStatus 0x1 in the before-R575 column (the H100 capture runs driver 565)
    eval_line = "NVRM: Xid (PCI:0000:18:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 03 (0x00000082 0x00000001 0x0)\n"
    alone = gh.evaluate(healthy_h100(kernel_log=eval_line))
    assert alone["gpu_ready"] and events(alone)[145]["action"] == "restart_app"
    with_154 = gh.evaluate(healthy_h100(kernel_log=eval_line + "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery "
                                        "action changed from 0x0 (None) to 0x1 (GPU Reset Required)\n"))
    assert not with_154["gpu_ready"] and events(with_154)[145]["action"] == "reset_gpu"
    assert "XID_154_EVAL" in events(with_154)[145]["note"]


def test_xid_154_drain_p2p_is_its_own_action():
    line = "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)\n"
    result = gh.evaluate(healthy_h100(kernel_log=line))
    assert events(result)[154]["action"] == "drain_p2p" and not result["gpu_ready"]
    assert [a["action"] for a in result["actions"] if a["pci_bus_id"] == "0000:18:00.0"] == ["drain_p2p"]


def test_xid_48_companions_follow_48():
    log = ("NVRM: Xid (PCI:0000:18:00): 48, An uncorrectable double bit error (DBE) has been detected\n"
           "NVRM: Xid (PCI:0000:18:00): 171, Uncorrectable DRAM error\n")
    found = events(gh.evaluate(healthy_h100(kernel_log=log)))
    assert found[48]["action"] == "reset_gpu" and found[171]["action"] == "ignore"
    alone = events(gh.evaluate(healthy_h100(kernel_log="NVRM: Xid (PCI:0000:18:00): 172, Uncorrectable SRAM error\n")))
    assert alone[172]["action"] == "workflow"


def test_fatal_sxid_makes_the_fabric_not_ready_and_nonfatal_is_a_note():
    fatal = "[ 1108.858286] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28 sourcetrack timeout error (First)\n"
    result = gh.evaluate(healthy_h100(kernel_log=fatal))
    assert not result["gpu_ready"]
    assert any("nvidia-nvswitch0 (0000:c3:00.0)" in r and "24007" in r and "fabric" in r for r in result["reasons"])
    nonfatal = "[38889.018130] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Link 04 RX Short Error Rate\n"
    result = gh.evaluate(healthy_h100(kernel_log=nonfatal))
    assert result["gpu_ready"] and any("20009" in note for note in result["notes"])


def test_multiline_fallen_off_the_bus_marks_the_gpu():
    result = gh.evaluate({"kernel_log": FALLEN_MULTILINE})
    assert not result["gpu_ready"]
    assert [g["pci_bus_id"] for g in result["gpus"] if not g["healthy"]] == ["0000:b3:00.0"]


def test_hostile_kernel_log_is_bounded_and_said_so():
    result = gh.evaluate(healthy_h100(kernel_log="NVRM: Xid (" * 60000))
    assert result["gpu_ready"] and result["xid_events"] == []
    assert any("kernel_log was bounded" in note for note in result["notes"])
