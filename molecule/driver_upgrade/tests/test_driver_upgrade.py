"""Verify the rolling upgrades: packages moved and held, at most one node out at a time, the killed run finished,
the node that failed its gates kept cordoned until repaired, the upgraded nodes left alone by a later run; for the
driver, the old modules unloaded and the new ones loaded, and a node whose modules could not unload kept cordoned
until its reboot."""
testinfra_hosts = ["podman://gn-upgrade-1", "podman://gn-upgrade-2", "podman://gn-upgrade-3"]

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
from kubernetes import client, config  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))
from kube_cluster import NodeWrites  # noqa: E402  # pylint: disable=wrong-import-position

# the scenario's real control plane (prepare.yml: tests/kube_cluster.py up); read as admin, not as the job
KUBE_DIR = os.path.join(REPO, ".cache", "kube", "driver_upgrade")
EPHEMERAL = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
NODES = ["gpu-up-1", "gpu-up-2", "gpu-up-3"]
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]
DRIVER_PACKAGES = ["nvidia-driver", "nvidia-kernel-open-dkms", "firmware-nvidia-gsp", "nvidia-smi", "libcuda1"]


@pytest.fixture(scope="module")
def core():
    configuration = client.Configuration()
    config.load_kube_config(config_file=os.path.join(KUBE_DIR, "admin.kubeconfig"), client_configuration=configuration)
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
    """Each node's cordons and marks, in order, from the API server's audit log of Node writes (all three runs)."""
    return NodeWrites.from_audit_log(KUBE_DIR, NODES)


def test_packages_at_the_new_version_and_held(host):
    for package in PACKAGES:
        assert host.package(package).version == "1.18.1-1"
    held = host.check_output("apt-mark showhold").split()
    assert sorted(set(PACKAGES) & set(held)) == sorted(PACKAGES)


def test_never_more_than_one_node_cordoned_at_once():
    record = history()
    assert {entry["node"] for entry in record.entries if entry["unschedulable"]} == set(NODES)
    assert record.max_cordoned() == 1


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


def test_driver_packages_at_the_new_version_and_held(host):
    for package in DRIVER_PACKAGES:
        assert host.package(package).version == "570.172.08-1"
    held = host.check_output("apt-mark showhold").split()
    assert sorted(set(DRIVER_PACKAGES) & set(held)) == sorted(DRIVER_PACKAGES)
    # The old module source went with the old package; the proprietary flavour was never installed.
    assert not host.file("/usr/src/nvidia-current-open-570.148.08").exists
    assert not host.package("nvidia-kernel-dkms").is_installed


def test_the_new_driver_is_loaded(host):
    assert host.file("/sys/module/nvidia/version").content_string.strip() == "570.172.08"
    for module in ("nvidia_uvm", "nvidia_modeset"):
        assert host.file("/sys/module/" + module).is_directory


def test_the_driver_run_swapped_the_modules_without_a_reboot():
    log = ephemeral("upgrade-driver.log")
    assert log.startswith("rc=2\n")
    rows = summary(log)
    for name in ("gpu-up-1", "gpu-up-2"):
        assert rows[name].split()[1:6] == ["570.148.08-1", "->", "570.172.08", "cordoned", "-"], rows[name]
        assert "no (modules reloaded)" in rows[name] and " upgraded " in rows[name]


def test_a_node_whose_old_modules_cannot_unload_stays_cordoned_without_upgrade_reboot():
    row = summary(ephemeral("upgrade-driver.log"))["gpu-up-3"]
    assert row.split()[1:6] == ["570.148.08-1", "->", "570.172.08", "cordoned", "-"], row
    assert "needed (old modules in use)" in row and " failed " in row
    node = json.loads(ephemeral("gpu-up-3-after-driver.json"))
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "failed"
    assert node["metadata"]["annotations"]["gpu-native.io/cordoned-by"] == "driver_upgrade"
    reason = node["metadata"]["annotations"]["gpu-native.io/preflight-reasons"]
    assert "Module nvidia is in use" in reason and "upgrade_reboot is never" in reason, reason


def test_after_its_reboot_the_rerun_finished_the_held_node_and_left_the_others_alone():
    log = ephemeral("upgrade-driver-after-reboot.log")
    assert log.startswith("rc=0\n"), log[-3000:]
    rows = summary(log)
    assert "already at 570.172.08-1" in rows["gpu-up-1"] and "already at 570.172.08-1" in rows["gpu-up-2"]
    assert rows["gpu-up-3"].split()[4] == "resumed" and "finished" in rows["gpu-up-3"], rows["gpu-up-3"]


def test_the_readiness_timer_was_stopped_while_the_modules_were_swapped(host):
    # Every call of the modprobe stand-in after prepare (the driver runs: unload, load; gpu-up-3's refused unload
    # and, after its reboot, the load) recorded the readiness timer's state (molecule/driver_upgrade/prepare.yml).
    calls = [json.loads(line) for line in host.file("/var/log/gpu-native-test/modprobe-calls.jsonl").content_string.splitlines()]
    # Each node's driver run unloaded (or, on gpu-up-3, tried to unload) the old modules.
    assert any("--remove" in call["argv"] or "-r" in call["argv"] for call in calls), calls
    assert [call["units"]["gpu-native-readiness.timer"] for call in calls] == ["inactive"] * len(calls), calls


def test_the_readiness_timer_runs_again_after_the_upgrades(host):
    # Also on gpu-up-1, whose toolkit run was killed while its GPU clients were paused (the rerun's pause finds the
    # mark the killed run left in /run/gpu-native-fleet and starts the timer on resume), and on gpu-up-3 (failed, given back).
    assert host.service("gpu-native-readiness.timer").is_running
    assert not host.file("/run/gpu-native-fleet/gpu-native-readiness.timer.paused").exists
