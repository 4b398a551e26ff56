# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_driver_info: drive main() with the node's tools and files replaced."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import nvidia_driver_info as mod

GPU = {"pci_bus_id": "0000:3b:00.0", "class_code": "0302", "class_name": None, "vendor_id": "10de",
       "device_id": "2330", "description": None}
NVSWITCH = dict(GPU, pci_bus_id="0000:05:00.0", class_code="0680", device_id="22a3")
NIC = dict(GPU, pci_bus_id="0000:01:00.0", class_code="0200", vendor_id="15b3", device_id="1021")


class FakeTools:
    """Answers like the tools on a node, behind the shared runner (node_tools); records the calls."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def find_tool(self, name, path_dirs=None):
        return "/usr/bin/" + name if any(key[0] == name for key in self.answers) else None

    def run_process(self, argv, timeout, env_update=None, max_bytes=None):
        argv = [argv[0].rsplit("/", 1)[-1]] + list(argv[1:])
        self.calls.append(argv)
        for key, answer in self.answers.items():
            if list(key) == argv[:len(key)]:
                if answer == "hang":
                    return None, b"", b"", True, False, timeout
                rc, out, err = answer
                return rc, out.encode(), err.encode(), False, False, 0.01
        return 1, b"", b"unexpected call", False, False, 0.01


def run(monkeypatch, args, answers, devices=(), users=(), paths=()):
    tools = FakeTools(answers)
    monkeypatch.setattr(mod.node_tools, "find_tool", tools.find_tool)
    monkeypatch.setattr(mod.node_tools, "run_process", tools.run_process)
    monkeypatch.setattr(mod, "read_sysfs_pci_devices", lambda: list(devices))
    monkeypatch.setattr(mod, "find_device_users", lambda: list(users))
    real_isdir = mod.os.path.isdir
    monkeypatch.setattr(mod.os.path, "isdir", lambda p: p in paths or (real_isdir(p) and not p.startswith(("/sys/module", "/lib/modules"))))
    monkeypatch.setattr(mod, "_read", lambda p: "535.261.03" if p == "/sys/module/nvidia/version" else None)
    monkeypatch.setattr(mod, "SECURE_BOOT_EFIVAR", "/nonexistent/efivar")
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return tools


def result_of(capsys):
    return json.loads(capsys.readouterr().out)


def test_container_without_hardware(monkeypatch, capsys):
    """What the Molecule host sees: DKMS registered only, no headers, nvidia-smi without a driver."""
    run(monkeypatch, {"dkms_module": "nvidia-current", "dkms_version": "535.261.03", "kernel": "6.18.44-fc",
                      "kernel_module_file": "nvidia-current"},
        {("dkms", "status"): (0, "nvidia-current/535.261.03: added\n", ""),
         ("modinfo",): (1, "", "modinfo: ERROR: Module nvidia-current not found.\n"),
         ("nvidia-smi", "-L"): (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "")},
        devices=[NIC])
    result = result_of(capsys)
    assert result["changed"] is False
    assert result["kernel"] == "6.18.44-fc"
    assert result["dkms"] == {"present": True, "state": "added", "headers_present": False,
                              "entries": [{"module": "nvidia-current", "version": "535.261.03", "kernel": None,
                                           "arch": None, "state": "added", "note": None}]}
    assert result["module"] == {"loaded": False, "version": None, "signer": None, "file": None}
    assert result["pci_gpus"] == [] and result["pci_nvswitches"] == []
    assert result["nvidia_smi"]["present"] is True and result["nvidia_smi"]["rc"] == 9
    assert result["nvidia_smi"]["gpus"] == []
    assert result["nvidia_smi"]["message"].startswith("NVIDIA-SMI has failed")
    assert result["secure_boot"] == {"enabled": None, "source": "none", "mok_certificate_enrolled": None}


def test_gpu_node_with_secure_boot_and_users(monkeypatch, capsys, tmp_path):
    certificate = tmp_path / "mok.pub"
    certificate.write_text("cert")
    tools = run(
        monkeypatch,
        {"dkms_module": "nvidia-current", "kernel": "6.1.0-28-amd64", "kernel_module_file": "nvidia-current",
         "mok_certificate": str(certificate)},
        {("dkms", "status"): (0, "nvidia-current/535.261.03, 6.1.0-28-amd64, x86_64: installed\n", ""),
         ("modinfo", "-k", "6.1.0-28-amd64", "-n"): (0, "/lib/modules/6.1.0-28-amd64/updates/dkms/nvidia-current.ko\n", ""),
         ("modinfo", "-k", "6.1.0-28-amd64", "-F", "signer"): (0, "DKMS module signing key\n", ""),
         ("mokutil", "--sb-state"): (0, "SecureBoot enabled\n", ""),
         ("mokutil", "--test-key"): (0, "%s is already enrolled\n" % certificate, ""),
         ("nvidia-smi", "-L"): (0, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2b6d0f8a-6c1c-4fbb-8a0e-1c9b6c5d4e3f)\n", "")},
        devices=[GPU, NVSWITCH, NIC],
        users=[{"pid": 4242, "command": "python3", "devices": ["/dev/nvidia0"]}],
        paths=("/sys/module/nvidia", "/lib/modules/6.1.0-28-amd64/build"))
    result = result_of(capsys)
    assert result["dkms"]["state"] == "installed" and result["dkms"]["headers_present"] is True
    assert result["module"] == {"loaded": True, "version": "535.261.03", "signer": "DKMS module signing key",
                                "file": "/lib/modules/6.1.0-28-amd64/updates/dkms/nvidia-current.ko"}
    assert [(d["pci_bus_id"], d["architecture"]) for d in result["pci_gpus"]] == [("0000:3b:00.0", "hopper")]
    assert [d["pci_bus_id"] for d in result["pci_nvswitches"]] == ["0000:05:00.0"]
    assert result["device_users"][0]["pid"] == 4242
    assert result["secure_boot"] == {"enabled": True, "source": "mokutil", "mok_certificate_enrolled": True}
    assert result["nvidia_smi"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert ["mokutil", "--test-key", str(certificate)] in tools.calls


def test_nothing_installed(monkeypatch, capsys):
    """A fresh node: no dkms, modinfo or nvidia-smi; nvidia-smi is not queried when asked not to."""
    tools = run(monkeypatch, {"query_nvidia_smi": False}, {})
    result = result_of(capsys)
    assert result["dkms"]["present"] is False and result["dkms"]["state"] is None
    assert result["nvidia_smi"] == {"present": False, "rc": None, "gpus": [], "message": None}
    assert tools.calls == []


def test_rejects_unknown_option(monkeypatch, capsys):
    with patch_module_args({"dkms_modul": "nvidia"}):
        with pytest.raises(SystemExit):
            mod.main()
    result = result_of(capsys)
    assert result["failed"] is True and "dkms_modul" in result["msg"]


def test_hung_nvidia_smi_is_reported_not_waited_for(monkeypatch, capsys):
    """Every tool runs through the shared runner: a hang is a result with the runner's message."""
    tools = run(monkeypatch, {"command_timeout": 5}, {("nvidia-smi", "-L"): "hang"})
    result = result_of(capsys)
    assert result["nvidia_smi"] == {"present": True, "rc": None, "gpus": [],
                                    "message": "nvidia-smi did not answer within 5 s."}
    assert ["nvidia-smi", "-L"] in tools.calls


def test_bad_command_timeout(monkeypatch, capsys):
    run(monkeypatch, {"command_timeout": 0}, {})
    result = result_of(capsys)
    assert result["failed"] is True and result["msg"].startswith("command_timeout is 0. Fix:")
