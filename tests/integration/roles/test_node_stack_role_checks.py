# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The early checks of nvidia_driver and container_toolkit, run by ansible-playbook on localhost.

validate.yml holds only assertions and set_fact, and resolve.yml decides on
data handed to it, so both run here without touching the machine: every
bad input must fail with a message naming the variable, before any task that
changes something.  Also: --syntax-check of playbooks/node_runtime.yml and of
every task file of both roles (static imports, so the RHEL/Ubuntu paths that
Molecule cannot run are parsed and their modules resolved).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os

import pytest
import yaml

from testlib import REPO_ROOT, run_ansible_playbook

ROOT = REPO_ROOT
DRIVER_VARS = os.path.join(ROOT, "roles", "nvidia_driver", "vars")


def run_playbook(path, *args):
    return run_ansible_playbook(path, args=args)


# name: (OS vars file, role variables, expected message fragments or None for success)
DRIVER_VALIDATE_CASES = {
    "debian12_default": ("Debian-12.yml", {}, None),
    "debian12_branch_int": ("Debian-12.yml", {"nvidia_driver_branch": 535}, None),
    "unknown_branch": ("Debian-12.yml", {"nvidia_driver_branch": "999"},
                       ["nvidia_driver_branch=999", "not offered", "Fix: choose one of the branches 535"]),
    "branch_not_in_distro": ("Debian-12.yml", {"nvidia_driver_branch": "550"},
                             ["nvidia_driver_branch=550", "cuda_repo for newer branches"]),
    "unknown_version_branch": ("Ubuntu-22.04.yml", {"nvidia_driver_version": "390.157-1"},
                               ["nvidia_driver_version=390.157-1", "branch 390", "535, 550, 570"]),
    "malformed_version": ("Debian-12.yml", {"nvidia_driver_version": "latest"},
                          ["nvidia_driver_version=latest is not a driver version"]),
    "branch_version_disagree": ("Debian-12.yml", {"nvidia_driver_version": "535.261.03-1", "nvidia_driver_branch": "550"},
                                ["belongs to branch 535", "nvidia_driver_branch=550"]),
    "rhel_distro_source": ("RedHat-9.yml", {},
                           ["nvidia_driver_source=distro is not available", "cuda_repo, mirror"]),
    "mirror_without_url": ("Debian-12.yml", {"nvidia_driver_source": "mirror", "nvidia_driver_repo_key_url": "https://m.example/k.asc"},
                           ["nvidia_driver_mirror_url"]),
    "mirror_without_key": ("Debian-12.yml", {"nvidia_driver_source": "mirror", "nvidia_driver_branch": "570",
                                             "nvidia_driver_mirror_url": "https://mirror.example/cuda/debian12/x86_64/"},
                           ["nvidia_driver_repo_key_url", "nvidia_driver_repo_key_content", "never trusted"]),
    "mirror_ok": ("Debian-12.yml", {"nvidia_driver_source": "mirror", "nvidia_driver_branch": "570",
                                    "nvidia_driver_mirror_url": "https://mirror.example/cuda/debian12/x86_64/",
                                    "nvidia_driver_repo_key_content": "-----BEGIN PGP PUBLIC KEY BLOCK-----"}, None),
    "bad_gpu_count": ("Debian-12.yml", {"nvidia_driver_expected_gpu_count": "eight"},
                      ["nvidia_driver_expected_gpu_count=eight"]),
}

