"""playbooks/awx_configure.yml and compliance.yml pass ansible-playbook --syntax-check (awx_configure is never run here)."""
import os
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


@pytest.mark.parametrize("playbook", ["awx_configure.yml", "compliance.yml"])
def test_syntax_check(playbook):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="true")
    proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "--syntax-check",
                           os.path.join(REPO, "playbooks", playbook)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout.decode()
