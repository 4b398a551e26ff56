"""gpu_native.fleet.gpu_readiness's plain Prometheus rules file, through ansible-playbook on localhost.

The file must hold exactly the PrometheusRule's groups (one source), be checked by promtool before it replaces the
old one, be idempotent, and bad settings must stop the role before anything is written.
"""
import json
import os
import re
import shutil

import pytest
import yaml

from testlib import REPO_ROOT, render_role_template

PROMTOOL = shutil.which("promtool")

RULES_ONLY = """
- name: Write the rules file
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Rules file only
      ansible.builtin.include_role:
        name: gpu_native.fleet.gpu_readiness
        tasks_from: prometheus_rules
"""

WHOLE_ROLE = """
- name: The whole role
  hosts: localhost
  gather_facts: false
  roles:
    - gpu_native.fleet.gpu_readiness
"""


def prometheus_rule(**overrides):
    """The PrometheusRule the role's template renders (role defaults plus overrides)."""
    return render_role_template("gpu_readiness", "prometheusrule.yaml.j2", **overrides)


def recap(output):
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output[-3000:]
    return {"changed": int(match.group(2)), "failed": int(match.group(4))}


def failure_message(output):
    """The msg of the failure that stopped the play (a task's, or a loop item's)."""
    messages = re.findall(r"^(?:fatal: \[localhost\]: FAILED!|failed: \[localhost\] \(item=[^)]*\)) => (\{.*\})$",
                          output, re.MULTILINE)
    assert messages, output[-3000:]
    return json.loads(messages[-1])["msg"]


@pytest.fixture
def play(run_playbook, tmp_path):
    def _play(text=RULES_ONLY, **variables):
        extra = {"gpu_readiness_prometheus_rules_file": str(tmp_path / "rules" / "gpu_native_readiness.yml")}
        extra.update(variables)
        return run_playbook(text, args=["-e", json.dumps(extra)])
    return _play


def test_rules_file_holds_the_prometheusrule_groups_and_is_idempotent(play, tmp_path):
    path = tmp_path / "rules" / "gpu_native_readiness.yml"
    first = play(gpu_readiness_alert_gpu_unhealthy_for="4s")
    assert recap(first.stdout) == {"changed": 2, "failed": 0}, first.stdout[-3000:]  # directory and file
    text = path.read_text()
    assert text.startswith("# Managed by gpu_native.fleet.gpu_readiness")
    assert yaml.safe_load(text) == {"groups": prometheus_rule(gpu_readiness_alert_gpu_unhealthy_for="4s")["spec"]["groups"]}
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    second = play(gpu_readiness_alert_gpu_unhealthy_for="4s")
    assert recap(second.stdout) == {"changed": 0, "failed": 0}, second.stdout[-3000:]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package 'prometheus')")
def test_promtool_refuses_broken_rules_and_keeps_the_old_file(play, tmp_path):
    path = tmp_path / "rules" / "gpu_native_readiness.yml"
    assert recap(play(gpu_readiness_promtool=PROMTOOL).stdout)["failed"] == 0
    before = path.read_text()
    broken = play(gpu_readiness_promtool=PROMTOOL, gpu_readiness_alert_temperature_c="85 +")
    assert recap(broken.stdout)["failed"] == 1
    assert "failed to validate" in failure_message(broken.stdout)
    assert path.read_text() == before


def test_relative_rules_path_is_refused(play, tmp_path):
    result = play(gpu_readiness_prometheus_rules_file="rules/gpu.yml")
    assert recap(result.stdout)["failed"] == 1
    message = failure_message(result.stdout)
    assert '"rules/gpu.yml"' in message and "Fix: give an absolute path" in message
    assert not os.path.exists(os.path.join(REPO_ROOT, "rules"))


def test_bad_duration_stops_the_role_before_anything_is_written(play, tmp_path):
    dirs = dict((name, str(tmp_path / name)) for name in ("install", "config", "state", "textfile"))
    # not sandboxed: the sandbox wants its state folder below /var/lib (test_sandbox_state_folder_...)
    result = play(WHOLE_ROLE, gpu_readiness_alert_gpu_unhealthy_for="5 minutes", gpu_readiness_sandbox=False,
                  gpu_readiness_install_dir=dirs["install"], gpu_readiness_config_dir=dirs["config"],
                  gpu_readiness_state_dir=dirs["state"], gpu_readiness_textfile_dir=dirs["textfile"])
    assert recap(result.stdout)["failed"] == 1
    message = failure_message(result.stdout)
    assert message.startswith('gpu_readiness_alert_gpu_unhealthy_for is "5 minutes", not a Prometheus duration.')
    assert "Fix: use a duration such as" in message
    assert sorted(os.listdir(tmp_path)) == ["playbook.yml"]


def test_sandbox_state_folder_outside_var_lib_stops_the_role_before_anything_is_written(play, tmp_path):
    """Sandboxed, systemd's StateDirectory= gives the folder to the dynamic user: it must lie below /var/lib."""
    dirs = dict((name, str(tmp_path / name)) for name in ("install", "config", "state", "textfile"))
    result = play(WHOLE_ROLE, gpu_readiness_install_dir=dirs["install"], gpu_readiness_config_dir=dirs["config"],
                  gpu_readiness_state_dir=dirs["state"], gpu_readiness_textfile_dir=dirs["textfile"])
    assert recap(result.stdout)["failed"] == 1
    message = failure_message(result.stdout)
    assert message.startswith("gpu_readiness_sandbox is true but the state folder %s is not below /var/lib" % dirs["state"])
    assert "Fix: keep the state folder below /var/lib" in message
    assert sorted(os.listdir(tmp_path)) == ["playbook.yml"]


def test_a_sandbox_group_the_node_lacks_stops_the_role_before_anything_is_written(play, tmp_path):
    """systemd would refuse the unit (216/GROUP): the role says so first and changes nothing."""
    dirs = dict((name, str(tmp_path / name)) for name in ("install", "config", "textfile"))
    result = play(WHOLE_ROLE, gpu_readiness_install_dir=dirs["install"], gpu_readiness_config_dir=dirs["config"],
                  gpu_readiness_textfile_dir=dirs["textfile"],
                  gpu_readiness_sandbox_groups=["systemd-journal", "no-such-group-gn"])
    assert recap(result.stdout)["failed"] == 1
    message = failure_message(result.stdout)
    assert message.startswith("gpu_readiness_sandbox_groups names groups this node does not have (no-such-group-gn)")
    assert sorted(os.listdir(tmp_path)) == ["playbook.yml"]
