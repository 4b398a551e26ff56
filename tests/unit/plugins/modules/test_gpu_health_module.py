# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_health module: main() on every fixture case, live mode with the nvidia-smi stand-in, bad inputs."""
import json
import os
import sys
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import gpu_health

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "module_utils", "gpu"))
from gpu_fixtures import REPO, STANDIN_PATH, captured_inputs, text, verdict_cases  # noqa: E402


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_health.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("case", verdict_cases(), ids=lambda c: c["name"][:40])
def test_captured_fixture_verdicts(capsys, case):
    args = {"source": "captured", "captured": captured_inputs(case), "_ansible_check_mode": True}
    if "expected_gpus" in case:
        args["expected_gpus"] = case["expected_gpus"]
    result = run(capsys, args)
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    assert result["gpu_ready"] is case["gpu_ready"]
    assert sorted(g["pci_bus_id"] for g in result["gpus"] if not g["healthy"]) == sorted(case["unhealthy"])
    assert set(result["sources"].values()) == {"captured"}


def test_live_with_standin_and_kernel_log_file(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(REPO, "tests", "standins", "captures", "a40x8-gpu4-err"))
    kernel = tmp_path / "kern.log"
    kernel.write_text(text("constructed_kernel_log_a40_gpu4_xid119.txt"))
    result = run(capsys, {"nvidia_smi": STANDIN_PATH, "lspci": str(tmp_path / "no-lspci"),
                          "pci_sysfs_root": str(tmp_path / "no-sysfs"), "kernel_log": str(kernel),
                          "expected_gpus": 8, "_ansible_check_mode": True})
    assert result["gpu_ready"] is False and result["pci_gpu_count"] is None
    assert result["sources"]["nvidia_smi_xml"].endswith("-q -x (rc=0)")
    bad = [g for g in result["gpus"] if not g["healthy"]]
    assert [(g["index"], g["uuid"]) for g in bad] == [(4, "GPU-a40c0de4-0000-4000-8000-000000000004")]
    assert [a["action"] for a in result["actions"] if a["index"] == 4] == ["reset_gpu"]


def test_live_healthy_with_device_plugin_count(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(REPO, "tests", "standins", "captures", "h100x8-healthy"))
    args = {"nvidia_smi": STANDIN_PATH, "lspci": str(tmp_path / "no-lspci"), "pci_sysfs_root": str(tmp_path / "none"),
            "kernel_log": os.devnull}
    assert run(capsys, dict(args, device_plugin_count=8))["gpu_ready"] is True
    result = run(capsys, dict(args, device_plugin_count=6))
    assert result["gpu_ready"] is False and "device plugin exposes 6" in result["reasons"][0]


@pytest.mark.parametrize("args, message", [
    ({"source": "captured"}, "source=captured needs captured outputs. Fix:"),
    ({"source": "captured", "captured": {}}, "source=captured needs captured outputs"),
    ({"source": "captured", "captured": {"nvidia_smi_xlm": "x"}}, "nvidia_smi_xlm"),
    ({"source": "captured", "captured": {"nvidia_smi": "x"}, "xid_actions": {"13": "explode"}},
     "xid_actions.13: 'explode' is not an action"),
    ({"source": "captured", "captured": {"nvidia_smi": "x"}, "expected_gpus": True}, "expected_gpus"),
    ({"source": "captured", "captured": {"nvidia_smi": "x"}, "expected_gpus": "yes"}, "expected_gpus"),
    ({"source": "captured", "captured": {"nvidia_smi": "x"}, "device_plugin_count": False}, "device_plugin_count"),
    ({"source": "captured", "captured": {"nvidia_smi": "x", "device_plugin_count": True}}, "device_plugin_count"),
    ({"source": "captured", "captured": {"nvidia_smi": "x"}, "command_timeout": 0}, "command_timeout is 0"),
    ({"source": "captured", "captured": {"nvidia_smi": "x"}, "expected_gpus": -1}, "expected_gpus is -1"),
    ({"captured": {"nvidia_smi": "x"}}, "captured is only read with source=captured"),
    ({"kernel_log": "/nonexistent/kern.log", "nvidia_smi": "/nonexistent/nvidia-smi"}, "kernel_log /nonexistent/kern.log cannot be read"),
    ({"xid_since": "yesterday"}, "xid_since 'yesterday' is not a duration"),
])
def test_bad_input_fails_with_cause_and_fix(capsys, args, message):
    result = run(capsys, args)
    assert result["failed"] is True
    assert message in result["msg"]
    assert "\n" not in result["msg"] and "Traceback" not in result["msg"]


def _live(tmp_path, **extra):
    args = {"lspci": str(tmp_path / "no-lspci"), "pci_sysfs_root": str(tmp_path / "none"), "kernel_log": os.devnull,
            "_ansible_check_mode": True}
    args.update(extra)
    return args


def test_hung_nvidia_smi_is_a_reason_not_a_hang(capsys, monkeypatch, tmp_path):
    """Issue #9: nvidia-smi that sleeps past command_timeout: gpu_ready false, the timeout as the reason."""
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(REPO, "tests", "standins", "captures", "h100x8-healthy"))
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_SLEEP", "60")
    started = time.time()
    result = run(capsys, _live(tmp_path, nvidia_smi=STANDIN_PATH, command_timeout=2))
    assert time.time() - started < 40  # generous: the stand-in alone would take 60 s
    assert result["gpu_ready"] is False and result["driver_reachable"] is False
    assert result["reasons"][0].startswith("nvidia-smi did not answer within 2 s. Fix:")
    assert [(c["tool"], c["status"], c["timeout_s"]) for c in result["commands"]][:1] == [("nvidia-smi", "timeout", 2)]


