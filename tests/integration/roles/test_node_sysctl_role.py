# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_native.fleet.node_sysctl, run by ansible-playbook on localhost (issue 25, item 8).

The role writes its files under tmp_path and never touches this host's kernel: node_sysctl_apply and
node_sysctl_reload are false (ansible.posix.sysctl then only edits the file), so the sysctls are read back from
the file. The running-kernel path is the same module with sysctl_set: true; the playbooks turn the role off on
container test hosts (onboard_sysctl, node_runtime_sysctl).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

import yaml

import testlib
from testlib import run_ansible_playbook

PLAYBOOK = """\
- name: Run node_sysctl
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpu_native.fleet.node_sysctl
"""
DEFAULTS = os.path.join(testlib.REPO_ROOT, "roles", "node_sysctl", "defaults", "main.yml")


def _run(tmp_path, args=(), **role_vars):
    variables = {
        "node_sysctl_file": str(tmp_path / "sysctl.d" / "90-gpu-native.conf"),
        "node_sysctl_modules_file": str(tmp_path / "modules-load.d" / "90-gpu-native-sysctl.conf"),
        "node_sysctl_apply": False,
        "node_sysctl_reload": False,
        "node_sysctl_modules": [],
    }
    variables.update(role_vars)
    (tmp_path / "sysctl.d").mkdir(exist_ok=True)
    (tmp_path / "modules-load.d").mkdir(exist_ok=True)
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(PLAYBOOK)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(variables))
    return run_ansible_playbook(str(playbook), args=["-e", "@" + str(extra)] + list(args), timeout=300)


def _recap(result):
    line = [line for line in result.stdout.splitlines() if line.startswith("localhost")][-1]
    return dict((key, int(value)) for key, value in (part.split("=") for part in line.split(":", 1)[1].split()))


def _settings(path):
    pairs = [line.split("=", 1) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return dict((key.strip(), value.strip()) for key, value in pairs)


def test_the_defaults_land_in_the_file_and_a_rerun_changes_nothing(tmp_path):
    result = _run(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    with open(DEFAULTS, encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)["node_sysctl_settings"]
    assert _settings(tmp_path / "sysctl.d" / "90-gpu-native.conf") == defaults
    assert _recap(result)["changed"] == 1  # one task, one item per setting
    again = _run(tmp_path)
    assert again.returncode == 0 and _recap(again)["changed"] == 0, again.stdout[-3000:]


def test_extra_wins_over_the_settings(tmp_path):
    result = _run(tmp_path, node_sysctl_settings={"vm.max_map_count": "262144", "kernel.numa_balancing": "0"},
                  node_sysctl_extra={"vm.max_map_count": 1048576, "net.core.rmem_max": "33554432"})
    assert result.returncode == 0, result.stdout[-3000:]
    assert _settings(tmp_path / "sysctl.d" / "90-gpu-native.conf") == {
        "vm.max_map_count": "1048576", "kernel.numa_balancing": "0", "net.core.rmem_max": "33554432"}


def test_check_mode_writes_nothing(tmp_path):
    result = _run(tmp_path, args=["--check"], node_sysctl_modules=["br_netfilter"])
    assert result.returncode == 0, result.stdout[-3000:]
    assert _recap(result)["changed"] > 0
    assert not (tmp_path / "sysctl.d" / "90-gpu-native.conf").exists()
    assert not (tmp_path / "modules-load.d" / "90-gpu-native-sysctl.conf").exists()


def test_the_modules_file_lists_the_modules(tmp_path):
    result = _run(tmp_path, node_sysctl_modules=["br_netfilter"])
    assert result.returncode == 0, result.stdout[-3000:]
    lines = (tmp_path / "modules-load.d" / "90-gpu-native-sysctl.conf").read_text().splitlines()
    assert [line for line in lines if not line.startswith("#")] == ["br_netfilter"]


def test_bad_values_are_refused_before_anything_changes(tmp_path):
    result = _run(tmp_path, node_sysctl_extra={"../../etc/shadow": "1", "vm.swappiness": "1\nkernel.x=2"},
                  node_sysctl_file=str(tmp_path / "sysctl.d" / "relative"))
    assert result.returncode == 2, result.stdout[-3000:]
    assert "Fix: name each setting" in result.stdout
    assert "../../etc/shadow" in result.stdout and "vm.swappiness" in result.stdout
    assert os.listdir(str(tmp_path / "sysctl.d")) == []


def test_a_file_that_is_not_an_absolute_conf_path_is_refused(tmp_path):
    result = _run(tmp_path, node_sysctl_file="sysctl.d/90-gpu-native")
    assert result.returncode == 2, result.stdout[-3000:]
    assert 'node_sysctl_file "sysctl.d/90-gpu-native"' in result.stdout
    assert os.listdir(str(tmp_path / "sysctl.d")) == []


def test_the_argument_spec_refuses_a_wrong_type(tmp_path):
    result = _run(tmp_path, node_sysctl_settings=["vm.max_map_count"])
    assert result.returncode == 2, result.stdout[-3000:]
    assert "node_sysctl_settings" in result.stdout and "dict" in result.stdout
    assert not (tmp_path / "sysctl.d" / "90-gpu-native.conf").exists()


def _tasks_naming(node, role):
    """Every task or roles: entry (dict) under ``node`` that runs ``role``."""
    found = []
    if isinstance(node, dict):
        if node.get("role") == role or (node.get("ansible.builtin.include_role") or {}).get("name") == role:
            found.append(node)
        for value in node.values():
            found += _tasks_naming(value, role)
    elif isinstance(node, list):
        for item in node:
            found += _tasks_naming(item, role)
    return found


def test_the_playbooks_run_the_role_behind_their_switch():
    # onboard.yml's per-node flow is the onboard role, whose defaults give the switch (true)
    for playbook, tasks_file, switch, condition in (
            ("onboard.yml", "roles/onboard/tasks/main.yml", "onboard_sysctl", "onboard_sysctl | bool"),
            ("node_runtime.yml", "playbooks/node_runtime.yml", "node_runtime_sysctl",
             "node_runtime_sysctl | default(true) | bool")):
        with open(os.path.join(testlib.REPO_ROOT, tasks_file), encoding="utf-8") as handle:
            entries = _tasks_naming(yaml.safe_load(handle), "gpu_native.fleet.node_sysctl")
        assert len(entries) == 1, tasks_file
        assert entries[0]["when"] == condition, tasks_file
        # the switch is checked with the other playbook-level variables, before any node is touched
        with open(os.path.join(testlib.REPO_ROOT, "playbooks", playbook), encoding="utf-8") as handle:
            plays = yaml.safe_load(handle)
        spec = plays[0]["tasks"][0]["ansible.builtin.validate_argument_spec"]["argument_spec"]
        assert spec[switch] == {"type": "bool"}, playbook
    with open(os.path.join(testlib.REPO_ROOT, "roles", "onboard", "defaults", "main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["onboard_sysctl"] is True
    # the test hosts (containers) cannot set kernel parameters: their scenarios turn it off
    for path, switch in (("molecule/onboard/molecule.yml", "onboard_sysctl"),
                         ("molecule/node_stack/converge.yml", "node_runtime_sysctl")):
        with open(os.path.join(testlib.REPO_ROOT, path), encoding="utf-8") as handle:
            assert re.search(r"^\s+%s: false$" % switch, handle.read(), re.M), path
