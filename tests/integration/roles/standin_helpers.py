"""Kubernetes API stand-in helpers for role tests (built on tests/testlib.py)."""
import json
import urllib.error
import urllib.request

from testlib import REPO_ROOT, k8s_standin_server, run_ansible_playbook  # noqa: F401  pylint: disable=unused-import

__all__ = ["REPO_ROOT", "run_ansible_playbook", "start_k8s_standin", "NotFound", "api_get"]


def start_k8s_standin(tmp_path, seed, **options):
    """Start the Kubernetes API stand-in with `seed` objects; return it and its kubeconfig's path.

    `options` go to KubeStandin (e.g. simulate_kubelet=True, outage_trigger=PATH)."""
    (tmp_path / "k8s").mkdir()
    server = k8s_standin_server.KubeStandin(state_dir=str(tmp_path / "k8s"), seed=seed, **options).start()
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
