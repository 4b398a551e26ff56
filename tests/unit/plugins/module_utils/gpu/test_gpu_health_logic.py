# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verdict rules of module_utils.gpu.gpu_health, one test per rule, plus live collection with the stand-in."""
import os

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health as gh
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeTools

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.xid import XidCatalogError

from gpu_fixtures import REPO, STANDIN_PATH, captured_inputs, text, verdict_cases

H100_XML = "constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt"
H100 = "03_nvsmi_table_and_q_h100_sxm_x8_healthy.txt"


def healthy_h100(**extra):
    inputs = {"nvidia_smi_xml": text(H100_XML), "nvidia_smi": text(H100, "A")}
    inputs.update(extra)
    return inputs


def gpu(result, bus_id):
    return [g for g in result["gpus"] if g["pci_bus_id"] == bus_id][0]


@pytest.mark.parametrize("case", verdict_cases(), ids=lambda c: c["name"][:40])
def test_every_fixture_verdict(case):
    result = gh.evaluate(captured_inputs(case), expected_gpus=case.get("expected_gpus"))
    assert result["gpu_ready"] is case["gpu_ready"], result["reasons"]
    assert sorted(g["pci_bus_id"] for g in result["gpus"] if not g["healthy"]) == sorted(case["unhealthy"])
    for key in ("nvidia_smi_gpu_count", "pci_gpu_count"):
        if key in case:
            assert result[key] == case[key]


def test_healthy_node_is_ready():
    result = gh.evaluate(healthy_h100(), expected_gpus=8)
    assert result["gpu_ready"] and result["reasons"] == []
    assert [g["index"] for g in result["gpus"]] == list(range(8))
    assert {a["action"] for a in result["actions"]} == {"none"}


def test_err_row_in_table():
    result = gh.evaluate({"nvidia_smi": text("04_nvsmi_table_err_gpu_xid119_partA.txt", "A", "^Mon Feb")})
    assert not result["gpu_ready"]
    assert result["reasons"] == [
        "GPU 4 0000:83:00.0 is unhealthy: nvidia-smi table shows ERR! (name, volatile_uncorrectable_ecc, fan, "
        "temperature, perf, power_usage, power_cap, gpu_util, mig_mode)"]


def test_handle_error_and_gpu_is_lost():
    table = "Unable to determine the device handle for gpu 0000:0B:00.0: GPU is lost.  Reboot the system to " \
            "recover this GPU\n" + text(H100, "A")  # constructed
    result = gh.evaluate({"nvidia_smi": table})
    bad = gpu(result, "0000:0b:00.0")
    assert not bad["healthy"] and "cannot get its handle" in bad["problems"][0]
    assert [a["action"] for a in result["actions"] if a["pci_bus_id"] == "0000:0b:00.0"] == ["reboot_node"]
    assert result["nvidia_smi_gpu_count"] == 9
    assert "GPU ? 0000:0b:00.0" in result["reasons"][0]


def test_fallen_off_bus_without_xid_line():
    result = gh.evaluate(healthy_h100(kernel_log="[ 12.5] NVRM: GPU 0000:9a:00.0: GPU has fallen off the bus.\n"))
    assert not result["gpu_ready"]
    assert gpu(result, "0000:9a:00.0")["problems"] == ["the kernel log says the GPU has fallen off the bus"]
    assert result["reasons"][0].startswith("GPU 4 0000:9a:00.0 (GPU-0c0ffee4-")


def test_unknown_error_fields():
    result = gh.evaluate({"nvidia_smi_xml": text("constructed_nvsmi_qx_a40_x8_gpu4_unknown_error.xml.txt")})
    assert not result["gpu_ready"]
    assert "'Unknown Error'" in gpu(result, "0000:83:00.0")["problems"][0]


def _xml_with(replace_from, replace_to):
    xml = text(H100_XML)
    assert replace_from in xml
    return xml.replace(replace_from, replace_to, 1)


def test_remapped_rows_pending_and_failure():
    pending = _xml_with("<remapped_row_pending>No</remapped_row_pending>", "<remapped_row_pending>Yes</remapped_row_pending>")
    result = gh.evaluate({"nvidia_smi_xml": pending})
    assert "row remapping is pending" in gpu(result, "0000:18:00.0")["problems"][0]
    failed = _xml_with("<remapped_row_failure>No</remapped_row_failure>", "<remapped_row_failure>Yes</remapped_row_failure>")
    assert "row remapping failed" in gh.evaluate({"nvidia_smi_xml": failed})["reasons"][0]


