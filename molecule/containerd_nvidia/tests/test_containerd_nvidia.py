"""Verify gpu_native.fleet.containerd_nvidia on a real containerd (after converge and side_effect)."""
import json
import os
import sys
import tomllib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
from handler_checks import run_through_handler  # noqa: E402  pylint: disable=wrong-import-position


testinfra_hosts = ["podman://gn-containerd_nvidia-node1"]

CRI = "io.containerd.grpc.v1.cri"
BINARY = "/usr/bin/nvidia-container-runtime"
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
    run_through_handler(host, runtimes["nvidia"]["runtime_type"], options, "hello-from-nvidia-handler")


# ---------------------------------------------------------------- fixture configs (issue #13)
# prepare.yml ran the module on a copy of each v2 fixture under /var/tmp/gn-fixtures/<case>;
# here the real containerd 1.6 merges each copy with its drop-in (`config dump`).

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures", "containerd")
CASES = ["gpu-nvidia-default", "gpu-nvidia-default-moved", "only-nvidia-runtime", "only-nvidia-runtime-kept",
         "kind-parents-after", "crun-default", "kata-only", "kubespray", "containerd16-default", "debian12-packaged"]


def _case(host, name):
    result = json.loads(host.file("/var/tmp/gn-fixtures/%s/result.json" % name).content_string)
    with open(os.path.join(FIXTURES, result["case"]["fixture"]), "rb") as handle:
        original = tomllib.load(handle)
    dump = tomllib.loads(host.check_output("containerd --config /var/tmp/gn-fixtures/%s/config.toml config dump" % name))
    return result, original, dump


def _subset(expected, actual, where):
    """Every key the fixture set is in containerd's merged view with the same value (dump adds defaults)."""
    for key, value in expected.items():
        assert key in actual, "%s.%s missing from config dump" % (where, key)
        if isinstance(value, dict):
            _subset(value, actual[key], "%s.%s" % (where, key))
        else:
            assert actual[key] == value, "%s.%s: %r != %r" % (where, key, actual[key], value)


@pytest.mark.parametrize("name", CASES)
def test_fixture_runtimes_default_and_systemd_cgroup_survive(host, name):
    result, original, dump = _case(host, name)
    assert result["first"]["failed"] is False and result["second"]["changed"] is False
    cri_before = original["plugins"][CRI]
    cri_after = dump["plugins"][CRI]
    runtime_name = result["case"].get("runtime_name", "nvidia")
    for runtime, entry in cri_before.get("containerd", {}).get("runtimes", {}).items():
        if runtime == runtime_name:
            continue
        _subset(entry, cri_after["containerd"]["runtimes"][runtime], "runtimes." + runtime)
    default = cri_before.get("containerd", {}).get("default_runtime_name")
    if default:
        assert cri_after["containerd"]["default_runtime_name"] == default
        before_default = cri_before["containerd"]["runtimes"].get(default, {})
        after_default = cri_after["containerd"]["runtimes"][default]
        if "SystemdCgroup" in before_default.get("options", {}):
            assert after_default["options"]["SystemdCgroup"] == before_default["options"]["SystemdCgroup"]


@pytest.mark.parametrize("name", CASES)
def test_fixture_handler_carries_inherited_or_kept_settings(host, name):
    result, original, dump = _case(host, name)
    first = result["first"]
    runtime_name = result["case"].get("runtime_name", "nvidia")
    runtimes_before = original["plugins"].get(CRI, {}).get("containerd", {}).get("runtimes", {})
    handler = dump["plugins"][CRI]["containerd"]["runtimes"][runtime_name]
    if runtime_name in runtimes_before:
        # Kept: every key as it was; BinaryName only as binary_path asked.
        expected = json.loads(json.dumps(runtimes_before[runtime_name]))
        if "binary_path" in result["case"]:
            expected["options"]["BinaryName"] = result["case"]["binary_path"]
        _subset(expected, handler, runtime_name)
        assert first["handler_existed"] is True and first["inherited_from"] is None
        assert first["changed"] is ("binary_path" in result["case"])
    else:
        source = first["inherited_from"]
        assert handler["runtime_type"] == "io.containerd.runc.v2"
        assert handler["options"]["BinaryName"] == BINARY
        if source is None and "systemd_cgroup" in result["case"]:
            assert handler["options"]["SystemdCgroup"] is result["case"]["systemd_cgroup"]
        elif source is None:
            # Nothing to copy (the Debian package's config has no runtimes): not set (the module warns).
            assert handler["options"].get("SystemdCgroup", False) is False
            assert first["handler_existed"] is False and not runtimes_before
        else:
            assert source in runtimes_before
            expected = json.loads(json.dumps(runtimes_before[source]))
            expected.pop("runtime_type", None)
            expected.setdefault("options", {})["BinaryName"] = BINARY
            _subset(expected, handler, runtime_name)


def test_existing_nvidia_default_keeps_systemd_cgroup_and_base_runtime_spec(host):
    """Issue #13's 'done when': the drop-in written for a new binary keeps both."""
    result, _original, dump = _case(host, "gpu-nvidia-default-moved")
    assert result["first"]["changed"] is True
    cri = dump["plugins"][CRI]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["SystemdCgroup"] is True
    assert nvidia["base_runtime_spec"] == "/etc/containerd/base-runtime-spec.json"
    assert nvidia["options"]["BinaryName"] == "/opt/nvidia/bin/nvidia-container-runtime"
    assert result["first"]["handler_changes"] == [
        'options.BinaryName: "/usr/bin/nvidia-container-runtime" -> "/opt/nvidia/bin/nvidia-container-runtime"']


def test_no_runc_gets_the_default_runtimes_systemd_cgroup(host):
    result, _original, dump = _case(host, "only-nvidia-runtime")
    assert result["first"]["inherited_from"] == "nvidia-container-runtime"
    nvidia = dump["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["SystemdCgroup"] is True
    assert nvidia["base_runtime_spec"] == "/etc/containerd/gpu-spec.json"


def test_drop_ins_declare_the_root_version(host):
    for name in CASES:
        path = "/var/tmp/gn-fixtures/%s/conf.d/99-nvidia.toml" % name
        if host.file(path).exists:
            assert tomllib.loads(host.file(path).content_string)["version"] == 2
