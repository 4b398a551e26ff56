"""spec_facts: collection against fake /proc, /sys, os-release and dpkg trees, with stand-in tools."""
import os

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import spec_facts as sf
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeTools
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_smi import NvidiaSmiParseError

from spec_matrix_support import (
    A100_XML,
    FakeTools,
    h100_tools,
    make_root,
    node_facts,
    strip_header,
)


@pytest.fixture
def h100_root(tmp_path):
    return make_root(tmp_path, "root_h100")


@pytest.fixture
def nogpu_root(tmp_path):
    return make_root(tmp_path, "root_nogpu")


def test_h100_node_collected_in_one_pass(h100_root):
    tools = h100_tools()
    facts = node_facts(h100_root, tools)
    facts.want(packages=["nvidia-fabricmanager-565", "nvidia-driver-535-server"],
               services=["nvidia-persistenced", "nvidia-fabricmanager.service"],
               sysctl=["vm.max_map_count", "net.ipv4.ip_local_port_range", "net.bridge.bridge-nf-call-iptables"])
    facts.collect_all()
    facts.collect_all()  # a second pass is served from the cache
    data = facts.as_dict()
    assert data["os"]["id"] == "ubuntu" and data["os"]["version_id"] == "22.04"
    assert data["kernel"] == {"release": "5.15.0-105-generic"}
    assert data["driver"] == {"version": "565.57.01", "loaded": True, "source": "/proc/driver/nvidia/version"}
    assert data["cuda"] == {"version": "12.7"}
    assert data["gpu"]["count"] == 8 and data["gpu"]["pci_count"] == 8  # NVSwitches and the NIC not counted
    first = data["gpu"]["gpus"][0]
    assert first["product"] == "NVIDIA H100 80GB HBM3"
    assert (first["persistence_mode"], first["ecc_mode"], first["mig_mode"]) == ("enabled", "enabled", "disabled")
    assert first["pci_bus_id"] == "0000:18:00.0" and first["pci_device_id"] == "0x233010DE"
    assert data["container_toolkit"] == {"version": "1.17.3", "source": "nvidia-ctk"}
    assert data["containerd"] == {"version": "1.7.22"}
    assert data["kubernetes"] == {"kubelet_version": "1.33.2"}
    assert "nvidia_peermem" in data["kernel_modules"] and "nouveau" not in data["kernel_modules"]
    assert data["sysctl"] == {"vm.max_map_count": "262144", "net.ipv4.ip_local_port_range": "32768 60999",
                              "net.bridge.bridge-nf-call-iptables": "1"}
    assert data["package_manager"] == "dpkg"
    assert data["packages"]["nvidia-fabricmanager-565"] == "565.57.01-1"
    assert data["packages"]["nvidia-driver-535-server"] is None  # deinstall ok config-files
    assert data["services"]["nvidia-fabricmanager.service"]["active_state"] == "active"
    assert data["services"]["nvidia-persistenced.service"]["unit_file_state"] == "enabled"
    # every tool ran exactly once: one pass
    for tool in ("nvidia-smi", "nvidia-ctk", "containerd", "kubelet", "systemctl"):
        assert tools.count(tool) == 1, tool
    assert len(tools.calls) == 5
    assert tools.calls[0][1:] == ["-q", "-x"]
    systemctl = [argv for argv in tools.calls if argv[0].endswith("systemctl")][0]
    assert systemctl[-2:] == ["nvidia-fabricmanager.service", "nvidia-persistenced.service"]
    assert data["notes"] == {}


def test_nothing_runs_until_asked(h100_root):
    tools = h100_tools()
    facts = node_facts(h100_root, tools)
    assert facts.kernel_release() == "5.15.0-105-generic"
    assert facts.os_release()["version_codename"] == "jammy"
    assert tools.calls == []
    assert set(facts.as_dict()) == {"os", "kernel", "commands", "notes"}


