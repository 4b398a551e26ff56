"""cuda_smoke on a stand-in libcuda built here from tests/standins/fake_libcuda.c: every CUDA error path."""
import json
import os
import shutil
import stat
import subprocess

import pytest
import testlib
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import cuda_smoke
from ansible_collections.gpu_native.fleet.plugins.modules import cuda_smoke as cuda_smoke_module

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
SMI_L = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaaaaaa-0000-4000-8000-000000000000)\n"
         "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbbbbbb-0000-4000-8000-000000000001)\n"
         "  MIG 3g.40gb     Device  0: (UUID: MIG-cccccccc-0000-5000-8000-000000000002)\n"
         "  MIG 3g.40gb     Device  1: (UUID: MIG-dddddddd-0000-5000-8000-000000000003)\n")


@pytest.fixture(scope="session")
def fake_libcuda(tmp_path_factory):
    return testlib.build_fake_libcuda(tmp_path_factory.mktemp("libcuda"))


@pytest.fixture()
def smi(tmp_path):
    """An nvidia-smi stand-in that answers -L with two GPUs, the second split into two MIG devices."""
    listing = tmp_path / "listing.txt"
    listing.write_text(SMI_L)
    path = tmp_path / "nvidia-smi"
    path.write_text('#!/bin/sh\n[ "$1" = "-L" ] && exec cat %s\nexit 2\n' % listing)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            cuda_smoke_module.main()
    return json.loads(capsys.readouterr().out)


def test_every_gpu_and_mig_device_passes_in_its_own_process(capsys, fake_libcuda, smi):
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": smi})
    assert result["passed"] is True, result
    assert [(d["index"], d["uuid"]) for d in result["devices"]] == [
        ("0", "GPU-aaaaaaaa-0000-4000-8000-000000000000"),
        ("1/0", "MIG-cccccccc-0000-5000-8000-000000000002"),
        ("1/1", "MIG-dddddddd-0000-5000-8000-000000000003")]
    assert result["devices"][1]["name"] == "Fake GPU 0 (CUDA_VISIBLE_DEVICES=MIG-cccccccc-0000-5000-8000-000000000002)"


@pytest.mark.parametrize("fault,call,name", [
    ("cuInit=100", "cuInit", "CUDA_ERROR_NO_DEVICE"),
    ("cuDevicePrimaryCtxRetain=46", "cuDevicePrimaryCtxRetain", "CUDA_ERROR_DEVICES_UNAVAILABLE"),
    ("cuModuleLoadData=218", "cuModuleLoadData", "CUDA_ERROR_INVALID_PTX"),
    ("cuMemAlloc_v2=2", "cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY"),
    ("cuLaunchKernel=999", "cuLaunchKernel", "CUDA_ERROR_UNKNOWN"),
    ("cuCtxSynchronize=700", "cuCtxSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    ("cuMemcpyDtoH_v2=700", "cuMemcpyDtoH_v2", "CUDA_ERROR_ILLEGAL_ADDRESS"),
])
def test_cuda_error_paths_name_the_call_and_error(capsys, monkeypatch, fake_libcuda, smi, fault, call, name):
    monkeypatch.setenv("FAKE_CUDA_FAIL", fault)
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": smi})
    assert result["failed"] is True and result["passed"] is False
    device = result["devices"][0]
    assert device["error_name"] == name
    assert device["error"].startswith("%s failed: %s (" % (call, name))
    assert result["msg"].startswith("CUDA smoke test failed: device 0 (GPU-aaaaaaaa")


def test_wrong_result_is_caught_element_by_element(capsys, monkeypatch, fake_libcuda, smi):
    monkeypatch.setenv("FAKE_CUDA_CORRUPT", "1")
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": smi, "fail_on_failure": False})
    assert result["passed"] is False and not result.get("failed")
    assert result["devices"][0]["error"] == "1 of 1048576 elements wrong (first at 7: got 16.0, expected 15.0)"


def test_hang_is_killed_after_the_device_timeout(capsys, monkeypatch, fake_libcuda, smi):
    monkeypatch.setenv("FAKE_CUDA_HANG", "1")
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": smi, "device_timeout": 2, "devices": ["GPU-x"]})
    assert result["devices"][0]["error"] == "the CUDA process did not finish within 2 s"
    assert result["devices"][0]["error_name"] == "TIMEOUT"


def test_driver_crash_costs_the_child_only(capsys, monkeypatch, fake_libcuda, smi):
    monkeypatch.setenv("FAKE_CUDA_CRASH", "1")
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": smi, "fail_on_failure": False})
    assert result["passed"] is False and len(result["devices"]) == 3
    assert all(d["error"] == "the CUDA process was killed by signal 6" for d in result["devices"])


def test_libcuda_missing_fails_cleanly(capsys, tmp_path):
    result = run(capsys, {"library": str(tmp_path / "libcuda.so.1")})
    assert result["failed"] is True
    assert result["msg"].startswith("%s not found: is the NVIDIA driver installed?" % (tmp_path / "libcuda.so.1"))


def test_libcuda_missing_with_fail_on_failure_false_is_a_verdict_not_a_task_failure(capsys, tmp_path):
    """Like llm_smoke's connection errors: the reason comes back with passed false, the task does not fail."""
    result = run(capsys, {"library": str(tmp_path / "libcuda.so.1"), "fail_on_failure": False})
    assert not result.get("failed") and result["changed"] is False
    assert result["passed"] is False and result["devices"] == []
    (reason,) = result["reasons"]
    assert reason.startswith("%s not found: is the NVIDIA driver installed?" % (tmp_path / "libcuda.so.1"))


def test_without_nvidia_smi_cuda_enumerates_the_devices(capsys, monkeypatch, fake_libcuda, tmp_path):
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "2")
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": str(tmp_path / "nvidia-smi")})
    assert result["passed"] is True
    assert [d["uuid"] for d in result["devices"]] == ["0", "1"]
    assert "nvidia-smi was not found" in json.dumps(result["warnings"])


