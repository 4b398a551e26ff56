"""Verify gpu_native.fleet.container_toolkit: pin, hold, signed-by, refusals and the asked-for upgrade."""
import json
import re

import pytest
import yaml

testinfra_hosts = ["podman://gn-container_toolkit-node1"]

PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]
OLD = sorted("%s=1.17.8-1" % p for p in PACKAGES)  # dpkg-query lists by name
NEW = sorted("%s=1.18.1-1" % p for p in PACKAGES)


@pytest.fixture(scope="module")
def steps(host):
    return json.loads(host.file("/var/tmp/gn-container-toolkit-steps.json").content_string)


def test_apt_get_upgrade_kept_the_pin(steps):
    assert sorted(steps["apt_upgrade"]["versions"]) == OLD


def test_unknown_version_refused_early(steps):
    step = steps["bad_version"]
    assert "container_toolkit_version=1.99.0-1 is not offered" in step["refusal"]
    assert "1.17.8-1" in step["refusal"] and "1.18.1-1" in step["refusal"]  # lists what is available
    assert sorted(step["versions"]) == OLD


def test_wrong_key_refused(steps):
    step = steps["wrong_key"]
    assert step["refusal"].startswith("apt refused the NVIDIA Container Toolkit repository"), step["refusal"]
    assert re.search(r"NO_PUBKEY|not signed|couldn't be verified", step["refusal"]), step["refusal"]
    assert sorted(step["versions"]) == OLD


def test_tampered_inrelease_refused(steps):
    step = steps["tampered_inrelease"]
    assert step["refusal"].startswith("apt refused the NVIDIA Container Toolkit repository"), step["refusal"]
    assert re.search(r"BADSIG|signatures were invalid|not signed", step["refusal"]), step["refusal"]
    assert sorted(step["versions"]) == OLD


def test_plain_rerun_kept_the_pin(steps):
    assert sorted(steps["plain_rerun"]["versions"]) == OLD


def test_asked_upgrade_moved_all_four(steps):
    assert sorted(steps["asked_upgrade"]["versions"]) == NEW


def test_unasked_downgrade_refused(steps):
    step = steps["unasked_downgrade"]
    assert "is newer than container_toolkit_version=1.17.8-1" in step["refusal"]
    assert "container_toolkit_allow_downgrade=true" in step["refusal"]
    assert sorted(step["versions"]) == NEW


def test_final_state_pinned_and_held(host):
    held = set(host.check_output("apt-mark showhold").split())
    for package in PACKAGES:
        assert host.check_output("dpkg-query -W -f='${Version}' %s" % package) == "1.18.1-1"
        assert package in held
    assert host.check_output("nvidia-ctk --version").startswith("NVIDIA Container Toolkit CLI version 1.18.1")


def test_source_is_signed_by_the_right_key(host):
    source = host.file("/etc/apt/sources.list.d/gpu-native-nvidia-container-toolkit.list").content_string
    assert "[signed-by=/etc/apt/keyrings/gpu-native-nvidia-container-toolkit.asc]" in source
    assert "/srv/gpu-native-apt/stable/" in source  # the tampered copy is gone again
    keyring = host.file("/etc/apt/keyrings/gpu-native-nvidia-container-toolkit.asc").content_string
    assert keyring == host.file("/srv/gpu-native-apt/keys/repo.asc").content_string
    assert not host.file("/etc/apt/trusted.gpg").exists


def test_toolkit_config_closes_gpu_access_outside_the_device_plugin(host):
    # The toolkit's own config file, as the package left it after the upgrade to 1.18.1 plus the role's two
    # top-level keys (issue 26): no GPU from NVIDIA_VISIBLE_DEVICES for unprivileged containers, the device
    # plugin's volume mounts instead.  Read as TOML, so a key written inside a table would not count.
    import tomllib  # the controller's Python (3.11+) runs testinfra
    text = host.file("/etc/nvidia-container-runtime/config.toml").content_string
    config = tomllib.loads(text)
    assert config["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False, text
    assert config["accept-nvidia-visible-devices-as-volume-mounts"] is True, text
    assert config["nvidia-container-runtime"]["mode"] == "auto"  # the package's tables are still there
    assert text.count("accept-nvidia-visible-devices-envvar-when-unprivileged") == 1, text


def test_unattended_upgrades_blacklist(host):
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    for package in PACKAGES:
        assert '"%s";' % package in dump


def test_toolkit_117_got_a_one_time_cdi_spec(steps):
    # 1.17.x has no nvidia-cdi-refresh: the role generated /etc/cdi/nvidia.yaml itself.
    assert steps["plain_rerun"]["etc_cdi_spec"] is True


def test_toolkit_118_keeps_the_cdi_spec_with_nvidia_cdi_refresh(host):
    # After the upgrade to 1.18.1 the toolkit's nvidia-cdi-refresh units keep the spec in /var/run/cdi.
    spec_file = host.file("/var/run/cdi/nvidia.yaml")
    spec = yaml.safe_load(spec_file.content_string)
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]
    assert spec_file.mode == 0o644
    assert not host.file("/etc/cdi/nvidia.yaml").exists  # the one-time spec is gone: no device defined twice
    assert host.service("nvidia-cdi-refresh.path").is_enabled
    assert host.service("nvidia-cdi-refresh.service").is_enabled
    assert host.check_output("systemctl is-active nvidia-cdi-refresh.path") == "active"


def test_standin_cli_fails_like_the_real_one_without_a_driver(host):
    result = host.run("nvidia-container-cli info")
    assert result.rc == 1
    assert "load library failed: libnvidia-ml.so.1" in result.stderr
    assert "cli-version: 1.18.1" in host.check_output("nvidia-container-cli --version")