def test_node_without_driver_or_tools(nogpu_root):
    tools = FakeTools({})
    facts = node_facts(nogpu_root, tools)
    facts.want(packages=["containerd"], services=["containerd"], sysctl=["vm.max_map_count", "kernel.no_such_key"])
    facts.collect_all()
    data = facts.as_dict()
    assert data["os"]["id"] == "debian"  # from /usr/lib/os-release
    assert data["kernel"]["release"] == "6.1.0-18-amd64"
    assert data["driver"] == {"version": None, "loaded": False, "source": None}
    assert data["gpu"] == {"count": None, "pci_count": 1, "gpus": []}
    assert data["cuda"] == {"version": None}
    assert data["container_toolkit"]["version"] is None
    assert data["containerd"]["version"] is None and data["kubernetes"]["kubelet_version"] is None
    assert data["sysctl"] == {"vm.max_map_count": "65530", "kernel.no_such_key": None}
    assert data["packages"]["containerd"] is None and data["package_manager"] is None
    assert data["services"] == {"containerd.service": None}
    notes = data["notes"]
    assert notes["driver"] == "driver not loaded: no /proc/driver/nvidia/version"
    assert notes["gpu"] == "driver not loaded"
    assert notes["containerd"] == "containerd not installed"
    assert notes["kubelet"] == "kubelet not installed"
    assert notes["container_toolkit"] == "NVIDIA Container Toolkit not installed"
    assert notes["services"] == "systemd is not running on this host"
    assert notes["sysctl.kernel.no_such_key"] == "no such key under /proc/sys"
    assert "no package database" in notes["packages"]
    assert facts.absent >= {"driver", "gpu", "containerd", "kubelet", "container_toolkit", "sysctl.kernel.no_such_key"}
    assert tools.calls == []  # nvidia-smi is not even tried without a driver


def test_missing_proc_and_os_release(tmp_path):
    facts = node_facts(str(tmp_path), FakeTools({}))
    assert facts.os_release() is None and facts.kernel_release() is None and facts.kernel_modules() is None
    assert facts.notes["os"].startswith("no /etc/os-release")
    assert facts.notes["kernel_modules"] == "neither /proc/modules nor /sys/module is readable"
    assert facts.module_state("nvidia") is None
    assert facts.module_builtin("ext4") is False
    assert facts.pci_gpu_count() == 0


def test_module_states(h100_root, nogpu_root):
    facts = node_facts(h100_root, FakeTools({}))
    assert facts.module_state("nvidia-peermem") == "loaded"
    assert facts.module_state("ext4") == "built-in"  # modules.builtin
    assert facts.module_state("nouveau") == "not loaded"
    os.remove(os.path.join(nogpu_root, "proc", "modules"))
    for name, live in (("fuse", False), ("overlay", True)):
        os.makedirs(os.path.join(nogpu_root, "sys", "module", name))
        if live:
            open(os.path.join(nogpu_root, "sys", "module", name, "initstate"), "w").close()
    facts = node_facts(nogpu_root, FakeTools({}))
    assert facts.module_state("fuse") == "built-in"
    assert facts.module_state("overlay") == "loaded"
    assert facts.module_state("nouveau") == "not loaded"
    assert facts.notes["kernel_modules"].startswith("no /proc/modules (kernel without loadable module support)")


def test_nvidia_smi_failure_is_a_note_not_a_crash(h100_root):
    mismatch = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 565.77\n"
    facts = node_facts(h100_root, h100_tools(nvidia_smi=(18, mismatch, "")))
    assert facts.gpu()["count"] is None
    assert facts.cuda_version() is None
    assert facts.notes["gpu"].startswith("nvidia-smi failed: driver unreachable: Failed to initialize NVML")
    assert "gpu" not in facts.absent  # undeterminable, not absent
    assert facts.driver_version() == "565.57.01"  # the kernel module still tells its version


def test_nvidia_smi_unparseable_output(h100_root):
    facts = node_facts(h100_root, h100_tools(nvidia_smi=(0, "<html>not nvidia-smi</html>", "")))
    assert facts.nvidia_smi() is None
    assert facts.notes["gpu"].startswith("nvidia-smi output unreadable:")


