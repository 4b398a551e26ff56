# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node_labels module: drives main() with a captured XML and with the nvidia-smi stand-in."""
import json
import os
import stat

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import gpu_node_labels

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
STANDIN = os.path.join(REPO, "tests", "standins", "nvidia-smi")
CAPTURES = os.path.join(REPO, "tests", "standins", "captures")
H100_XML = os.path.join(REPO, "tests", "fixtures", "nvidia", "constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt")


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_node_labels.main()
    return json.loads(capsys.readouterr().out)


def h100_xml():
    with open(H100_XML) as handle:
        return handle.read().split("# ---- BEGIN VERBATIM ----\n", 1)[1]


def captured(xml, **extra):
    args = {"source": "captured", "captured": {"nvidia_smi_xml": xml}}
    args.update(extra)
    return args


def test_captured_xml(capsys):
    result = run(capsys, captured(h100_xml()))
    assert result["changed"] is False and result["source"] == "captured"
    assert result["labels"] == {"accelerator": "nvidia-gpu", "gpu.nvidia.com/model": "NVIDIA-H100-80GB-HBM3",
                                "gpu.nvidia.com/memory": "80Gi"}
    assert result["gpu_count"] == 8 and result["memory_mib"] == 81559


def test_live_run_through_the_nvidia_smi_standin(capsys, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(CAPTURES, "h100x8-healthy"))
    assert os.stat(STANDIN).st_mode & stat.S_IXUSR
    result = run(capsys, {"nvidia_smi": STANDIN, "accelerator": "nvidia-h100"})
    assert result["source"] == "nvidia-smi" and result["labels"]["accelerator"] == "nvidia-h100"
    assert result["labels"]["gpu.nvidia.com/model"] == "NVIDIA-H100-80GB-HBM3"


def test_explicit_values_do_not_run_nvidia_smi(capsys):
    result = run(capsys, {"nvidia_smi": "/nonexistent/nvidia-smi", "model": "NVIDIA-L40S", "memory": "48Gi"})
    assert result["source"] == "options" and result["gpu_count"] == 0
    assert result["labels"]["gpu.nvidia.com/memory"] == "48Gi"


def test_missing_binary_fails_with_the_fix(capsys):
    result = run(capsys, {"nvidia_smi": "/nonexistent/nvidia-smi"})
    assert result["failed"] is True
    assert result["msg"].startswith("nvidia-smi was not found (/nonexistent/nvidia-smi)")
    assert "Fix: install or load the NVIDIA driver" in result["msg"]


def test_no_driver_capture_fails_with_the_fix(capsys, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(CAPTURES, "no-driver"))
    result = run(capsys, {"nvidia_smi": STANDIN})
    assert result["failed"] is True and "cannot talk to the NVIDIA driver" in result["msg"]


@pytest.mark.parametrize("args,fragment", [
    (captured("not xml"), "holds no XML"),
    (captured(h100_xml(), model="NVIDIA H100"), "model: 'NVIDIA H100'"),
    (captured(h100_xml(), memory="80"), "memory: '80' must be"),
    # issue #10.14: a 72-character label value was accepted (Kubernetes allows 63)
    (captured(h100_xml(), memory="9" * 70 + "Gi"), "gpu.nvidia.com/memory: '999"),
    ({"model": "NVIDIA-L40S", "memory": "1" * 62 + "Gi"}, "longer than 63 characters"),
    ({"source": "captured"}, "source=captured needs captured.nvidia_smi_xml"),
    ({"captured": {"nvidia_smi_xml": "x"}}, "captured is only read with source=captured"),
    ({"nvidia_smi_xml": "x"}, "nvidia_smi_xml"),  # the old top-level option is gone
    (captured("<nvidia_smi_log>" + "<!DOCTYPE a [" * 40000), "unterminated DOCTYPE"),
    (captured("<nvidia_smi_log><gpu>" + "<a>" * 2000 + "</a>" * 2000 + "</gpu></nvidia_smi_log>"), "nests deeper"),
    (captured(h100_xml(), command_timeout=-1), "command_timeout is -1"),
], ids=["no_xml", "model", "memory_form", "memory_72_chars", "memory_64_chars", "not_captured", "captured_live",
        "old_option", "doctype_flood", "nested_2000", "timeout"])
def test_bad_input(capsys, args, fragment):
    result = run(capsys, args)
    assert result["failed"] is True and fragment in result["msg"]


def test_hung_nvidia_smi_fails_within_the_timeout(capsys, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(CAPTURES, "h100x8-healthy"))
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_SLEEP", "60")
    result = run(capsys, {"nvidia_smi": STANDIN, "command_timeout": 1})
    assert result["failed"] is True
    assert result["msg"].startswith("nvidia-smi did not answer within 1 s. Fix:")
