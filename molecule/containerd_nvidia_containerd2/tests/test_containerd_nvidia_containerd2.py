"""Verify gpu_native.fleet.containerd_nvidia on containerd 2.x (config versions 3 and 2), after converge."""
import os
import re
import sys
import tomllib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
from handler_checks import run_through_handler  # noqa: E402  pylint: disable=wrong-import-position


testinfra_hosts = [
    "podman://gn-containerd2-v3-default",
    "podman://gn-containerd2-v3-nvidia",
    "podman://gn-containerd2-v2-package",
]

CRI_PLUGINS = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
BINARY = "/usr/bin/nvidia-container-runtime"
CONFIG = "/etc/containerd/config.toml"
BEFORE = "/var/tmp/gn-config-before.toml"  # written by prepare.yml
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
IMPORT_GLOB = "/etc/containerd/conf.d/*.toml"
# The starting config of each host (prepare.yml).
EXPECTED_VERSION = {
    "gn-containerd2-v3-default": 3,
    "gn-containerd2-v3-nvidia": 3,
    "gn-containerd2-v2-package": 2,
}


def dig(data, *keys):
    for key in keys:
        data = data.get(key, {}) if isinstance(data, dict) else {}
    return data


def assert_subset(expected, actual, where):
    """Every key of ``expected`` is in ``actual`` with the same value (containerd adds its defaults)."""
    for key, value in expected.items():
        assert key in actual, "%s.%s missing" % (where, key)
        if isinstance(value, dict):
            assert_subset(value, actual[key], "%s.%s" % (where, key))
        else:
            assert actual[key] == value, "%s.%s: %r != %r" % (where, key, actual[key], value)


@pytest.fixture(scope="module")
def name(host):
    return host.backend.get_hostname()


@pytest.fixture(scope="module")
def before(host):
    return tomllib.loads(host.file(BEFORE).content_string)


@pytest.fixture(scope="module")
def already_registered(before):
    """The starting config already has the handler as asked: the module must write nothing (issue #13)."""
    version = before.get("version")
    existing = dig(before, "plugins", CRI_PLUGINS.get(version, ""), "containerd", "runtimes", "nvidia")
    return dig(existing, "options").get("BinaryName") == BINARY


@pytest.fixture(scope="module")
def dump(host):
    """containerd's merged view of config.toml and its imports (always written as version 3 by 2.x)."""
    return tomllib.loads(host.check_output("containerd config dump"))


@pytest.fixture(scope="module")
def runtimes(dump):
    return dig(dump, "plugins", CRI_PLUGINS[3], "containerd", "runtimes")


def test_containerd_2_from_unstable_and_nothing_else(host):
    assert re.search(r" v?2\.\d+\.\d+", host.check_output("containerd --version"))
    policy = host.check_output("apt-cache policy containerd")
    assert re.search(r"Installed: 2\.", policy), policy
    # The pin: unstable's runc is newer, but bookworm's stays the candidate.
    runc = host.check_output("apt-cache policy runc")
    assert re.search(r"Candidate: .*deb12", runc), runc
    simulated = host.check_output("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    assert "unstable" not in simulated, simulated


def test_starting_config_is_the_intended_version(name, before):
    assert before.get("version") == EXPECTED_VERSION[name]


def test_containerd_is_active_and_restarted_after_the_change(host, already_registered):
    service = host.service("containerd")
    assert service.is_running and service.is_enabled
    if already_registered:
        assert not host.file(DROP_IN).exists  # nothing written, nothing to restart for
        return
    started = int(host.check_output(
        "date -d \"$(systemctl show containerd -p ActiveEnterTimestamp --value)\" +%s"))
    changed = max(int(host.check_output("stat -c %%Y %s" % CONFIG)),
                  int(host.check_output("stat -c %%Y %s" % DROP_IN)))
    assert started >= changed


def test_dump_shows_the_handler(dump, runtimes):
    assert dump["version"] == 3
    nvidia = runtimes["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == BINARY
    # The handler copies runc's settings (SystemdCgroup among them; unset means false).
    assert nvidia["options"].get("SystemdCgroup", False) == runtimes["runc"]["options"].get("SystemdCgroup", False)


def test_every_pre_existing_runtime_kept(before, dump, runtimes):
    version = before["version"]
    cri_before = dig(before, "plugins", CRI_PLUGINS[version])
    for runtime, entry in dig(cri_before, "containerd", "runtimes").items():
        if runtime == "nvidia":
            continue  # test_dump_shows_the_handler
        assert_subset(entry, runtimes[runtime], "runtimes.%s" % runtime)
    assert runtimes["runc"]["options"].get("BinaryName", "") == ""
    cri = dig(dump, "plugins", CRI_PLUGINS[3])
    assert cri["containerd"]["default_runtime_name"] == dig(cri_before, "containerd").get("default_runtime_name", "runc")
    if version == 3:
        # Settings outside the runtimes table, v3's other CRI plugin included.
        assert cri.get("enable_cdi") == cri_before.get("enable_cdi", cri.get("enable_cdi"))
        images_before = dig(before, "plugins", "io.containerd.cri.v1.images")
        assert_subset(images_before, dig(dump, "plugins", "io.containerd.cri.v1.images"), "images")


def test_existing_nvidia_handler_still_the_same(name, before, runtimes):
    if name != "gn-containerd2-v3-nvidia":
        pytest.skip("only this host started with an nvidia handler")
    existing = dig(before, "plugins", CRI_PLUGINS[3], "containerd", "runtimes", "nvidia")
    assert_subset(existing, runtimes["nvidia"], "runtimes.nvidia")
    assert sorted(runtimes) == ["kata", "nvidia", "runc"]


def test_main_config_keeps_its_version_and_only_gains_the_import(host, before, already_registered):
    after = tomllib.loads(host.file(CONFIG).content_string)
    if already_registered:
        assert after == before  # a no-op run leaves the file alone
        return
    assert IMPORT_GLOB in after["imports"]
    assert [i for i in after["imports"] if i != IMPORT_GLOB] == before.get("imports", [])
    after.pop("imports")
    unchanged = dict(before)
    unchanged.pop("imports", None)
    assert after == unchanged


def test_drop_in_written_in_the_main_config_version(host, before, already_registered):
    drop_in = host.file(DROP_IN)
    if already_registered:
        assert not drop_in.exists
        return
    assert drop_in.is_file and drop_in.user == "root" and drop_in.mode == 0o644
    data = tomllib.loads(drop_in.content_string)
    assert data["version"] == before["version"]
    nvidia = dig(data, "plugins", CRI_PLUGINS[before["version"]], "containerd", "runtimes", "nvidia")
    assert nvidia["options"]["BinaryName"] == BINARY


def test_container_runs_through_the_runtime(host, runtimes):
    """Start a container with the handler's binary and options; the stand-in's log proves the call."""
    options = runtimes["nvidia"]["options"]
    run_through_handler(host, runtimes["nvidia"]["runtime_type"], options, "hello-from-nvidia-handler")
