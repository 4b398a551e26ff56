"""Shared helpers for the spec matrix tests: fake node roots and a fake tool runner."""
import os
import shutil

from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import NodeFacts
from testlib import fixture_text

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
SPEC_FIXTURES = os.path.join(FIXTURES, "spec_matrix")
H100_XML = os.path.join(FIXTURES, "nvidia", "constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt")
A100_XML = os.path.join(FIXTURES, "nvidia", "01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt")

# (bus id, class, vendor, device): sysfs PCI entries created at test time
# (':' may not appear in the collection's file names).
H100_PCI = (
    [("0000:%s:00.0" % bus, "0x030200", "0x10de", "0x2330") for bus in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
    + [("0000:%s:00.0" % bus, "0x068000", "0x10de", "0x22a3") for bus in ("05", "06", "07", "08")]
    + [("0000:1a:00.0", "0x020700", "0x15b3", "0x101b")]
)
NOGPU_PCI = [("0000:00:02.0", "0x030000", "0x10de", "0x2236")]

CTK_OUT = "NVIDIA Container Toolkit CLI version 1.17.3\ncommit: 16f37fcafcbdaf4d4ba5ac7f2d1a0fc3e6a5e6f1\n"
CONTAINERD_OUT = "containerd containerd.io 1.7.22 7f7fdf5fed64eb6a7caf99b3e12efcf9d60e311c\n"
KUBELET_OUT = "Kubernetes v1.33.2\n"
SYSTEMCTL_OUT = (
    "Id=nvidia-fabricmanager.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"
    "UnitFileState=enabled\n\n"
    "Id=nvidia-persistenced.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"
    "UnitFileState=enabled\n"
)


def strip_header(path):
    """Fixture text after the '# ---- BEGIN VERBATIM ----' line (the shared loader, tests/testlib.py)."""
    return fixture_text(os.path.relpath(path, FIXTURES))


def make_root(tmp_path, name="root_h100", pci=None):
    """Copy a fixture root into tmp_path and add its sysfs PCI devices."""
    root = os.path.join(str(tmp_path), name)
    shutil.copytree(os.path.join(SPEC_FIXTURES, name), root)
    if pci is None:
        pci = H100_PCI if name == "root_h100" else NOGPU_PCI
    for bus, klass, vendor, device in pci:
        directory = os.path.join(root, "sys", "bus", "pci", "devices", bus)
        os.makedirs(directory)
        for field, value in (("class", klass), ("vendor", vendor), ("device", device)):
            with open(os.path.join(directory, field), "w") as handle:
                handle.write(value + "\n")
    return root


class FakeTools:
    """Stands in for the node's tools: ``outputs`` maps tool name to (rc, stdout, stderr).

    Tools not in ``outputs`` are "not installed".  ``calls`` records every argv.
    """

    def __init__(self, outputs):
        self.outputs = dict(outputs)
        self.calls = []

    def find_binary(self, name):
        return "/usr/bin/" + name if name in self.outputs else None

    def run(self, argv, timeout=None):
        self.calls.append(list(argv))
        name = os.path.basename(argv[0])
        return self.outputs[name]

    def count(self, name):
        return sum(1 for argv in self.calls if os.path.basename(argv[0]) == name)


def h100_tools(**overrides):
    outputs = {
        "nvidia-smi": (0, strip_header(H100_XML), ""),
        "nvidia-ctk": (0, CTK_OUT, ""),
        "containerd": (0, CONTAINERD_OUT, ""),
        "kubelet": (0, KUBELET_OUT, ""),
        "systemctl": (0, SYSTEMCTL_OUT, ""),
    }
    for key, value in overrides.items():
        key = key.replace("_", "-")
        if value is None:
            outputs.pop(key, None)
        else:
            outputs[key] = value
    return FakeTools(outputs)


def node_facts(root, tools, parser=None):
    return NodeFacts(root=root, run_command=tools.run, find_binary=tools.find_binary, gpu_xml_parser=parser)


# A profile the H100 fixture node satisfies in full.
H100_PROFILE = {
    "description": "HGX H100 serving nodes",
    "match": {"gpu_product": "NVIDIA H100 80GB HBM3"},
    "os": {"id": "ubuntu", "version": "22.04", "codename": "jammy"},
    "kernel": {"release": ">=5.15.0-100, <5.16"},
    "driver": {"version": "565.57.01"},
    "cuda": {"version": ">=12.4"},
    "container_toolkit": {"version": "1.17.3"},
    "containerd": {"version": ">=1.7, <2.0"},
    "device_plugin": {"version": "0.17.1"},
    "kubernetes": {"version": ">=1.31, <1.34"},
    "kernel_modules": {"loaded": ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia-peermem", "ext4"],
                       "absent": ["nouveau"]},
    "sysctl": {"vm.max_map_count": "262144", "kernel.numa_balancing": "0",
               "net.ipv4.ip_local_port_range": "32768 60999", "net.bridge.bridge-nf-call-iptables": 1},
    "packages": {"nvidia-fabricmanager-565": "565.57.01", "nvidia-container-toolkit": ">=1.17",
                 "nvidia-driver-535-server": "absent", "libnvidia-compute-565": "present"},
    "services": {"nvidia-persistenced": "running", "nvidia-fabricmanager": ["running", "enabled"]},
    "gpu": {"count": 8, "product": "NVIDIA H100 80GB HBM3", "persistence_mode": "enabled", "ecc_mode": True,
            "mig_mode": "disabled", "memory_total_mib": ">=80000"},
}


def h100_matrix(**changes):
    """A matrix whose only profile is H100_PROFILE, with ``section=value`` replacements."""
    import copy
    profile = copy.deepcopy(H100_PROFILE)
    for key, value in changes.items():
        if value is None:
            profile.pop(key, None)
        else:
            profile[key] = value
    return {"version": 1, "profiles": {"h100-serving": profile}}
