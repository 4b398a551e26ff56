"""Verify gpu_native.fleet.mig: the node's MIG state (stand-in GPU) and the real Kubernetes API (read as admin, not as
the job) after converge (layout balanced applied) and side_effect (layout all-1g.10gb refused by GPU 1)."""
testinfra_hosts = ["podman://gn-mig-node1"]

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import urllib.parse  # noqa: E402
from datetime import datetime  # noqa: E402

import pytest  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))
from kube_cluster import ControlPlane  # noqa: E402  # pylint: disable=wrong-import-position

# the scenario's control plane (prepare.yml: tests/kube_cluster.py up) and what the scenario kept there
KUBE_DIR = os.path.join(REPO, ".cache", "kube", "mig")
NODE = "gpu-node-1"
MUTATING = ("-cgi", "-dci", "-dgi", "-mig", "-r")


@pytest.fixture(scope="module")
def api():
    return ControlPlane.attach(KUBE_DIR)


def _kept(name):
    with open(os.path.join(KUBE_DIR, name)) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def node(api):
    return api.api("GET", "/api/v1/nodes/" + NODE)


@pytest.fixture(scope="module")
def pods(api):
    return api.api("GET", "/api/v1/pods")["items"]


@pytest.fixture(scope="module")
def converged():
    return _kept("node-after-converge.json")


@pytest.fixture(scope="module")
def failure():
    return _kept("side-effect-failure.json")


@pytest.fixture(scope="module")
def events(api):
    """The role's Events about the node (a real API server keeps those of a cluster-scoped object in `default`; the
    node lifecycle controller records its own, RegisteredNode..., which are left out)."""
    selector = urllib.parse.quote("involvedObject.kind=Node,involvedObject.name=" + NODE)
    items = api.api("GET", "/api/v1/namespaces/default/events?fieldSelector=" + selector)["items"]
    return sorted((e for e in items if e.get("reportingComponent") == "gpu_native.fleet.mig"),
                  key=lambda e: e["eventTime"])


@pytest.fixture(scope="module")
def calls(host):
    lines = host.file("/var/lib/nvidia-smi-standin/calls.log").content_string.splitlines()
    return [json.loads(line) for line in lines]