# name: (available, installed, validate inputs, extra, expected target or message fragments)
RESOLVE_CASES = {
    "fresh_newest_of_branch": (["535.261.03-1", "535.247.01-1"], "", {"nvidia_driver_branch": "535"}, {}, "535.261.03-1"),
    "rerun_keeps_installed": (["535.261.03-1", "535.247.01-1"], "535.247.01-1", {"nvidia_driver_branch": "535"}, {},
                              "535.247.01-1"),
    "requested_upstream": (["535.261.03-1", "535.247.01-1"], "535.261.03-1", {"nvidia_driver_version": "535.247.01"}, {},
                           "535.247.01-1"),
    "requested_exact": (["535.261.03-1", "535.247.01-1"], "", {"nvidia_driver_version": "535.261.03-1"}, {}, "535.261.03-1"),
    "installed_gone_from_repo": (["535.261.03-1"], "535.216.01-1", {"nvidia_driver_version": "535.216.01-1"}, {},
                                 "535.216.01-1"),
    "requested_not_offered": (["535.261.03-1"], "", {"nvidia_driver_version": "535.999.99"}, {},
                              ["nvidia_driver_version=535.999.99 is not offered", "available: 535.261.03-1", "Nothing was installed"]),
    "nothing_offered": ([], "", {"nvidia_driver_branch": "535"}, {},
                        ["nvidia_driver_branch=535 is not offered", "versions available: none", "non-free"]),
    "in_use_refused": (["535.261.03-1", "535.247.01-1"], "535.247.01-1", {"nvidia_driver_version": "535.261.03-1"},
                       {"users": [{"pid": 4242, "command": "python3", "devices": ["/dev/nvidia0"]}]},
                       ["535.247.01-1 -> 535.261.03-1", "4242 python3", "nvidia_driver_node_drained=true", "Nothing was changed"]),
    "in_use_drained": (["535.261.03-1", "535.247.01-1"], "535.247.01-1",
                       {"nvidia_driver_version": "535.261.03-1", "nvidia_driver_node_drained": True},
                       {"users": [{"pid": 4242, "command": "python3", "devices": ["/dev/nvidia0"]}]}, "535.261.03-1"),
    "in_use_no_change": (["535.261.03-1", "535.247.01-1"], "535.247.01-1", {"nvidia_driver_branch": "535"},
                         {"users": [{"pid": 4242, "command": "python3", "devices": ["/dev/nvidia0"]}]}, "535.247.01-1"),
}


def driver_playbook(tmp_path):
    tasks = []
    for name, (available, installed, inputs, extra, _expected) in RESOLVE_CASES.items():
        before = {"device_users": extra.get("users", []), "pci_nvswitches": []}
        tasks.append({"name": "resolve " + name, "block": [
            {"ansible.builtin.include_vars": {"file": os.path.join(DRIVER_VARS, "Debian-12.yml")}},
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet.nvidia_driver", "tasks_from": "validate.yml"},
             "vars": inputs},
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet.nvidia_driver", "tasks_from": "resolve.yml"},
             "vars": dict(inputs, __nvidia_driver_available=available, __nvidia_driver_installed=installed,
                          __nvidia_driver_before=before)},
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': 'target=' ~ __nvidia_driver_target}) }}" % name}},
        ], "rescue": [
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': ansible_failed_result.msg}) }}" % name}},
        ]})
    for name, (os_file, inputs, _expected) in DRIVER_VALIDATE_CASES.items():
        tasks.append({"name": "validate " + name, "block": [
            {"ansible.builtin.include_vars": {"file": os.path.join(DRIVER_VARS, os_file)}},
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet.nvidia_driver", "tasks_from": "validate.yml"},
             "vars": inputs},
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': 'ok branch=' ~ __nvidia_driver_branch}) }}" % name}},
        ], "rescue": [
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': ansible_failed_result.msg}) }}" % name}},
        ]})
    for name, (os_file, inputs, devices, _expected) in KERNEL_MODULE_CASES.items():
        before = {"pci_gpus": [{"pci_bus_id": "0000:%02x:00.0" % (0x18 + i), "class_code": "0302", "vendor_id": "10de",
                                "device_id": device} for i, device in enumerate(devices)]}
        tasks.append({"name": "kernel module " + name, "block": [
            {"ansible.builtin.include_vars": {"file": os.path.join(DRIVER_VARS, os_file)}},
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet.nvidia_driver", "tasks_from": "validate.yml"},
             "vars": inputs},
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet.nvidia_driver", "tasks_from": "kernel_module.yml"},
             "vars": dict(inputs, __nvidia_driver_before=before)},
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': 'flavour=' ~ "
                                          "__nvidia_driver_kernel_module_choice.flavour ~ ' version_package=' ~ "
                                          "__nvidia_driver_version_package_name ~ ' dkms=' ~ __nvidia_driver_dkms_module ~ "
                                          "' packages=' ~ (__nvidia_driver_package_names | join(','))}) }}" % name}},
        ], "rescue": [
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': ansible_failed_result.msg}) }}" % name}},
        ]})
    tasks.append({"ansible.builtin.copy": {"content": "{{ results | to_json }}", "dest": str(tmp_path / "results.json"),
                                           "mode": "0644"}})
    play = [{"hosts": "localhost", "gather_facts": True, "gather_subset": ["!all", "min"],
             "vars": {"results": {}}, "tasks": tasks}]
    path = tmp_path / "driver_checks.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return path