def test_nvidia_smi_not_installed_with_driver_loaded(h100_root):
    facts = node_facts(h100_root, h100_tools(nvidia_smi=None))
    assert facts.gpu() == {"count": None, "pci_count": 8, "gpus": []}
    assert facts.notes["gpu"] == "nvidia-smi not installed" and "gpu" in facts.absent


def test_injected_parser_and_its_error(h100_root):
    def parser(text):
        raise NvidiaSmiParseError("boom")
    facts = node_facts(h100_root, h100_tools(), parser=parser)
    assert facts.nvidia_smi() is None and facts.notes["gpu"] == "nvidia-smi output unreadable: boom"

    fake = {"driver_version": "550.127.08", "cuda_version": "12.4", "attached_gpus": 2,
            "gpus": [{"index": 0, "product": "NVIDIA H200", "persistence_mode": "Enabled",
                      "ecc_mode": {"current": "Enabled", "pending": "Disabled"}, "mig_mode": "Disabled",
                      "mig_mode_pending": "Enabled"}]}
    facts = node_facts(h100_root, h100_tools(), parser=lambda text: fake)
    gpu = facts.gpu()
    assert gpu["count"] == 1
    assert gpu["gpus"][0]["ecc_mode"] == "enabled" and gpu["gpus"][0]["ecc_mode_pending"] == "disabled"
    assert gpu["gpus"][0]["mig_mode_pending"] == "enabled"
    assert facts.notes["gpu.count"] == "nvidia-smi reports attached_gpus=2 but lists 1"


def test_real_a100_capture(h100_root):
    """The captured A100 XML (driver 535.54.03, MIG enabled, attached_gpus 4 but one <gpu>)."""
    facts = node_facts(h100_root, h100_tools(nvidia_smi=(0, strip_header(A100_XML), "")))
    gpu = facts.gpu()
    assert gpu["count"] == 1
    assert gpu["gpus"][0]["product"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["gpus"][0]["mig_mode"] == "enabled" and gpu["gpus"][0]["persistence_mode"] == "disabled"
    assert gpu["gpus"][0]["pci_bus_id"] == "0000:01:00.0"
    assert facts.cuda_version() == "12.2"
    assert facts.notes["gpu.count"] == "nvidia-smi reports attached_gpus=4 but lists 1"


def test_driver_version_from_nvidia_smi_when_proc_file_is_odd(h100_root):
    with open(os.path.join(h100_root, "proc/driver/nvidia/version"), "w") as handle:
        handle.write("something else\n")
    facts = node_facts(h100_root, h100_tools())
    assert facts.driver_version() == "565.57.01"
    assert facts.driver()["source"] == "nvidia-smi"
    assert facts.notes["driver"].startswith("unrecognised /proc/driver/nvidia/version")


def test_toolkit_falls_back_to_package_database(h100_root):
    facts = node_facts(h100_root, h100_tools(nvidia_ctk=None))
    assert facts.container_toolkit() == {"version": "1.17.3-1", "source": "package nvidia-container-toolkit"}


def test_toolkit_cli_failure_without_package(nogpu_root):
    facts = node_facts(nogpu_root, FakeTools({"nvidia-ctk": (1, "", "error: unknown flag")}))
    assert facts.container_toolkit() == {"version": None, "source": None}
    assert facts.notes["container_toolkit"] == "nvidia-ctk --version failed: error: unknown flag"
    assert "container_toolkit" not in facts.absent


def test_rpm_database_in_one_call(nogpu_root):
    out = "nvidia-container-toolkit 0:1.17.3-1\nkernel 0:5.14.0-427.13.1.el9_4\nnvidia-driver 3:550.127.08-1.el9\n" \
          "package containerd is not installed\n"
    tools = FakeTools({"rpm": (1, out, "")})
    facts = node_facts(nogpu_root, tools)
    facts.want(packages=["kernel", "nvidia-driver", "containerd"])
    packages = facts.packages()
    assert packages["kernel"] == "5.14.0-427.13.1.el9_4"
    assert packages["nvidia-driver"] == "3:550.127.08-1.el9"
    assert packages["containerd"] is None
    assert tools.count("rpm") == 1
    assert facts.as_dict()["package_manager"] == "rpm"


def test_systemctl_failure_and_short_output(h100_root):
    facts = node_facts(h100_root, h100_tools(systemctl=(1, "", "Failed to connect to bus: No such file")))
    facts.want(services=["containerd"])
    assert facts.services() == {"containerd.service": None}
    assert facts.notes["services"] == "systemctl show failed: Failed to connect to bus: No such file"


def test_tool_version_failure(h100_root):
    facts = node_facts(h100_root, h100_tools(kubelet=(255, "", "kubelet: error while loading shared libraries")))
    assert facts.kubelet_version() is None
    assert facts.notes["kubelet"].startswith("kubelet --version failed: kubelet: error while loading")
    assert "kubelet" not in facts.absent


@pytest.mark.parametrize("text, expected", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 22:20:39 UTC 2023\n", "535.54.03"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release Build  (dvs-builder@U16)\n",
     "550.127.05"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.15  Release Build\n", "570.86.15"),
    ("garbage", None),
])
def test_parse_driver_version_file(text, expected):
    assert sf.parse_driver_version_file(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("containerd containerd.io 1.7.22 7f7fdf5fed64eb6a7caf99b3e12efcf9d60e311c\n", "1.7.22"),
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1\n", "1.6.20~ds1"),
    ("containerd github.com/containerd/containerd/v2 v2.0.2 c507a0257ea6462fbd6f5ba4f5c74facb04021f4\n", "2.0.2"),
    ("", None),
])
def test_parse_containerd_version(text, expected):
    assert sf.parse_containerd_version(text) == expected


