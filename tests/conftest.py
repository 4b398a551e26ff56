# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared pytest fixtures for every suite under tests/ (the one conftest that others build on).

pytest loads this file for `pytest tests/unit`, `pytest tests/integration` and
any single test file below tests/, and puts tests/ on sys.path, so tests import
the shared helpers as ``testlib``.  Integration-only fixtures (ansible-playbook)
live here too; unit tests simply do not use them.
"""
import os

import pytest

import testlib

testlib.link_collection()


@pytest.fixture(autouse=True)
def _modules_run_as_on_a_managed_node(request, monkeypatch):
    """Module tests see module behaviour, whatever ran before them.

    Importing controller code (filter plugins, ansible-playbook helpers) flips
    ansible-core's process-wide ``is_controller`` flag, after which
    ``AnsibleModule.warn`` prints through Display instead of returning the
    warning in the result.  A module always runs on a managed node.
    """
    if os.sep + os.path.join("plugins", "modules") + os.sep in str(request.node.path):
        from ansible.module_utils import _internal
        monkeypatch.setattr(_internal, "is_controller", False)


# --- the Kubernetes API stand-in (tests/k8s_standin/server.py) ---------------
@pytest.fixture
def standin_factory(tmp_path):
    """Start stand-ins on free loopback ports; all are stopped at teardown."""
    started = []

    def _start(seed=None, state_dir=None, **kwargs):
        state_dir = state_dir or str(tmp_path / ("state%d" % len(started)))
        os.makedirs(state_dir, exist_ok=True)
        server = testlib.k8s_standin_server.KubeStandin(state_dir=state_dir, seed=seed, **kwargs).start()
        started.append(server)
        return server

    yield _start
    for server in started:
        if not server.httpd.stopping:
            server.stop()


@pytest.fixture
def standin(standin_factory):
    return standin_factory()


@pytest.fixture
def kubeconfig(standin, tmp_path):
    return standin.write_kubeconfig(str(tmp_path / "kubeconfig"))


@pytest.fixture
def run_playbook(tmp_path):
    """Write `text` as a playbook under tmp_path and run it with ansible-playbook (integration tests)."""
    def _run(text, kubeconfig_path=None, args=(), extra_env=None):
        path = tmp_path / "playbook.yml"
        path.write_text(text)
        return testlib.run_ansible_playbook(str(path), kubeconfig_path, args, extra_env)
    return _run