def test_volatile_ecc_counts_only_with_a_pending_action():
    ecc = _xml_with("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>")
    alone = gh.evaluate({"nvidia_smi_xml": ecc})
    assert alone["gpu_ready"] and gpu(alone, "0000:18:00.0")["notes"] == [
        "2 uncorrectable volatile ECC errors (no action pending)"]
    pending = ecc.replace("<reset_required>No</reset_required>", "<reset_required>Yes</reset_required>", 1)
    result = gh.evaluate({"nvidia_smi_xml": pending})
    assert not result["gpu_ready"]
    assert any("uncorrectable volatile ECC" in p for p in gpu(result, "0000:18:00.0")["problems"])


def test_fatal_xid_not_cleared_and_cleared_by_driver_reload():
    line = "[100.1] NVRM: Xid (PCI:0000:2a:00): 119, pid=1, name=python, Timeout waiting for RPC from GSP!\n"
    result = gh.evaluate(healthy_h100(kernel_log=line))
    assert not result["gpu_ready"] and "Xid 119" in gpu(result, "0000:2a:00.0")["problems"][0]
    assert result["actions"][1]["action"] == "reset_gpu"
    reload_line = "[200.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  565.57.01  Thu Oct 10 12:29:05 UTC 2024\n"
    cleared = gh.evaluate(healthy_h100(kernel_log=line + reload_line))
    assert cleared["gpu_ready"] and cleared["xid_events"][0]["cleared"] is True


def test_xid_154_judged_by_text_and_cleared_by_later_line():
    set_line = "NVRM: Xid (PCI:0000:5d:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)\n"
    clear_line = "NVRM: Xid (PCI:0000:5d:00): 154, GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)\n"
    result = gh.evaluate(healthy_h100(kernel_log=set_line))
    assert not result["gpu_ready"] and result["actions"][3]["action"] == "reboot_node"
    cleared = gh.evaluate(healthy_h100(kernel_log=set_line + clear_line))
    assert cleared["gpu_ready"]
    assert cleared["xid_events"][0]["count"] == 2 and cleared["xid_events"][0]["cleared"] is True


def test_mig_line_maps_to_parent_and_keeps_gi():
    line = "NVRM: Xid (PCI:0000:ab:00 GPU-I:05): 95, pid=77, name=trainer, Uncontained: FBHUB. RST: Yes, D-RST: No\n"
    result = gh.evaluate(healthy_h100(kernel_log=line))
    event = result["xid_events"][0]
    assert (event["gpu_index"], event["gi"], event["action"]) == (5, 5, "reset_gpu")
    assert not gpu(result, "0000:ab:00.0")["healthy"]


@pytest.mark.parametrize("number, action, bucket", [
    (13, "restart_app", "RESTART_APP"), (31, "restart_app", "RESTART_APP"), (94, "restart_app", "RESTART_APP"),
    (43, "ignore", "IGNORE"), (160, "ignore", "IGNORE"),
])
def test_application_xids_alone_leave_gpu_healthy(number, action, bucket):
    line = "NVRM: Xid (PCI:0000:18:00): %d, pid=1, name=app, detail\n" % number
    result = gh.evaluate(healthy_h100(kernel_log=line))
    assert result["gpu_ready"], result["reasons"]
    assert [(e["xid"], e["action"], e["bucket"], e["gpu_index"]) for e in result["xid_events"]] == [
        (number, action, bucket, 0)]


def test_dbe_then_remap_escalates_to_reset():
    result = gh.evaluate(healthy_h100(kernel_log=text("07_kernel_xid_lines_real_part.txt", "C")))
    events = dict((e["xid"], e) for e in result["xid_events"])
    assert events[48]["action"] == "reset_gpu" and events[48]["bucket"] == "WORKFLOW_XID_48"
    assert "drain" in events[48]["note"] and events[94]["action"] == "restart_app"
    assert events[63]["action"] == "reset_gpu" and "DBE" in events[63]["note"]


