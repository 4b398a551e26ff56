"""The stand-in's node history (STATE_DIR/node-history.jsonl): every cordon and uncordon, and the ownership marks."""
import json
import os
import subprocess
import sys
import urllib.request

from testlib import K8S_STANDIN_SERVER_PY as SERVER_PY
from testlib import k8s_standin_server

NODES = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-%d" % i}} for i in (1, 2, 3)]
MARK = "gpu-native.io/cordoned-by"


def call(server, method, path, body=None, content_type="application/merge-patch+json", query=""):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path + query, data=data, method=method,
                                     headers={"Authorization": "Bearer " + server.token, "Content-Type": content_type})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def cordon(server, node, value=True, mark=None, query=""):
    body = {"spec": {"unschedulable": value}}
    if mark is not None or not value:
        body["metadata"] = {"annotations": {MARK: mark}}
    return call(server, "PATCH", "/api/v1/nodes/" + node, body, query=query)


def history(server):
    return k8s_standin_server.read_node_history(server.state_dir)


def test_each_cordon_and_uncordon_is_a_line_with_the_marks(standin_factory):
    server = standin_factory(seed=NODES)
    cordon(server, "gpu-node-1", True, "driver-upgrade")
    call(server, "PATCH", "/api/v1/nodes/gpu-node-1", {"metadata": {"labels": {"a": "b"}}})  # no line
    cordon(server, "gpu-node-1", False)
    cordon(server, "gpu-node-2", True, "driver-upgrade")
    cordon(server, "gpu-node-2", False)
    lines = history(server)
    assert [(e["event"], e["node"]) for e in lines[:3]] == [("created", "gpu-node-%d" % i) for i in (1, 2, 3)]
    assert [(e["node"], e["unschedulable"], e["annotations"]) for e in lines[3:]] == [
        ("gpu-node-1", True, {MARK: "driver-upgrade"}), ("gpu-node-1", False, {}),
        ("gpu-node-2", True, {MARK: "driver-upgrade"}), ("gpu-node-2", False, {})]
    assert all(e["ts"].endswith("Z") for e in lines)
    revisions = [e["revision"] for e in lines]
    assert revisions == sorted(revisions)
    assert k8s_standin_server.max_cordoned(lines) == 1


def test_two_nodes_cordoned_at_once_is_visible(standin_factory):
    server = standin_factory(seed=NODES)
    cordon(server, "gpu-node-1", True, "driver-upgrade")
    cordon(server, "gpu-node-3", True)  # an admin's, no mark
    assert k8s_standin_server.max_cordoned(history(server)) == 2
    assert history(server)[-1]["annotations"] == {}


def test_dry_runs_and_unrelated_writes_add_nothing_deletes_do(standin_factory):
    server = standin_factory(seed=NODES)
    cordon(server, "gpu-node-1", True, "x", query="?dryRun=All")
    call(server, "PATCH", "/api/v1/nodes/gpu-node-1", {"metadata": {"annotations": {"other.io/a": "1"}}})
    assert len(history(server)) == 3
    cordon(server, "gpu-node-2", True)
    call(server, "DELETE", "/api/v1/nodes/gpu-node-2")
    last = history(server)[-1]
    assert (last["event"], last["node"], last["unschedulable"]) == ("deleted", "gpu-node-2", False)
    assert k8s_standin_server.max_cordoned(history(server)) == 1


def test_the_file_is_the_in_memory_history(standin_factory):
    server = standin_factory(seed=NODES)
    cordon(server, "gpu-node-1", True)
    assert history(server) == server.store.node_history
    with open(os.path.join(server.state_dir, "node-history.jsonl")) as handle:
        assert len(handle.read().splitlines()) == 4


def test_reset_starts_a_new_history(tmp_path):
    state = str(tmp_path / "s")
    os.makedirs(state)
    with open(os.path.join(state, "node-history.jsonl"), "w") as handle:
        handle.write(json.dumps({"node": "old", "unschedulable": True}) + "\n")
    with open(os.path.join(state, "state.json"), "w") as handle:
        handle.write('{"resourceVersion": 1, "objects": []}')
    started = subprocess.run([sys.executable, SERVER_PY, "--daemon", "--port", "0", "--reset", "--state-dir", state],
                             capture_output=True, text=True, check=True, timeout=60)
    try:
        assert json.loads(started.stdout)["pid"]
        assert k8s_standin_server.read_node_history(state) == []
    finally:
        subprocess.run([sys.executable, SERVER_PY, "stop", "--state-dir", state], check=True, timeout=60)