# name: (OS vars file, role variables, PCI device ids of the GPUs, expected fragments)
KERNEL_MODULE_CASES = {
    "debian12_no_gpu_535": ("Debian-12.yml", {"nvidia_driver_branch": "535"}, [],
                            ["flavour=proprietary", "version_package=nvidia-kernel-dkms", "dkms=nvidia-current "]),
    "debian12_h100_open": ("Debian-12.yml", {"nvidia_driver_branch": "535"}, ["2330"] * 2,
                           ["flavour=open", "version_package=nvidia-open-kernel-dkms", "dkms=nvidia-current-open",
                            "packages=nvidia-driver,nvidia-open-kernel-dkms,firmware-nvidia-gsp"]),
    "debian12_cuda_repo_580": ("Debian-12.yml", {"nvidia_driver_source": "cuda_repo", "nvidia_driver_branch": "580"},
                               ["20b2"], ["flavour=open", "version_package=nvidia-kernel-open-dkms"]),
    "ubuntu2404_open": ("Ubuntu-24.04.yml", {"nvidia_driver_branch": "570"}, ["2235"],
                        ["flavour=open", "version_package=nvidia-dkms-570-server-open",
                         "packages=nvidia-driver-570-server-open,nvidia-dkms-570-server-open"]),
    "ubuntu2404_proprietary": ("Ubuntu-24.04.yml", {"nvidia_driver_branch": "570",
                                                    "nvidia_driver_kernel_module": "proprietary"}, ["2235"],
                               ["flavour=proprietary", "version_package=nvidia-dkms-570-server "]),
    "rhel9_open": ("RedHat-9.yml", {"nvidia_driver_source": "cuda_repo", "nvidia_driver_branch": "570"}, ["2330"],
                   ["flavour=open", "packages=nvidia-driver,nvidia-driver-cuda,nvidia-driver-libs,kmod-nvidia-open-dkms"]),
    "blackwell_proprietary_refused": ("Debian-12.yml", {"nvidia_driver_source": "cuda_repo", "nvidia_driver_branch": "570",
                                                        "nvidia_driver_kernel_module": "proprietary"}, ["2941"],
                                      ["nvidia_driver_kernel_module=proprietary cannot drive 0000:18:00.0 (device 2941)",
                                       "Fix: set nvidia_driver_kernel_module to open or auto", "Nothing was changed"]),
    "blackwell_old_branch_refused": ("Debian-12.yml", {"nvidia_driver_branch": "535"}, ["2941"],
                                     ["branch 535 cannot drive the Blackwell GPU(s) at 0000:18:00.0 (device 2941)",
                                      "Fix: set nvidia_driver_branch to 570 or newer"]),
    "volta_open_refused": ("Debian-12.yml", {"nvidia_driver_branch": "535", "nvidia_driver_kernel_module": "open"},
                           ["1db5"], ["the open kernel modules need a Turing or newer GPU (volta)"]),
    "prebuilt_not_ubuntu": ("Debian-12.yml", {"nvidia_driver_branch": "535", "nvidia_driver_ubuntu_prebuilt_modules": True},
                            [], ["nvidia_driver_ubuntu_prebuilt_modules=true needs Ubuntu's linux-restricted-modules"]),
}


