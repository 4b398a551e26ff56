"""Fixtures around the Kubernetes API stand-in (tests/k8s_standin/server.py)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SERVER_PY = os.path.join(REPO_ROOT, "tests", "k8s_standin", "server.py")
VENV_BIN = os.path.dirname(sys.executable)


def load_server_module():
    spec = importlib.util.spec_from_file_location("k8s_standin_server", SERVER_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


k8s_standin_server = load_server_module()


@pytest.fixture
def standin_factory(tmp_path):
    """Start stand-ins on free loopback ports; all are stopped at teardown."""
    started = []

    def _start(seed=None, state_dir=None, **kwargs):
        state_dir = state_dir or str(tmp_path / ("state%d" % len(started)))
        os.makedirs(state_dir, exist_ok=True)
        server = k8s_standin_server.KubeStandin(state_dir=state_dir, seed=seed, **kwargs).start()
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


def ansible_env(kubeconfig_path=None, extra=None):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO_ROOT, ".cache", "collections"),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "true",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
    })
    if kubeconfig_path:
        env["K8S_AUTH_KUBECONFIG"] = kubeconfig_path
    env.update(extra or {})
    return env


def run_ansible_playbook(playbook, kubeconfig_path=None, args=(), extra_env=None, timeout=600):
    """Run ansible-playbook from the venv; return CompletedProcess (stdout+stderr in .stdout)."""
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", playbook] + list(args)
    return subprocess.run(cmd, env=ansible_env(kubeconfig_path, extra_env), cwd=REPO_ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)


@pytest.fixture
def run_playbook(tmp_path):
    """Write `text` as a playbook under tmp_path and run it."""
    def _run(text, kubeconfig_path=None, args=(), extra_env=None):
        path = tmp_path / "playbook.yml"
        path.write_text(text)
        return run_ansible_playbook(str(path), kubeconfig_path, args, extra_env)
    return _run


def as_json(result):
    return json.loads(result) if isinstance(result, (str, bytes)) else result