STANDIN_FAILURES = [
    (None, "missing", "The NVIDIA driver cannot be reached: nvidia-smi was not found"),
    ("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9", "no_driver",
     "The NVIDIA driver cannot be reached: NVIDIA-SMI has failed"),
    ("sleep 30", "timeout", "nvidia-smi did not answer within 1 s."),
    ("echo 'Failed to initialize NVML: Unknown Error' >&2; exit 255", "failed", "nvidia-smi -q -x exited with rc=255"),
    ("printf 'GPU\\000\\377\\376'", "unreadable", "nvidia-smi -q -x output is unreadable"),
]


@pytest.mark.parametrize("body, status, reason", STANDIN_FAILURES, ids=[f[1] for f in STANDIN_FAILURES])
def test_each_runner_failure_through_the_module(capsys, tmp_path, body, status, reason):
    binary = tmp_path / "nvidia-smi"
    if body:
        binary.write_text("#!/bin/sh\n%s\n" % body)
        binary.chmod(0o755)
    result = run(capsys, _live(tmp_path, nvidia_smi=str(binary), command_timeout=1))
    assert not result.get("failed"), result.get("msg")
    assert result["gpu_ready"] is False
    assert any(r.startswith(reason) for r in result["reasons"]), result["reasons"]
    assert result["commands"][0]["status"] == status
    assert result["commands"][0]["message"]


TABLE = text("03_nvsmi_table_and_q_h100_sxm_x8_healthy.txt", "A")


@pytest.mark.parametrize("captured", [
    {"nvidia_smi": "\n".join(TABLE.splitlines()[:7]) + "\n" + TABLE.splitlines()[7][:52]},  # cut in GPU 0's row
    {"nvidia_smi": "\n".join(l for l in TABLE.splitlines() if not l.startswith("|  "))},  # header only
    {"nvidia_smi_xml": "<nvidia_smi_log><driver_version>550.54.15</driver_version></nvidia_smi_log>"},
], ids=["cut_in_first_row", "header_only", "xml_without_gpus"])
def test_output_with_no_gpu_is_never_ready(capsys, captured):
    """Issue #10.10: a table cut off in the first GPU's row, or header-only, was ready with 0 GPUs."""
    result = run(capsys, {"source": "captured", "captured": captured})
    assert result["gpu_ready"] is False
    assert any("describes no GPU" in r for r in result["reasons"]), result["reasons"]


def test_attached_gpus_without_descriptions(capsys):
    """Issue #10.11: attached_gpus 5 with no <gpu> was ready with count 5."""
    doc = "<nvidia_smi_log><driver_version>550.54.15</driver_version><attached_gpus>5</attached_gpus></nvidia_smi_log>"
    result = run(capsys, {"source": "captured", "captured": {"nvidia_smi_xml": doc}})
    assert result["gpu_ready"] is False
    huge = doc.replace(">5<", ">10000000000000000000000<")
    result = run(capsys, {"source": "captured", "captured": {"nvidia_smi_xml": huge}})
    assert result["gpu_ready"] is False and result["nvidia_smi_gpu_count"] == 0
    assert any("not a GPU count" in r for r in result["reasons"]), result["reasons"]


def test_more_attached_than_described_unless_expected_gpus_says_so(capsys):
    xml = text("01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt")
    result = run(capsys, {"source": "captured", "captured": {"nvidia_smi_xml": xml}})
    assert result["gpu_ready"] is False
    assert "reports 4 attached GPUs but describes only 1" in result["reasons"][0]
    result = run(capsys, {"source": "captured", "captured": {"nvidia_smi_xml": xml}, "expected_gpus": 1})
    assert result["gpu_ready"] is True and result["nvidia_smi_gpu_count"] == 1


@pytest.mark.parametrize("doc", [
    "<nvidia_smi_log>" + "<!DOCTYPE a [" * 40000,
    "<nvidia_smi_log><gpu>" + "<a>" * 1000 + "</a>" * 1000 + "</gpu></nvidia_smi_log>",
], ids=["doctype_flood", "nested_1000"])
def test_hostile_xml_is_a_quick_reason(capsys, doc):
    """Issue #10.2 (54 s) and #10.5 (recursion error)."""
    result = run(capsys, {"source": "captured", "captured": {"nvidia_smi_xml": doc}})
    assert not result.get("failed"), result.get("msg")
    assert result["gpu_ready"] is False and "output is unreadable" in result["reasons"][0]


def test_invalid_utf8_product_name():
    """Issue #10.6: bytes \\xff\\xfe read by lookup('file') arrive as lone surrogates.

    Replayed through the module's own code path (runner, collect, evaluate): ansible-core 2.19's argument
    decoder refuses such strings in some processes before main() runs, which would hide the module's answer."""
    from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health as gh
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeTools
    raw = text("constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt").encode("utf-8")
    xml = raw.replace(b"NVIDIA H100 80GB HBM3", b"NVIDIA \xff\xfe", 1).decode("utf-8", "surrogateescape")
    inputs, _sources = gh.collect(NodeTools(source="captured", captured={"nvidia_smi_xml": xml}))
    result = gh.evaluate(inputs)
    assert result["gpus"][0]["product"] == "NVIDIA \ufffd\ufffd"
    assert result["nvidia_smi_gpu_count"] == 8


def test_garbage_capture_is_a_reason(capsys):
    result = run(capsys, {"source": "captured", "captured": {"nvidia_smi_xml": "<nvidia_smi_log><gpu>"}})
    assert result["gpu_ready"] is False
    assert result["reasons"][0].startswith("nvidia-smi -q -x output is unreadable: nvidia-smi -q -x output is not "
                                           "valid XML")
    assert result["commands"][0]["command"] == "captured:nvidia_smi_xml"