@pytest.mark.parametrize("name", sorted(KERNEL_MODULE_CASES))
def test_driver_kernel_module(driver_results, name):
    message = driver_results[name] + " "
    for fragment in KERNEL_MODULE_CASES[name][3]:
        assert fragment in message, message


@pytest.fixture(scope="module")
def driver_results(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("driver_checks")
    result = run_playbook(str(driver_playbook(tmp_path)))
    assert result.returncode == 0, result.stdout[-3000:]
    with open(str(tmp_path / "results.json")) as handle:
        return json.load(handle)


@pytest.mark.parametrize("name", sorted(DRIVER_VALIDATE_CASES))
def test_driver_validate(driver_results, name):
    expected = DRIVER_VALIDATE_CASES[name][2]
    message = driver_results[name]
    if expected is None:
        assert message.startswith("ok branch="), message
    else:
        for fragment in expected:
            assert fragment in message, message
        assert "Fix:" in message


def test_driver_validate_defaults_to_newest_branch(driver_results):
    assert driver_results["debian12_default"] == "ok branch=535"
    assert driver_results["debian12_branch_int"] == "ok branch=535"
    assert driver_results["mirror_ok"] == "ok branch=570"


@pytest.mark.parametrize("name", sorted(RESOLVE_CASES))
def test_driver_resolve(driver_results, name):
    expected = RESOLVE_CASES[name][4]
    message = driver_results[name]
    if isinstance(expected, str):
        assert message == "target=" + expected
    else:
        for fragment in expected:
            assert fragment in message, message


def test_validate_and_resolve_change_nothing():
    """Only assertions, set_fact, fail and debug: safe before anything changes."""
    allowed = {"ansible.builtin.assert", "ansible.builtin.set_fact", "ansible.builtin.fail", "ansible.builtin.debug"}
    for role, files in (("nvidia_driver", ("validate.yml", "resolve.yml")), ("container_toolkit", ("validate.yml", "decide.yml"))):
        for name in files:
            with open(os.path.join(ROOT, "roles", role, "tasks", name)) as handle:
                tasks = yaml.safe_load(handle)
            for task in tasks:
                modules = set(task) & (allowed | {k for k in task if k.startswith("ansible.") or k.startswith("community.")})
                assert modules and modules <= allowed, (role, name, task.get("name"), modules)


TOOLKIT_VALIDATE_CASES = {
    # NVIDIA publishes no fingerprint for its libnvidia-container key: the default source refuses until one is pinned
    "default_unpinned": ({}, ["container_toolkit_source=nvidia", "container_toolkit_repo_key_fingerprint is not set",
                              "NVIDIA publishes no fingerprint", "Nothing was changed"]),
    "default": ({"container_toolkit_repo_key_fingerprint": "0123456789ABCDEF0123456789ABCDEF01234567"}, None),
    "nvidia_with_own_key": ({"container_toolkit_repo_key_content": "-----BEGIN PGP PUBLIC KEY BLOCK-----"}, None),
    "short_version": ({"container_toolkit_version": "1.17"}, ["container_toolkit_version=1.17 is not an exact package version"]),
    "upstream_only": ({"container_toolkit_version": "1.17.8"}, ["container_toolkit_version=1.17.8", "such as 1.17.8-1"]),
    "mirror_without_key": ({"container_toolkit_source": "mirror", "container_toolkit_mirror_url": "https://m.example/deb/$(ARCH)"},
                           ["container_toolkit_repo_key_url", "container_toolkit_repo_key_content", "never trusted"]),
    "mirror_without_url": ({"container_toolkit_source": "mirror", "container_toolkit_repo_key_url": "https://m.example/k"},
                           ["container_toolkit_mirror_url"]),
}


@pytest.fixture(scope="module")
def toolkit_results(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("toolkit_checks")
    tasks = [{"ansible.builtin.include_vars": {"file": os.path.join(ROOT, "roles", "container_toolkit", "vars", "Debian.yml")}}]
    for name, (inputs, _expected) in TOOLKIT_VALIDATE_CASES.items():
        tasks.append({"name": "validate " + name, "block": [
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet.container_toolkit", "tasks_from": "validate.yml"},
             "vars": inputs},
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': 'ok ' ~ __container_toolkit_repo_url}) }}" % name}},
        ], "rescue": [
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': ansible_failed_result.msg}) }}" % name}},
        ]})
    for name, (os_file, inputs, devices, _expected) in KERNEL_MODULE_CASES.items():
        before = {"pci_gpus": [{"pci_bus_id": "0000:%02x:00.0" % (0x18 + i), "class_code": "0302", "vendor_id": "10de",
                                "device_id": device} for i, device in enumerate(devices)]}
        tasks.append({"name": "kernel module " + name, "block": [
            {"ansible.builtin.include_vars": {"file": os.path.join(DRIVER_VARS, os_file)}},
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet.nvidia_driver", "tasks_from": "validate.yml"},
             "vars": inputs},
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet.nvidia_driver", "tasks_from": "kernel_module.yml"},
             "vars": dict(inputs, __nvidia_driver_before=before)},
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': 'flavour=' ~ "
                                          "__nvidia_driver_kernel_module_choice.flavour ~ ' version_package=' ~ "
                                          "__nvidia_driver_version_package_name ~ ' dkms=' ~ __nvidia_driver_dkms_module ~ "
                                          "' packages=' ~ (__nvidia_driver_package_names | join(','))}) }}" % name}},
        ], "rescue": [
            {"ansible.builtin.set_fact": {"results": "{{ results | combine({'%s': ansible_failed_result.msg}) }}" % name}},
        ]})
    tasks.append({"ansible.builtin.copy": {"content": "{{ results | to_json }}", "dest": str(tmp_path / "results.json"),
                                           "mode": "0644"}})
    path = tmp_path / "toolkit_checks.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "vars": {"results": {}},
                                     "tasks": tasks}], sort_keys=False))
    result = run_playbook(str(path))
    assert result.returncode == 0, result.stdout[-3000:]
    with open(str(tmp_path / "results.json")) as handle:
        return json.load(handle)