def _time(event):
    return datetime.strptime(event["eventTime"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def _mutating(calls):
    return [c for c in calls if any(a in MUTATING for a in c["argv"])]


def test_converge_applied_balanced_and_handed_the_node_back(converged):
    labels = converged["metadata"]["labels"]
    assert labels["nvidia.com/mig.config"] == "balanced"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert not converged["spec"].get("unschedulable")
    assert "gpu-native.io/mig.config.failure-reason" not in converged["metadata"].get("annotations", {})
    assert "gpu-native.io/cordoned-by" not in converged["metadata"].get("annotations", {})  # the mark went with the cordon


def test_the_drain_evicted_the_workload_but_not_the_daemonset_pod(pods):
    before = dict((p["namespace"], p) for p in _kept("pods-before-converge.json")
                  if p["namespace"] in ("ml", "kube-system"))
    now = dict((p["metadata"]["uid"], p) for p in pods)
    assert before["ml"]["uid"] not in now                       # evicted by converge's drain
    assert before["kube-system"]["uid"] in now                  # a DaemonSet pod: left on the node
    trainers = [p for p in pods if p["metadata"]["namespace"] == "ml"]
    # The ReplicaSet's replacement: evicted again by the side effect's drain, it waits while the node is cordoned.
    assert len(trainers) == 1 and not trainers[0]["spec"].get("nodeName"), trainers
    assert trainers[0]["status"]["phase"] == "Pending"


def _rfc3339(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").timestamp()


def test_cordon_pending_and_pause_came_before_the_first_change_and_restore_and_success_after_the_last(
        events, calls, failure):
    first_run = _mutating(calls[:failure["calls_before"]])
    reasons = [e["reason"] for e in events]
    assert reasons[:5] == ["MigConfigCordoned", "MigConfigPending", "MigGpuClientsPaused", "MigGpuClientsRestored",
                           "MigConfigSuccess"]
    cordoned, pending, paused, restored, success = events[:5]
    assert first_run, "converge changed nothing on the GPUs"
    assert _time(cordoned) < _time(pending) < _time(paused) < first_run[0]["time"]
    assert first_run[-1]["time"] < _time(restored) < _time(success)
    assert "nvidia.com/gpu.deploy.device-plugin, nvidia.com/gpu.deploy.gpu-feature-discovery" in paused["message"]
    assert "dcgm-exporter" not in paused["message"]  # "false": left alone


def test_the_gpu_operator_pods_left_and_came_back(node, pods, calls, failure):
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"           # restored, also after the failure
    assert labels["nvidia.com/gpu.deploy.gpu-feature-discovery"] == "true"
    assert labels["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"          # never touched
    pods = [p for p in pods if p["metadata"]["namespace"] == "gpu-operator"]
    assert sorted(p["metadata"]["labels"]["app"] for p in pods) == ["gpu-feature-discovery", "nvidia-device-plugin-daemonset"]
    last_change = _mutating(calls)[-1]["time"]
    for pod in pods:  # created again after the last GPU change (the side effect's refused one)
        assert pod["spec"]["nodeName"] == "gpu-node-1" and pod["status"]["phase"] == "Running"
        assert _rfc3339(pod["metadata"]["creationTimestamp"]) >= int(last_change)


def test_the_host_gpu_client_was_stopped_for_each_change_and_started_again(host, calls, failure):
    starts = [float(t) for t in host.file("/var/log/nvidia-dcgm-standin.starts").content_string.split()]
    assert len(starts) == 3  # prepare, after converge, after the side effect's failure (idempotence: untouched)
    first_run = _mutating(calls[:failure["calls_before"]])
    assert starts[0] < first_run[0]["time"] and first_run[-1]["time"] < starts[1]
    assert host.service("nvidia-dcgm").is_running
    assert [c["argv"] for c in first_run] == [
        ["-i", "0", "-mig", "1"], ["-i", "1", "-mig", "1"],
        ["mig", "-i", "0", "-cgi", "5:0,14:4,19:6", "-C"], ["mig", "-i", "1", "-cgi", "5:0,14:4,19:6", "-C"]]


def test_the_refused_apply_left_the_node_cordoned_with_state_failed(node, events, failure):
    assert node["spec"]["unschedulable"] is True
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/mig.config.state"] == "failed"
    assert labels["nvidia.com/mig.config"] == "balanced"  # the last layout that was applied
    reason = node["metadata"]["annotations"]["gpu-native.io/mig.config.failure-reason"]
    assert "mig -i 1 -dci" in reason and "In use by another client" in reason
    assert node["metadata"]["annotations"]["gpu-native.io/cordoned-by"] == "mig"  # a re-run resumes and hands it back
    assert [e["reason"] for e in events[5:]] == ["MigConfigCordoned", "MigConfigPending", "MigGpuClientsPaused",
                                                 "MigConfigFailed", "MigGpuClientsRestored"]
    assert events[-2]["type"] == "Warning"
    assert "MIG layout all-1g.10gb was not applied" in failure["msg"]


def test_the_gpus_hold_what_was_applied_before_the_refusal(host):
    listing = host.check_output("nvidia-smi mig -lgi")
    rows = [line.split() for line in listing.splitlines() if "MIG " in line]
    # GPU 0 was emptied before GPU 1 refused; GPU 1 keeps balanced at its planned starts
    assert sorted((r[1], r[3], r[-2]) for r in rows) == [("1", "1g.10gb", "6:1"), ("1", "2g.20gb", "4:2"), ("1", "4g.40gb", "0:4")]


def test_mig_mode_as_the_driver_reports_it(host):
    xml = host.check_output("nvidia-smi -q -x")
    assert xml.count("<current_mig>Enabled</current_mig>") == 2
    assert xml.count("<current_mig>Disabled</current_mig>") == 6
