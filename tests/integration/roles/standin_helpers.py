"""Reuse the Kubernetes stand-in fixtures' helpers (tests/unit/k8s_standin/conftest.py) from role tests."""
import importlib.util
import json
import os
import urllib.error
import urllib.request

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "unit", "k8s_standin", "conftest.py")
_SPEC = importlib.util.spec_from_file_location("k8s_standin_conftest", _PATH)
_MODULE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MODULE)

k8s_standin_server = _MODULE.k8s_standin_server
run_ansible_playbook = _MODULE.run_ansible_playbook
REPO_ROOT = _MODULE.REPO_ROOT


def start_k8s_standin(tmp_path, seed):
    """Start the Kubernetes API stand-in with `seed` objects; return it and its kubeconfig's path."""
    (tmp_path / "k8s").mkdir()
    server = k8s_standin_server.KubeStandin(state_dir=str(tmp_path / "k8s"), seed=seed).start()
    return server, server.write_kubeconfig(str(tmp_path / "kubeconfig"))


class NotFound(Exception):
    pass


def api_get(server, path):
    """GET an API path from the stand-in; NotFound on 404."""
    request = urllib.request.Request(server.url + path, headers={"Authorization": "Bearer " + server.token})
    try:
        with urllib.request.urlopen(request) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise NotFound(path)
        raise
