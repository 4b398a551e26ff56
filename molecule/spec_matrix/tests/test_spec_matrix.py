"""Verify gpu_native.fleet.spec_matrix: the saved module results against the host's real state."""
import json
import re

import pytest

testinfra_hosts = ["podman://gn-spec_matrix-node1"]

REPORTS = "/var/lib/gn-spec-matrix"

# What the violating matrix (converge.yml) gets wrong on a Debian 12 host without a GPU.
VIOLATED = {
    "os.codename", "driver.version", "containerd.version", "kernel_modules.nvidia", "sysctl.kernel.ostype",
    "sysctl.vm.no_such_key", "packages.nvidia-container-toolkit", "services.containerd", "gpu.count",
    "gpu.mig_mode",
}
SATISFIED = {"os.id", "kernel_modules.nouveau", "packages.containerd"}


def load(host, name):
    return json.loads(host.file("%s/%s" % (REPORTS, name)).content_string)


def keyed(result):
    return dict(("%s.%s" % (r["check"], r["name"]), r) for r in result["results"])


@pytest.fixture(scope="module")
def compliant(host):
    return load(host, "compliant.json")


@pytest.fixture(scope="module")
def violating(host):
    return load(host, "violating.json")


def test_host_has_no_gpu_driver(host):
    """The expectations below assume a GPU-less host."""
    assert not host.file("/proc/driver/nvidia/version").exists
    assert not host.file("/sys/module/nvidia").exists
    assert not host.file("/sys/module/nouveau").exists


def test_compliant_run_passes_every_item(compliant):
    assert compliant.get("failed", False) is False
    assert compliant["changed"] is False
    assert compliant["compliant"] is True
    assert compliant["profile"] == "debian-test-host" and compliant["profile_selected_by"] == "default"
    assert compliant["summary"] == {"pass": 14, "fail": 0, "unknown": 0, "total": 14}
    assert [r["status"] for r in compliant["results"]] == ["pass"] * 14


def test_compliant_actuals_are_the_real_state(host, compliant):
    items = keyed(compliant)
    os_release = dict(line.split("=", 1) for line in host.file("/etc/os-release").content_string.splitlines()
                      if "=" in line)
    assert items["os.version"]["actual"] == os_release["VERSION_ID"].strip('"')
    assert items["os.codename"]["actual"] == os_release["VERSION_CODENAME"]
    assert items["kernel.release"]["actual"] == host.check_output("uname -r")
    version_line = host.check_output("containerd --version").split()
    assert items["containerd.version"]["actual"] == version_line[2]
    assert items["packages.containerd"]["actual"] == host.check_output("dpkg-query -W -f='${Version}' containerd")
    assert items["packages.nvidia-container-toolkit"]["actual"] is None
    assert items["sysctl.vm.max_map_count"]["actual"] == host.file("/proc/sys/vm/max_map_count").content_string.strip()
    assert items["sysctl.kernel.ostype"]["actual"] == "Linux"
    assert items["kernel_modules.nvidia"]["actual"] == "not loaded"
    assert items["services.nvidia-persistenced"]["actual"] == "absent"
    service = host.service("containerd")
    assert service.is_running and service.is_enabled
    assert items["services.containerd"]["actual"] == "running, enabled"
    facts = compliant["facts"]
    assert facts["package_manager"] == "dpkg"
    assert facts["commands"][0] == "containerd --version"
    assert facts["commands"][1].startswith("systemctl show --property=")
    assert len(facts["commands"]) == 2


def test_violating_run_fails_listing_exactly_the_violations(violating):
    assert violating["failed"] is True and violating["compliant"] is False
    message = violating["msg"]
    assert "\n" not in message
    assert message.startswith("spec drift against profile debian-test-host: 10 item(s) not compliant: ")
    listed = set(re.findall(r"(?:compliant: |; )([a-z_]+\.[A-Za-z0-9_.-]+): expected ", message))
    assert listed == VIOLATED
    items = keyed(violating)
    assert set(k for k, r in items.items() if r["status"] == "fail") == VIOLATED
    assert set(k for k, r in items.items() if r["status"] == "pass") == SATISFIED
    assert violating["summary"] == {"pass": 3, "fail": 10, "unknown": 0, "total": 13}


def test_violations_carry_actual_values_and_reasons(host, violating):
    items = keyed(violating)
    assert "containerd.version: expected >=2.0, got %s" % host.check_output("containerd --version").split()[2] \
        in violating["msg"]
    assert items["os.codename"]["actual"] == "bookworm"
    assert items["services.containerd"]["actual"] == "running, enabled"
    assert items["sysctl.kernel.ostype"]["actual"] == "Linux"
    for key in ("driver.version", "gpu.count", "gpu.mig_mode"):
        assert items[key]["actual"] is None
        assert items[key]["note"].startswith("driver not loaded")
    assert items["sysctl.vm.no_such_key"]["note"] == "no such key under /proc/sys"
    assert items["packages.nvidia-container-toolkit"]["note"] == "not installed"


def test_drift_report_table(host):
    report = host.file("%s/violating.md" % REPORTS).content_string
    assert report.startswith("node (debian-test-host): 3 pass, 10 fail, 0 unknown")
    rows = [line for line in report.splitlines() if line.startswith("| ") and not line.startswith("| item")]
    assert len(rows) == 10
    assert "| services.containerd | stopped | running, enabled | fail |" in report


def test_check_mode_runs_in_full(host, compliant):
    check_mode = load(host, "check_mode.json")
    assert check_mode.get("skipped", False) is False
    assert check_mode["changed"] is False
    assert check_mode["results"] == compliant["results"]
    assert check_mode["summary"] == compliant["summary"]


def test_module_left_the_node_alone(host):
    assert host.service("containerd").is_running
    assert host.file("/proc/sys/kernel/ostype").content_string.strip() == "Linux"
