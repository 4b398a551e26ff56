# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_bandwidth module: captured and live (through the nvbandwidth stand-in), every way a run can fail to pass."""
import json
import os
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import gpu_bandwidth

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
STANDIN = os.path.join(REPO, "tests", "standins", "nvbandwidth")
FIXTURES = os.path.join(REPO, "tests", "fixtures", "nvbandwidth")


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_bandwidth.main()
    return json.loads(capsys.readouterr().out)


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read().split("# ---- BEGIN VERBATIM ----\n", 1)[1]


def standin_output(monkeypatch, name, variable="NVBANDWIDTH_STANDIN_OUTPUT"):
    monkeypatch.setenv(variable, os.path.join(FIXTURES, name))


def test_captured_healthy_h100_passes_with_the_catalog_threshold(capsys):
    result = run(capsys, {"source": "captured", "captured": {"nvbandwidth": fixture("h100x8_v0.4_d2d_read_ce.txt")}})
    assert not result.get("failed") and result["status"] == "pass" and result["passed"] is True
    assert result["product"] == "NVIDIA H100 80GB HBM3" and result["gpu_count"] == 8
    assert result["threshold"]["min_gbps"] == 315.0 and "hopper-architecture" in result["threshold"]["source"]
    assert result["worst"]["gbps"] == 370.26 and result["nvbandwidth_version"] == "v0.4"
    assert result["command"]["source"] == "captured" and result["changed"] is False


def test_captured_low_pair_fails_the_task_naming_the_pair(capsys):
    result = run(capsys, {"source": "captured",
                          "captured": {"nvbandwidth": fixture("derived_h100x8_gpu1_to_gpu0_low.txt")}})
    assert result["failed"] is True and result["status"] == "fail"
    assert result["msg"].startswith("device_to_device_memcpy_read_ce GPU 1 -> GPU 0: 162.45 GB/s, below 315.00 GB/s")
    assert [p for p in result["pairs"] if p["passed"] is False] == [
        {"testcase": "device_to_device_memcpy_read_ce", "from_gpu": 1, "to_gpu": 0, "gbps": 162.45, "passed": False}]


def test_fail_on_failure_false_only_returns_the_verdict(capsys):
    result = run(capsys, {"source": "captured", "fail_on_failure": False,
                          "captured": {"nvbandwidth": fixture("derived_h100x8_gpu3_gpu5_no_peer.txt")}})
    assert not result.get("failed") and result["status"] == "fail"
    assert result["worst"] == {"testcase": "device_to_device_memcpy_read_ce", "from_gpu": 3, "to_gpu": 5, "gbps": None}


def test_captured_json_with_a_product_override(capsys):
    result = run(capsys, {"source": "captured", "format": "json", "product": "NVIDIA H200",
                          "captured": {"nvbandwidth": fixture("constructed_h100x8_v0.8_d2d_read_ce.json.txt")},
                          "thresholds": {"NVIDIA H200": {"min_gbps": 371}}})
    assert result["failed"] is True and result["product"] == "NVIDIA H200"
    assert result["threshold"]["origin"] == "catalog+override" and result["threshold"]["min_gbps"] == 371.0
    assert "GPU 0 -> GPU 6: 370.26 GB/s, below 371.00 GB/s" in result["msg"]


def test_live_pass_through_the_standin(capsys, monkeypatch):
    standin_output(monkeypatch, "h100x8_v0.4_d2d_read_ce.txt")
    result = run(capsys, {"nvbandwidth": STANDIN})
    assert result["status"] == "pass"
    assert result["command"]["command"] == STANDIN + " -t device_to_device_memcpy_read_ce"
    assert result["command"]["timeout_s"] == 600


def test_live_json_runs_with_dash_j(capsys, monkeypatch):
    standin_output(monkeypatch, "constructed_h100x8_v0.8_d2d_read_ce.json.txt", "NVBANDWIDTH_STANDIN_JSON_OUTPUT")
    result = run(capsys, {"nvbandwidth": STANDIN, "format": "json"})
    assert result["status"] == "pass" and result["command"]["command"].endswith("-t device_to_device_memcpy_read_ce -j")


