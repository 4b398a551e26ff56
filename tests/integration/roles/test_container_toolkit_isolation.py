# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""container_toolkit's GPU isolation settings in the toolkit's own config file, run on localhost (issue 26, item 1).

The role's isolation tasks (tasks_from: isolation) edit a copy of the config file under tmp_path: the one the
stand-in package ships (tests/apt_repo/build_repo.py, the keys commented out at the top as nvidia-ctk writes
them), one without those lines, and none at all.  Each result is read back as TOML, so a key that landed in
a table would not count.  Molecule (molecule/container_toolkit) checks the file the package installed.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os

import pytest

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

from testlib import REPO_ROOT, run_ansible_playbook

_SPEC = importlib.util.spec_from_file_location("build_repo", os.path.join(REPO_ROOT, "tests", "apt_repo", "build_repo.py"))
build_repo = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(build_repo)

ENVVAR = "accept-nvidia-visible-devices-envvar-when-unprivileged"
MOUNTS = "accept-nvidia-visible-devices-as-volume-mounts"
PLAYBOOK = """\
- name: Run the toolkit's isolation tasks
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The role's isolation tasks
      ansible.builtin.include_role:
        name: gpu_native.fleet.container_toolkit
        tasks_from: isolation
"""
WITHOUT_KEYS = """\
disable-require = false

[nvidia-container-cli]
load-kmods = true

[nvidia-container-runtime]
mode = "auto"
"""


def _run(tmp_path, config, *args, **role_vars):
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(PLAYBOOK)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(dict(role_vars, __container_toolkit_config_file=str(config))))
    return run_ansible_playbook(str(playbook), args=["-e", "@" + str(extra)] + list(args))


def _changed(result):
    line = [line for line in result.stdout.splitlines() if line.startswith("localhost")][-1]
    return int(line.split("changed=")[1].split()[0])


def _without(config, *keys):
    return dict((key, value) for key, value in config.items() if key not in keys)


@pytest.mark.parametrize("original", [build_repo.RUNTIME_CONFIG, WITHOUT_KEYS], ids=["as_packaged", "without_the_keys"])
def test_both_keys_written_at_the_top_level_and_nothing_else_changes(tmp_path, original):
    config = tmp_path / "config.toml"
    config.write_text(original)
    result = _run(tmp_path, config)
    assert result.returncode == 0, result.stdout
    assert _changed(result) == 1
    written = tomllib.loads(config.read_text())
    assert written[ENVVAR] is False and written[MOUNTS] is True
    assert _without(written, ENVVAR, MOUNTS) == tomllib.loads(original)
    assert config.read_text().count(ENVVAR) == 1 and config.read_text().count(MOUNTS) == 1

    again = _run(tmp_path, config)
    assert again.returncode == 0 and _changed(again) == 0, again.stdout


def test_a_missing_file_is_created_with_both_keys(tmp_path):
    config = tmp_path / "etc" / "config.toml"
    config.parent.mkdir()
    result = _run(tmp_path, config)
    assert result.returncode == 0, result.stdout
    assert tomllib.loads(config.read_text()) == {ENVVAR: False, MOUNTS: True}


def test_the_variables_set_the_values(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(build_repo.RUNTIME_CONFIG)
    result = _run(tmp_path, config, container_toolkit_accept_envvar_when_unprivileged=True,
                  container_toolkit_accept_device_list_as_volume_mounts=False)
    assert result.returncode == 0, result.stdout
    written = tomllib.loads(config.read_text())
    assert written[ENVVAR] is True and written[MOUNTS] is False


def test_check_mode_writes_nothing(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(build_repo.RUNTIME_CONFIG)
    result = _run(tmp_path, config, "--check", "--diff")
    assert result.returncode == 0, result.stdout
    assert _changed(result) == 1
    assert "+%s = false" % ENVVAR in result.stdout
    assert config.read_text() == build_repo.RUNTIME_CONFIG