def test_xid_overrides_change_the_verdict():
    line = "NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=app, Graphics Exception\n"
    assert not gh.evaluate(healthy_h100(kernel_log=line), xid_actions={13: "reset_gpu"})["gpu_ready"]
    with pytest.raises(XidCatalogError, match=r"xid_actions\.13"):
        gh.evaluate(healthy_h100(), xid_actions={13: "nope"})


def test_unknown_xid_is_reported_not_fatal():
    result = gh.evaluate(healthy_h100(kernel_log="NVRM: Xid (PCI:0000:18:00): 171, something new\n"))
    assert result["gpu_ready"] and result["xid_events"][0]["action"] == "workflow"


def test_no_driver():
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " \
              "Make sure that the latest NVIDIA driver is installed and running.\n"
    result = gh.evaluate({"nvidia_smi_xml": message, "nvidia_smi": message})
    assert not result["gpu_ready"] and not result["driver_reachable"]
    assert result["nvidia_smi_gpu_count"] == 0
    assert result["reasons"][0].startswith("The NVIDIA driver cannot be reached: NVIDIA-SMI has failed")


def test_pci_count_differs_names_missing_gpus():
    lspci = text("10_lspci_nvidia_gpu_nvswitch.txt", "d1").replace("0000:1b:00.0", "0000:18:00.0")
    result = gh.evaluate(healthy_h100(lspci=lspci))
    assert result["pci_gpu_count"] == 8 and result["gpu_ready"] is True  # equal counts, NVSwitches not counted
    lspci_nine = lspci + "0000:e1:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330]\n"
    result = gh.evaluate({"nvidia_smi_xml": text(H100_XML), "lspci": lspci_nine})
    assert any("PCI shows 9 NVIDIA GPUs" in r and "0000:e1:00.0" in r for r in result["reasons"])


def test_device_plugin_count_and_mig_single_strategy():
    assert not gh.evaluate(healthy_h100(device_plugin_count=7))["gpu_ready"]
    assert gh.evaluate(healthy_h100(device_plugin_count=8))["gpu_ready"]
    mig = {"nvidia_smi_xml": text("01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt")}
    # the log describes 1 of 4 attached GPUs: judged only when expected_gpus says so
    assert gh.evaluate(dict(mig, device_plugin_count=4), expected_gpus=1)["gpu_ready"]  # 4 MIG devices
    assert not gh.evaluate(dict(mig, device_plugin_count=3), expected_gpus=1)["gpu_ready"]


def test_expected_gpus_differs():
    result = gh.evaluate(healthy_h100(), expected_gpus=7)
    assert result["reasons"] == [
        "expected_gpus is 7 but nvidia-smi shows 8 GPUs. Fix: find the missing GPUs or correct expected_gpus for this node."]


def test_unparseable_capture_is_a_clear_error():
    with pytest.raises(gh.GpuHealthError, match="nvidia_smi_xml cannot be parsed: .*Fix: pass the unmodified output"):
        gh.evaluate({"nvidia_smi_xml": "<nvidia_smi_log><gpu>"})


@pytest.mark.parametrize("value, expected", [("24h", "-24h"), ("30min", "-30min"), ("7d", "-7d")])
def test_xid_since(value, expected):
    assert gh.validate_since(value) == expected


def test_xid_since_rejects_garbage():
    with pytest.raises(gh.GpuHealthError, match="xid_since 'yesterday'"):
        gh.validate_since("yesterday")


def _tools(**kwargs):
    return NodeTools(paths={"nvidia-smi": STANDIN_PATH, "lspci": "/nonexistent/lspci"}, **kwargs)