def test_missing_binary_is_a_skip_with_its_reason(capsys, tmp_path):
    result = run(capsys, {"nvbandwidth": str(tmp_path / "nvbandwidth")})
    assert not result.get("failed") and result["status"] == "skip" and result["passed"] is False
    assert result["reasons"][0].startswith("nvbandwidth was not found (")
    assert "Fix: install NVIDIA's nvbandwidth" in result["reasons"][0]


def test_missing_binary_fails_when_required(capsys, tmp_path):
    result = run(capsys, {"nvbandwidth": str(tmp_path / "nvbandwidth"), "required": True})
    assert result["failed"] is True and result["status"] == "fail"
    assert result["msg"].endswith("(the bandwidth check is required)")


def test_unknown_model_is_a_skip_naming_it(capsys):
    text = fixture("h100x8_v0.4_d2d_read_ce.txt").replace("NVIDIA H100 80GB HBM3", "NVIDIA H800")
    result = run(capsys, {"source": "captured", "captured": {"nvbandwidth": text}})
    assert result["status"] == "skip" and result["reasons"][0].startswith("no threshold for NVIDIA H800")
    assert result["worst"]["gbps"] == 370.26 and result["threshold"] is None
    required = run(capsys, {"source": "captured", "captured": {"nvbandwidth": text}, "required": True})
    assert required["failed"] is True and "no threshold for NVIDIA H800" in required["msg"]


def test_no_gpu_is_a_failure_with_the_cuda_error(capsys, monkeypatch):
    monkeypatch.setenv("NVBANDWIDTH_STANDIN_MODE", "no-device")
    result = run(capsys, {"nvbandwidth": STANDIN})
    assert result["failed"] is True
    assert result["msg"].startswith("nvbandwidth failed (rc=1): [CUDA_ERROR_NO_DEVICE] no CUDA-capable device")


def test_verification_failure_with_rc1_never_passes(capsys, monkeypatch):
    standin_output(monkeypatch, "a100x8_v0.7_verification_assert.txt")
    monkeypatch.setenv("NVBANDWIDTH_STANDIN_RC", "1")
    result = run(capsys, {"nvbandwidth": STANDIN})
    assert result["failed"] is True and result["msg"].startswith("nvbandwidth failed (rc=1): ASSERT in expression")


def test_timeout_is_a_failure_not_a_hang(capsys, monkeypatch):
    standin_output(monkeypatch, "h100x8_v0.4_d2d_read_ce.txt")
    monkeypatch.setenv("NVBANDWIDTH_STANDIN_SLEEP", "30")
    started = time.time()
    result = run(capsys, {"nvbandwidth": STANDIN, "timeout": 1})
    assert time.time() - started < 20
    assert result["failed"] is True and result["msg"] == "nvbandwidth did not answer within 1 s."