def test_other_version_parsers():
    assert sf.parse_ctk_version("NVIDIA Container Toolkit CLI version 1.17.3\ncommit: abc\n") == "1.17.3"
    assert sf.parse_ctk_version("nothing") is None
    assert sf.parse_kubelet_version("Kubernetes v1.31.2\n") == "1.31.2"
    assert sf.parse_kubelet_version("Kubernetes v1.31.2+k3s1\n") == "1.31.2+k3s1"
    assert sf.parse_kubelet_version("") is None


def test_parse_os_release_quotes_and_comments():
    parsed = sf.parse_os_release('# comment\nID="rhel"\nVERSION_ID=\'9.4\'\nID_LIKE="fedora"\n\nbroken line\n')
    assert parsed == {"id": "rhel", "version_id": "9.4", "id_like": "fedora"}


def test_unit_name():
    assert sf.unit_name("containerd") == "containerd.service"
    assert sf.unit_name("docker.socket") == "docker.socket"


def test_default_is_the_shared_runner(h100_root, tmp_path):
    """Without injections every command goes through node_tools (PATH lookup, LC_ALL=C, timeout)."""
    facts = sf.NodeFacts(root=h100_root)
    assert isinstance(facts.tools, NodeTools) and facts.tools.source == "live"
    script = tmp_path / "containerd"
    script.write_text("#!/bin/sh\necho \"containerd github.com/containerd/containerd v1.7.$LC_ALL\"\n")
    script.chmod(0o755)
    facts = sf.NodeFacts(root=h100_root, tools=NodeTools(paths={"containerd": str(script)}))
    assert facts._tool("containerd", ["--version"]) == (0, "containerd github.com/containerd/containerd v1.7.C\n", "")
    assert facts.tools.calls[0].status == "ok"
    assert facts._tool("no-such-tool-gpu-native", []) is None


def test_driver_seen_through_nvidia_smi_where_proc_driver_is_not_visible(h100_root):
    """In a container /proc/driver/nvidia may be absent while nvidia-smi answers: that answer needs the driver."""
    os.remove(os.path.join(h100_root, "proc/driver/nvidia/version"))
    facts = node_facts(h100_root, h100_tools())
    assert facts.driver() == {"version": "565.57.01", "loaded": True, "source": "nvidia-smi"}
    assert facts.notes["driver"].startswith("no /proc/driver/nvidia/version here")
    assert facts.gpu()["count"] == 8