def test_no_device_at_all_is_a_failure(capsys, monkeypatch, fake_libcuda, tmp_path):
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "0")
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": str(tmp_path / "nvidia-smi")})
    assert result["failed"] is True and result["devices"] == []
    assert result["reasons"] == ["no device to test: nvidia-smi -L and CUDA found none"]


def test_parse_nvidia_smi_l_ignores_garbage():
    assert cuda_smoke.parse_nvidia_smi_l("No devices were found\n\x00\xff") == []
    assert len(cuda_smoke.parse_nvidia_smi_l(SMI_L)) == 3


def test_bad_timeout(capsys):
    result = run(capsys, {"device_timeout": 0})
    assert result["failed"] is True and "device_timeout is 0" in result["msg"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_assembles_for_ampere_and_hopper(tmp_path, arch):
    """The kernel is real PTX: NVIDIA's own assembler accepts it (the driver JIT does the same work)."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas (CUDA toolkit) is not installed on this machine")
    source = tmp_path / "kernel.ptx"
    source.write_text(cuda_smoke.PTX)
    subprocess.check_call([ptxas, "-arch=%s" % arch, str(source), "-o", str(tmp_path / "kernel.cubin")])


def test_check_mode_runs_no_kernel_unless_told_to(capsys, fake_libcuda, tmp_path):
    record = tmp_path / "invocations"
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "$*" >> %s\nexec cat %s\n' % (record, tmp_path / "listing.txt"))
    (tmp_path / "listing.txt").write_text(SMI_L.splitlines()[0] + "\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": str(smi), "_ansible_check_mode": True})
    assert result["skipped"] is True and result["passed"] is False and result["devices"] == []
    assert result["reasons"] == ["check mode: a CUDA kernel would run on every GPU; nothing was run "
                                 "(run_in_check_mode=true runs it)"]
    assert not record.exists() and not result.get("failed")
    result = run(capsys, {"library": fake_libcuda, "nvidia_smi": str(smi), "_ansible_check_mode": True,
                          "run_in_check_mode": True})
    assert result["passed"] is True and len(result["devices"]) == 1
    assert record.read_text() == "-L\n"
