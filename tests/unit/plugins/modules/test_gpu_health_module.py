# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_health module: main() on every fixture case, live mode with the nvidia-smi stand-in, bad inputs."""
import json
import os
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import gpu_health

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "module_utils"))
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
    ({"source": "captured", "captured": {"nvidia_smi_xml": "<nvidia_smi_log><gpu>"}},
     "nvidia_smi_xml cannot be parsed"),
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
