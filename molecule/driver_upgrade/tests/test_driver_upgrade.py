"""Verify the rolling upgrade: packages moved and held, at most one node out at a time, the killed run finished,
the node that failed its gates kept cordoned until repaired, the upgraded nodes left alone by a later run."""
testinfra_hosts = ["podman://gn-upgrade-1", "podman://gn-upgrade-2", "podman://gn-upgrade-3"]

import json  # noqa: E402
import os  # noqa: E402

import pytest  # noqa: E402
from kubernetes import client, config  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
STANDIN_DIR = os.path.join(REPO, ".cache", "k8s-standin", "driver_upgrade")
EPHEMERAL = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
NODES = ["gpu-up-1", "gpu-up-2", "gpu-up-3"]
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]


@pytest.fixture(scope="module")
def core():
    configuration = client.Configuration()
    config.load_kube_config(config_file=os.path.join(STANDIN_DIR, "kubeconfig"), client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))


def ephemeral(name):
    with open(os.path.join(EPHEMERAL, name)) as handle:
        return handle.read()


def summary(log):
    """The summary table's rows of a run's output, by node."""
    rows = {}
    for line in log.splitlines():
        line = line.strip()
        if line.startswith("- "):
            line = line[2:]
        line = line.strip("\"',")
        cells = line.split()
        if cells and cells[0] in NODES and " -> " in line:
            rows[cells[0]] = line
    return rows


def history():
    with open(os.path.join(STANDIN_DIR, "node-history.jsonl")) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_packages_at_the_new_version_and_held(host):
    for package in PACKAGES:
        assert host.package(package).version == "1.18.1-1"
    held = host.check_output("apt-mark showhold").split()
    assert sorted(set(PACKAGES) & set(held)) == sorted(PACKAGES)


def test_never_more_than_one_node_cordoned_at_once():
    cordoned, most, seen = set(), 0, set()
    for entry in history():
        (cordoned.add if entry["unschedulable"] else cordoned.discard)(entry["node"])
        if entry["unschedulable"]:
            seen.add(entry["node"])
        most = max(most, len(cordoned))
    assert seen == set(NODES)
    assert most == 1


def test_the_killed_run_stopped_after_cordoning_the_first_node():
    killed = json.loads(ephemeral("upgrade-killed.json"))
    assert killed["killed"] is True and killed["rc"] == -9
    assert killed["seen"]["annotations"]["gpu-native.io/cordoned-by"] == "toolkit_upgrade"


def test_the_rerun_finished_the_killed_node_and_failed_the_third():
    log = ephemeral("upgrade-rerun.log")
    assert log.startswith("rc=2\n")
    rows = summary(log)
    assert rows["gpu-up-1"].split()[1:5] == ["1.17.8-1", "->", "1.18.1-1", "resumed"]
    # The killed run may or may not have evicted trainer-1 before it died; either way it is gone (see below).
    assert rows["gpu-up-1"].split()[5] in ("ml/trainer-1", "-")
    assert rows["gpu-up-1"].split()[6] == "upgraded"
    assert rows["gpu-up-2"].split()[4:7] == ["cordoned", "ml/trainer-2", "upgraded"]
    assert rows["gpu-up-3"].split()[4:7] == ["cordoned", "ml/trainer-3", "failed"]
    assert "hardware" in rows["gpu-up-3"]


def test_a_node_failing_its_gates_after_the_upgrade_stayed_cordoned():
    node = json.loads(ephemeral("gpu-up-3-after-rerun.json"))
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "failed"
    assert node["metadata"]["annotations"]["gpu-native.io/cordoned-by"] == "toolkit_upgrade"
    assert "memory on GPU 3" in node["metadata"]["annotations"]["gpu-native.io/preflight-reasons"]
    # Its device plugin DaemonSet was given back for the gates.
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_the_third_run_left_the_upgraded_nodes_alone_and_finished_the_repaired_one():
    log = ephemeral("upgrade-third.log")
    assert log.startswith("rc=0\n")
    rows = summary(log)
    assert "already at 1.18.1-1" in rows["gpu-up-1"] and "already at 1.18.1-1" in rows["gpu-up-2"]
    assert rows["gpu-up-3"].split()[4] == "resumed" and "finished" in rows["gpu-up-3"]


def test_every_node_joined_without_our_mark_with_its_device_plugin_back(core):
    for name in NODES:
        node = core.read_node(name)
        assert not node.spec.unschedulable
        assert node.metadata.labels["gpu-native.io/preflight"] == "passed"
        assert node.metadata.labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
        assert not any(key.startswith("gpu-native.io/cordoned") or key == "gpu-native.io/run-id"
                       for key in node.metadata.annotations or {})
        pods = core.list_namespaced_pod("gpu-operator", field_selector="spec.nodeName=" + name).items
        assert [pod.status.phase for pod in pods] == ["Running"]


def test_the_gpu_pods_were_evicted(core):
    assert core.list_namespaced_pod("ml").items == []
