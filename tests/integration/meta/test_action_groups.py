# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_defaults for the collection's action groups (meta/runtime.yml) reach every member, and only members.

One ansible-playbook run on localhost: every member of group/gpu_native.fleet.node_tools accepts the group's
options (the old ``fleet`` group failed containerd_runtime with "Unsupported parameters"), the options really
arrive (gpu_node_labels, gpu_health and node_compliance name the nvidia-smi the group set), and a module outside the group is untouched.
"""
import json
import os

import yaml

import testlib

NODE_TOOLS = yaml.safe_load(open(os.path.join(testlib.REPO_ROOT, "meta", "runtime.yml"), encoding="utf-8"))[
    "action_groups"]["node_tools"]

PLAY = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/gpu_native.fleet.node_tools:
      nvidia_smi: %(missing)s
      command_timeout: 7
  tasks:
%(members)s
    - name: A module outside the group gets none of them
      gpu_native.fleet.containerd_runtime:
        config_path: %(tmp)s/config.toml
        drop_in_dir: %(tmp)s/conf.d
        allow_missing_binary: true
      check_mode: true
      register: outside

    - name: Show what each run said
      ansible.builtin.copy:
        content: "{{ {'members': members, 'outside': outside} | to_json }}"
        dest: %(tmp)s/results.json
        mode: "0600"
      vars:
        members: "{{ {%(registered)s} }}"
"""

MEMBER = """    - name: Member %(name)s, with nothing but the group's options
      gpu_native.fleet.%(name)s:
      register: member_%(name)s
      ignore_errors: true
      check_mode: true
"""


def test_group_options_reach_every_member_and_only_members(tmp_path):
    missing = str(tmp_path / "no-such-dir" / "nvidia-smi-from-the-group")
    play = tmp_path / "play.yml"
    play.write_text(PLAY % {
        "missing": missing, "tmp": tmp_path,
        "members": "".join(MEMBER % {"name": name} for name in NODE_TOOLS),
        "registered": ", ".join("'%s': member_%s" % (name, name) for name in NODE_TOOLS)})
    done = testlib.run_ansible_playbook(str(play), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    with open(tmp_path / "results.json", encoding="utf-8") as handle:
        results = json.load(handle)
    assert sorted(results["members"]) == sorted(NODE_TOOLS)
    for name, result in results["members"].items():
        assert "Unsupported parameters" not in result.get("msg", ""), (name, result.get("msg"))
        assert "command_timeout" not in result.get("msg", ""), (name, result.get("msg"))
    # the members that report the nvidia-smi they tried name the group's one
    for name in ("gpu_node_labels", "gpu_health", "node_compliance"):
        assert missing in json.dumps(results["members"][name]), name
    assert not results["outside"].get("failed"), results["outside"].get("msg")