def test_output_with_nothing_readable_fails(capsys, monkeypatch, tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("Segmentation fault\n")
    monkeypatch.setenv("NVBANDWIDTH_STANDIN_OUTPUT", str(out))
    result = run(capsys, {"nvbandwidth": STANDIN, "fail_on_failure": False, "product": "NVIDIA H200"})
    assert result["status"] == "fail"
    assert result["reasons"] == ["device_to_device_memcpy_read_ce printed no result (output cut?)"]


@pytest.mark.parametrize("args,message", [
    ({"thresholds": {"NVIDIA H200": {"floor": 1}}}, "thresholds['NVIDIA H200'].floor is not a known setting"),
    ({"timeout": 0}, "timeout is 0. Fix: pass a number of seconds between 1 and 86400."),
    ({"testcases": []}, "testcases is empty"),
    ({"testcases": ["device_to_device_memcpy_read_ce", "device_to_device_memcpy_read_ce"]}, "names one twice"),
    ({"testcases": ["host_to_device_memcpy_ce"]}, "value of testcases must be one or more of"),
    ({"source": "captured"}, "source=captured needs captured.nvbandwidth"),
    ({"captured": {"nvbandwidth": "x"}}, "captured is only read with source=captured"),
])
def test_bad_options_fail_before_anything_runs(capsys, monkeypatch, tmp_path, args, message):
    marker = tmp_path / "ran"
    monkeypatch.setenv("NVBANDWIDTH_STANDIN_OUTPUT", str(marker))  # the stand-in would fail to read it
    result = run(capsys, dict({"nvbandwidth": STANDIN}, **args))
    assert result["failed"] is True and message in result["msg"]
    assert "command" not in result or result.get("command") in ({}, None)


def test_check_mode_runs_nothing_unless_told_to(capsys, monkeypatch, tmp_path):
    record = tmp_path / "invocations"
    monkeypatch.setenv("NVBANDWIDTH_STANDIN_RECORD", str(record))
    standin_output(monkeypatch, "h100x8_v0.4_d2d_read_ce.txt")
    result = run(capsys, {"nvbandwidth": STANDIN, "_ansible_check_mode": True})
    assert result["status"] == "skip" and result["passed"] is False and result["command"] == {}
    assert result["reasons"] == ["check mode: nvbandwidth -t device_to_device_memcpy_read_ce would run; nothing was "
                                 "run (run_in_check_mode=true runs it)"]
    assert not record.exists() and result["changed"] is False
    result = run(capsys, {"nvbandwidth": STANDIN, "_ansible_check_mode": True, "run_in_check_mode": True})
    assert result["status"] == "pass"
    assert record.read_text() == "-t device_to_device_memcpy_read_ce\n"


# nvbandwidth v0.10.0 (real output, tests/fixtures/nvbandwidth/h100x8_v0.10.0_d2d_read_write_ce.txt) lists no GPUs.
# What nvidia-smi --query-gpu=name prints on that node: constructed from the same report, whose
# p2pBandwidthLatencyTest lists 8x "NVIDIA H100 80GB HBM3".
V010 = "h100x8_v0.10.0_d2d_read_write_ce.txt"
H100_NAMES = "NVIDIA H100 80GB HBM3\n" * 8


def test_v010_output_takes_the_model_and_count_from_nvidia_smi(capsys):
    result = run(capsys, {"source": "captured", "captured": {"nvbandwidth": fixture(V010), "nvidia_smi": H100_NAMES}})
    assert not result.get("failed") and result["status"] == "pass", result.get("reasons")
    assert result["nvbandwidth_version"] == "v0.10.0" and result["devices"] == []
    assert result["product"] == "NVIDIA H100 80GB HBM3" and result["gpu_count"] == 8
    assert result["worst"]["gbps"] == 395.05 and result["testcases"][0]["pairs"] == 56
    assert result["testcases"][0]["coefficient_of_variation"] == 0.0


def test_v010_output_without_a_model_is_a_skip_that_says_why(capsys):
    result = run(capsys, {"source": "captured", "fail_on_failure": False, "captured": {"nvbandwidth": fixture(V010)}})
    assert result["status"] == "skip" and result["product"] is None
    assert "the output lists no GPUs and no product was given" in result["reasons"][0]


def test_v010_matrix_larger_than_what_nvidia_smi_lists_fails(capsys):
    result = run(capsys, {"source": "captured", "fail_on_failure": False,
                          "captured": {"nvbandwidth": fixture(V010), "nvidia_smi": "NVIDIA H100 80GB HBM3\n" * 4}})
    assert result["status"] == "fail" and result["gpu_count"] == 4
    assert "the matrix covers 8 GPUs, the output lists 4" in result["reasons"][0]


def test_v010_mixed_models_in_nvidia_smi_have_no_threshold(capsys):
    result = run(capsys, {"source": "captured", "fail_on_failure": False,
                          "captured": {"nvbandwidth": fixture(V010),
                                       "nvidia_smi": "NVIDIA H100 80GB HBM3\n" * 7 + "NVIDIA H200\n"}})
    assert result["status"] == "skip" and "nvidia-smi names NVIDIA H100 80GB HBM3, NVIDIA H200" in result["reasons"][0]