@pytest.mark.parametrize("capture, ready", [("h100x8-healthy", True), ("a40x8-gpu4-err", False), ("no-driver", False)])
def test_collect_live_with_standin(capture, ready, tmp_path, monkeypatch):
    capture_dir = os.path.join(REPO, "tests", "standins", "captures", capture)
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", capture_dir)
    kernel = tmp_path / "kern.log"
    kernel.write_text(text("constructed_kernel_log_a40_gpu4_xid119.txt") if capture.startswith("a40") else "")
    sysfs = tmp_path / "sysfs"
    sysfs.mkdir()
    tools = _tools()
    inputs, sources = gh.collect(tools, kernel_log=str(kernel), sysfs_root=str(sysfs))
    assert sources["pci"] == str(sysfs) and inputs["pci_devices"] == []
    assert [c.status for c in tools.calls if c.tool == "lspci"] == ["missing"]
    result = gh.evaluate(inputs)
    # an empty sysfs shows 0 GPUs, so only the no-driver capture agrees with it
    assert result["gpu_ready"] is False
    without_pci = dict(inputs)
    without_pci.pop("pci_devices")
    assert gh.evaluate(without_pci)["gpu_ready"] is ready
    if capture == "a40x8-gpu4-err":
        assert [e["xid"] for e in result["xid_events"] if e["action"] == "reset_gpu"] == [119]
    if capture == "no-driver":
        assert [c.status for c in tools.calls if c.tool == "nvidia-smi"] == ["no_driver"]  # no second call


def _standin(tmp_path, body):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body, status, reason", [
    (None, "missing", "The NVIDIA driver cannot be reached: nvidia-smi was not found"),
    ("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9", "no_driver",
     "The NVIDIA driver cannot be reached: NVIDIA-SMI has failed because"),
    ("sleep 30", "timeout", "nvidia-smi did not answer within 1 s. Fix: a GPU or the driver is hung"),
    ("echo 'Failed to initialize NVML: Unknown Error' >&2; exit 255", "failed",
     "nvidia-smi -q -x exited with rc=255: Failed to initialize NVML: Unknown Error Fix: run nvidia-smi -q -x"),
    ("printf 'GPU\\000\\001garbage'", "unreadable", "nvidia-smi -q -x output is unreadable: it holds NUL bytes"),
    ("echo '<nvidia_smi_log><gpu>'; exit 0", "ok", "nvidia-smi -q -x output is unreadable: nvidia-smi -q -x output is not valid XML"),
], ids=["missing", "no_driver", "timeout", "non_zero", "garbage", "bad_xml"])
def test_each_runner_failure_is_a_reason(tmp_path, body, status, reason):
    binary = _standin(tmp_path, body) if body else str(tmp_path / "nvidia-smi")
    tools = NodeTools(paths={"nvidia-smi": binary, "lspci": "/nonexistent/lspci"}, timeout=1)
    inputs, _sources = gh.collect(tools, kernel_log=os.devnull, sysfs_root=str(tmp_path / "none"))
    result = gh.evaluate(inputs)
    assert result["gpu_ready"] is False and result["driver_reachable"] is False
    assert any(r.startswith(reason) for r in result["reasons"]), result["reasons"]
    assert tools.calls[0].status == status
    if status in ("timeout", "no_driver", "missing"):
        assert len([c for c in tools.calls if c.tool == "nvidia-smi"]) == 1  # the next call would only wait again


def test_captured_replay_goes_through_the_runner():
    texts = {"nvidia_smi_xml": text(H100_XML), "nvidia_smi": text(H100, "A"), "lspci": "", "kernel_log": ""}
    tools = NodeTools(source="captured", captured=texts)
    inputs, sources = gh.collect(tools)
    assert [c.command for c in tools.calls] == ["captured:nvidia_smi_xml", "captured:nvidia_smi_query",
                                                "captured:nvidia_smi", "captured:lspci", "captured:kernel_log"]
    assert [c.status for c in tools.calls][:2] == ["ok", "not_captured"]
    assert set(sources.values()) == {"captured"}
    assert gh.evaluate(inputs)["nvidia_smi_gpu_count"] == 8


def test_collect_live_missing_binary_and_bad_kernel_log(tmp_path):
    tools = NodeTools(paths={"nvidia-smi": str(tmp_path / "nvidia-smi"), "lspci": str(tmp_path / "x")})
    inputs, sources = gh.collect(tools, kernel_log=os.devnull, sysfs_root=str(tmp_path))
    assert sources["nvidia_smi_xml"] == "missing"
    result = gh.evaluate(inputs)
    assert not result["gpu_ready"] and "nvidia-smi was not found" in result["reasons"][0]
    with pytest.raises(gh.GpuHealthError, match="kernel_log .* cannot be read"):
        gh.collect(_tools(), kernel_log=str(tmp_path / "missing.log"))