@pytest.mark.parametrize("name", sorted(TOOLKIT_VALIDATE_CASES))
def test_toolkit_validate(toolkit_results, name):
    expected = TOOLKIT_VALIDATE_CASES[name][1]
    message = toolkit_results[name]
    if expected is None:
        assert message == "ok https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
    else:
        for fragment in expected:
            assert fragment in message, message
        assert "Fix:" in message


def test_node_runtime_playbook_syntax():
    result = run_playbook(os.path.join(ROOT, "playbooks", "node_runtime.yml"), "--syntax-check")
    assert result.returncode == 0, result.stdout


def test_every_task_file_parses_and_resolves_its_modules(tmp_path):
    """Static import_tasks of every task file: parses them and resolves every module (RHEL and Ubuntu paths too)."""
    tasks = []
    for role in ("nvidia_driver", "container_toolkit"):
        for path in sorted(glob.glob(os.path.join(ROOT, "roles", role, "tasks", "**", "*.yml"), recursive=True)):
            tasks.append({"name": "import %s" % os.path.relpath(path, ROOT), "ansible.builtin.import_tasks": path})
    playbook = tmp_path / "all_tasks.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    result = run_playbook(str(playbook), "--syntax-check")
    assert result.returncode == 0, result.stdout
    assert len(tasks) >= 14
