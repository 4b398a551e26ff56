"""Verify gpu_native.fleet.containerd_nvidia on a real containerd (after converge and side_effect)."""
import json
import os
import shlex
import tomllib

import pytest

testinfra_hosts = ["podman://gn-containerd_nvidia-node1"]

CRI = "io.containerd.grpc.v1.cri"
BINARY = "/usr/bin/nvidia-container-runtime"
STANDIN_LOG = "/var/log/nvidia-container-runtime-standin.log"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
IMPORT_GLOB = "/etc/containerd/conf.d/*.toml"


@pytest.fixture(scope="module")
def dump(host):
    """containerd's merged view of config.toml and its imports."""
    return tomllib.loads(host.check_output("containerd config dump"))


@pytest.fixture(scope="module")
def runtimes(dump):
    return dump["plugins"][CRI]["containerd"]["runtimes"]


def test_containerd_is_active(host):
    service = host.service("containerd")
    assert service.is_running
    assert service.is_enabled


def test_containerd_restarted_after_last_config_change(host):
    started = int(host.check_output(
        "date -d \"$(systemctl show containerd -p ActiveEnterTimestamp --value)\" +%s"))
    changed = max(int(host.check_output("stat -c %Y /etc/containerd/config.toml")),
                  int(host.check_output("stat -c %%Y %s" % DROP_IN)))
    assert started >= changed


def test_nvidia_handler_registered_with_binary_and_systemd_cgroup(runtimes):
    nvidia = runtimes["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == BINARY
    assert nvidia["options"]["SystemdCgroup"] is True  # inherited from runc


def test_runc_and_kata_untouched(runtimes):
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    assert runtimes["runc"]["options"].get("BinaryName", "") == ""
    assert runtimes["kata"]["runtime_type"] == "io.containerd.kata.v2"
    assert runtimes["kata"]["privileged_without_host_devices"] is True
    assert runtimes["nvidia"] != runtimes["kata"]


def test_default_runtime_still_runc(dump):
    assert dump["plugins"][CRI]["containerd"]["default_runtime_name"] == "runc"


def test_registry_mirrors_kept_including_the_rewrite(dump):
    mirrors = dump["plugins"][CRI]["registry"]["mirrors"]
    assert mirrors["registry.example.invalid"]["endpoint"] == ["https://mirror.example.invalid:5000"]
    # Added by the side_effect rewrite: the drop-in was regenerated, not kept stale.
    assert mirrors["registry2.example.invalid"]["endpoint"] == ["https://mirror2.example.invalid:5000"]


def test_imports_repaired_after_rewrite(host):
    config = host.file("/etc/containerd/config.toml").content_string
    assert tomllib.loads(config)["imports"] == [IMPORT_GLOB]
    assert "# gpu_native.fleet.containerd_runtime: added imports line" in config
    assert "# Kata Containers for untrusted tenants" in config  # comments survive
    assert "registry2.example.invalid" in config
    repair = json.loads(host.file("/var/tmp/gn-containerd-nvidia-repair.json").content_string)
    assert repair["changed"] is True and repair["effective_changed"] is True
    assert "/etc/containerd/config.toml" in repair["files_changed"]


def test_drop_in_file(host):
    drop_in = host.file(DROP_IN)
    assert drop_in.is_file and drop_in.user == "root" and drop_in.mode == 0o644
    data = tomllib.loads(drop_in.content_string)
    assert data["version"] == 2
    assert data["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == BINARY


def test_container_runs_through_the_runtime(host, runtimes):
    """Start a container with the handler's binary and options; the stand-in's log proves the call."""
    options = runtimes["nvidia"]["options"]
    before = int(host.check_output("cat %s 2>/dev/null | wc -l" % STANDIN_LOG))
    argv = ["ctr", "run", "--rm", "--rootfs", "--runtime", runtimes["nvidia"]["runtime_type"],
            "--runc-binary", options["BinaryName"]]
    container_id = "gn-verify-nvidia-%d" % os.getpid()
    if options.get("SystemdCgroup"):
        # Like the CRI plugin with SystemdCgroup = true: runc gets a systemd slice:prefix:name path.
        argv += ["--runc-systemd-cgroup", "--cgroup", "system.slice:gn-verify:%s" % container_id]
    argv += ["/opt/gn-rootfs", container_id, "/bin/busybox", "echo", "hello-from-nvidia-handler"]
    result = host.run(" ".join(shlex.quote(a) for a in argv))
    assert result.rc == 0, result.stderr
    assert "hello-from-nvidia-handler" in result.stdout
    calls = host.check_output("tail -n +%d %s" % (before + 1, STANDIN_LOG)).splitlines()
    assert any("'create'" in line and "'--bundle'" in line for line in calls), calls
    assert any("'start'" in line for line in calls), calls
