"""The background kubelet stand-in of `kube_cluster.py up --kubelet-node` (what Molecule's onboard scenario and
`make demo` run beside the real control plane): it advertises each node's resources, drives the pods that the
real DaemonSet controller and scheduler put on its nodes to Running and Ready, stops with `down`, exits by itself
when the API goes away, and refuses bad input before anything starts."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import kube_cluster as control_plane

COMMAND = [sys.executable, control_plane.__file__]
TAINT = {"key": "gpu-native.io/unvalidated", "effect": "NoSchedule"}


def seed_file(tmp_path, nodes, daemonset=False):
    items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dp"}}]
    items += [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"taints": [TAINT]}}
              for name in nodes]
    if daemonset:
        labels = {"app": "device-plugin"}
        items.append({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "dp", "namespace": "dp"},
                      "spec": {"selector": {"matchLabels": labels}, "template": {
                          "metadata": {"labels": labels},
                          "spec": {"tolerations": [dict(TAINT, operator="Exists")],
                                   "containers": [{"name": "c", "image": "registry.invalid/plugin:1"}]}}}})
    path = tmp_path / "seed.yml"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def up(directory, *args, timeout=300):
    return subprocess.run(COMMAND + ["up", "--dir", directory] + list(args), capture_output=True, text=True,
                          timeout=timeout, check=False)


def down(directory):
    return subprocess.run(COMMAND + ["down", "--dir", directory], capture_output=True, text=True, timeout=120,
                          check=False)


def alive(pid):
    return control_plane._alive(pid)  # pylint: disable=protected-access


def wait_until(what, probe, timeout=60):
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %d s waiting for %s" % (timeout, what))
        time.sleep(0.3)


def kubelet_processes(directory):
    """Pids of kubelet stand-in processes started for `directory` (by their command line)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    argv = handle.read().split(b"\0")
            except OSError:
                continue
            if b"kubelet" in argv and directory.encode() in argv and alive(int(entry)):
                found.append(int(entry))
    return found


def test_up_runs_a_kubelet_standin_that_advertises_drives_daemonset_pods_and_stops_on_down(tmp_path):
    directory = str(tmp_path / "plane")
    started = up(directory, "--seed", seed_file(tmp_path, ["gpu-a", "gpu-mig"], daemonset=True),
                 "--kubelet-node", "gpu-a:nvidia.com/gpu=7",
                 "--kubelet-node", "gpu-mig:nvidia.com/mig-1g.20gb=4")
    try:
        assert started.returncode == 0, started.stderr
        state = json.loads((tmp_path / "plane" / "state.json").read_text())
        pid = state["kubelet-standin"]["pid"]
        assert alive(pid) and "kubelet stand-in (pid %d)" % pid in started.stderr
        plane = control_plane.ControlPlane.attach(directory)
        gpu_a = plane.api("GET", "/api/v1/nodes/gpu-a")
        assert gpu_a["status"]["allocatable"]["nvidia.com/gpu"] == "7"
        assert gpu_a["status"]["allocatable"]["pods"] == "110"
        # `up` returned once the node lifecycle controller had lifted the not-ready taint
        assert [t["key"] for t in gpu_a["spec"]["taints"]] == ["gpu-native.io/unvalidated"]
        mig = plane.api("GET", "/api/v1/nodes/gpu-mig")["status"]["allocatable"]
        assert mig["nvidia.com/mig-1g.20gb"] == "4" and "nvidia.com/gpu" not in mig  # mixed: no whole GPU

        def daemon_pods_ready():
            pods = plane.api("GET", "/api/v1/namespaces/dp/pods")["items"]
            ready = {p["spec"].get("nodeName") for p in pods if p["status"].get("phase") == "Running" and any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))}
            return ready == {"gpu-a", "gpu-mig"} and all(
                p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet" for p in pods)
        wait_until("the DaemonSet's pods to run on both nodes", daemon_pods_ready)
        wait_until("the DaemonSet to count them ready", lambda: plane.api(
            "GET", "/apis/apps/v1/namespaces/dp/daemonsets/dp")["status"].get("numberReady") == 2)
    finally:
        stopped = down(directory)
    assert "stopped the kubelet stand-in" in stopped.stderr, stopped.stderr
    wait_until("the kubelet stand-in to exit", lambda: not alive(pid), timeout=15)
    assert not os.path.exists(directory)


def test_the_kubelet_standin_exits_by_itself_when_the_api_goes_away(tmp_path):
    directory = str(tmp_path / "plane")
    started = up(directory, "--seed", seed_file(tmp_path, ["gpu-b"]), "--kubelet-node", "gpu-b")
    try:
        assert started.returncode == 0, started.stderr
        state = json.loads((tmp_path / "plane" / "state.json").read_text())
        pid = state["kubelet-standin"]["pid"]
        os.killpg(state["pids"]["kube-apiserver"], signal.SIGKILL)  # the API goes; state.json stays
        wait_until("the kubelet stand-in to exit", lambda: not alive(pid),
                   timeout=control_plane.API_GONE_SECONDS + 20)
        with open(os.path.join(directory, control_plane.KUBELET_LOG), encoding="utf-8") as handle:
            assert "has not answered for %d s" % control_plane.API_GONE_SECONDS in handle.read()
    finally:
        down(directory)


@pytest.mark.parametrize("spec, message", [
    ("GPU_Node", "is not a node name"),
    ("gpu-1:nvidia.com/gpu", "is not RESOURCE=QUANTITY"),
    ("gpu-1:nvidia.com/gpu=eight", "is not a quantity for nvidia.com/gpu"),
    ("gpu-1:nvidia.com/gpu=8,nvidia.com/gpu=4", "nvidia.com/gpu is named twice"),
    ("gpu-1:bad name=1", "is not RESOURCE=QUANTITY"),
])
def test_a_malformed_kubelet_node_is_refused_before_anything_starts(tmp_path, spec, message):
    directory = str(tmp_path / "plane")
    refused = up(directory, "--kubelet-node", spec, timeout=60)
    assert refused.returncode == 2
    assert message in refused.stderr and "Fix:" in refused.stderr, refused.stderr
    assert not os.path.exists(directory)  # no control plane, no kubelet stand-in


def test_parse_kubelet_node_reads_the_resources():
    assert control_plane.parse_kubelet_node("gpu-1") == ("gpu-1", {})
    assert control_plane.parse_kubelet_node("gpu-1:nvidia.com/gpu=8,memory=512Gi") == (
        "gpu-1", {"nvidia.com/gpu": "8", "memory": "512Gi"})
    # a MIG resource replaces the default whole GPUs (None: not advertised)
    assert control_plane.parse_kubelet_node("m:nvidia.com/mig-1g.20gb=4") == (
        "m", {"nvidia.com/mig-1g.20gb": "4", "nvidia.com/gpu": None})


def test_a_kubelet_node_that_is_not_in_the_api_fails_up_and_leaves_nothing_running(tmp_path):
    directory = str(tmp_path / "plane")
    refused = up(directory, "--seed", seed_file(tmp_path, ["gpu-c"]), "--kubelet-node", "gpu-c",
                 "--kubelet-node", "ghost-node")
    assert refused.returncode == 1
    assert "no Node ghost-node in the API. Fix:" in refused.stderr, refused.stderr
    assert not os.path.exists(directory)  # `up` stopped the control plane it had started
    assert kubelet_processes(directory) == []
