"""playbooks/awx_configure.yml: no_log exactly where a secret passes (issue 26, item 6).

Every task used to be no_log, hiding results that hold no secret.  awx.awx already marks its connection
secrets (controller_oauthtoken, controller_password: plugins/module_utils/controller_api.py) and a
credential's inputs (plugins/modules/credential.py) no_log, so the token that module_defaults hands to every
task is masked by the module itself; no_log stays on the tasks whose own arguments carry a secret.
"""
import os
import re

import yaml

from testlib import REPO_ROOT

PLAYBOOK = os.path.join(REPO_ROOT, "playbooks", "awx_configure.yml")
SECRETS = ("awx_fleet_machine_ssh_key", "awx_fleet_kube_bearer_token", "awx_controller_token", "awx_controller_password")


def _tasks():
    with open(PLAYBOOK) as handle:
        plays = yaml.safe_load(handle)
    return [task for play in plays for task in play.get("tasks", [])]


def _arguments(task):
    return dict((key, value) for key, value in task.items() if key not in ("name", "no_log", "when", "vars"))


def _passes_a_secret(task):
    text = yaml.safe_dump(_arguments(task))
    # a value passes where it is templated; "awx_controller_token is defined" in an assert passes nothing
    return any(re.search(r"\{\{[^}]*\b%s\b" % secret, text) for secret in SECRETS)


def test_no_log_only_where_a_secret_passes():
    tasks = _tasks()
    assert len(tasks) >= 10
    secret = [task["name"] for task in tasks if _passes_a_secret(task)]
    hidden = [task["name"] for task in tasks if task.get("no_log")]
    assert secret == ["Machine credential for the GPU nodes", "Kubernetes API credential (created from the variables)"], secret
    assert hidden == secret


def test_the_secret_check_would_see_a_secret_in_any_argument():
    assert _passes_a_secret({"name": "x", "awx.awx.credential": {"inputs": {"ssh_key_data": "{{ awx_fleet_machine_ssh_key }}"}}})
    assert not _passes_a_secret({"name": "x", "ansible.builtin.assert": {"that": ["awx_controller_token is defined"]}})
