# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What does playbooks/compliance.yml cost per node, relative to `ansible -m ping`?

Builds an inventory of N simulated hosts (local connection), each with its own node data:
  - a spec fact root (a copy of tests/fixtures/spec_matrix/root_h100 with 8 H100s in sysfs),
  - the 8-GPU nvidia-smi stand-in capture (tests/standins/captures/h100x8-healthy),
  - a 10,000-line kernel log with ~1% benign Xid lines (13/31/43 on a GPU's bus),
  - a containerd stand-in whose `config dump` registers the nvidia runtime,
  - a fresh readiness textfile.
Every DRIFT_EVERY-th host drifts in one check (spec sysctl, a fatal Xid, the containerd BinaryName, a stale
readiness timestamp, in turn).  In the same run it times (a) `ansible -m ping` over the inventory, the floor,
and (b) the compliance playbook, with the same forks, and counts module executions per host.

Usage: .venv/bin/python benchmarks/fleet_compliance.py [--hosts 50] [--forks 10] [--json] [--keep DIR]
The last line printed with --json is one JSON object.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(REPO, ".venv", "bin")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
STANDINS = os.path.join(REPO, "tests", "standins")
ROOT_H100 = os.path.join(REPO, "tests", "fixtures", "spec_matrix", "root_h100")
CAPTURE = os.path.join(STANDINS, "captures", "h100x8-healthy")
H100_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
NVSWITCH_BUSES = ("05", "06", "07", "08")
DRIFT_KINDS = ("spec", "gpu_health", "containerd", "readiness")
DRIFT_EVERY = 12

MATRIX = {
    "version": 1,
    "profiles": {
        "sim-h100": {
            "description": "simulated HGX H100 node (benchmark and tests)",
            "match": {"gpu_product": "NVIDIA H100 80GB HBM3"},
            "os": {"id": "ubuntu", "version": "22.04"},
            "kernel_modules": {"loaded": ["nvidia"], "absent": ["nouveau"]},
            "sysctl": {"vm.max_map_count": "262144"},
            "packages": {"nvidia-container-toolkit": "1.17.3"},
            "gpu": {"count": 8, "product": "NVIDIA H100 80GB HBM3"},
        },
    },
}

# The Container Toolkit's config as the container_toolkit role leaves it (the isolation check reads it).
TOOLKIT_CONFIG = """accept-nvidia-visible-devices-as-volume-mounts = true
accept-nvidia-visible-devices-envvar-when-unprivileged = false

[nvidia-container-runtime]
mode = "auto"
"""
CONTAINERD_CONFIG = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "%s"
"""

_PLAIN = ("[%9.6f] systemd[1]: Started session-%d.scope - Session %d of User root.",
          "[%9.6f] audit: type=1400 audit(%d.120:%d): apparmor=\"STATUS\" operation=\"profile_load\"",
          "[%9.6f] IPv6: ADDRCONF(NETDEV_CHANGE): cali%06x: link becomes ready %d",
          "[%9.6f] eth0: renamed from tmp%06x (%d)")
_BENIGN_XID = ("[%9.6f] NVRM: Xid (PCI:0000:%s:00): 13, pid=%d, name=python3, Graphics SM Warp Exception on "
               "(GPC 1, TPC 2, SM 0): Illegal Instruction Parameter",
               "[%9.6f] NVRM: Xid (PCI:0000:%s:00): 31, pid=%d, name=python3, Ch 00000010, intr 00000000. "
               "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2d_4a000000. Fault is of type "
               "FAULT_PDE ACCESS_TYPE_VIRT_READ",
               "[%9.6f] NVRM: Xid (PCI:0000:%s:00): 43, pid=%d, name=python3, Ch 00000008")


def kernel_log(lines=10000, fatal=False):
    """A dmesg-style log: ~1% benign Xid lines; ``fatal`` adds an Xid 79 (fallen off the bus)."""
    out = []
    for index in range(lines):
        stamp = 100.0 + index * 0.5
        if index % 100 == 50:
            out.append(_BENIGN_XID[index % 3] % (stamp, H100_BUSES[index % 8], 4000 + index))
        else:
            out.append(_PLAIN[index % 4] % (stamp, index, index))
    if fatal:
        out[-1] = ("[%9.6f] NVRM: Xid (PCI:0000:2a:00): 79, pid=0, name=, GPU has fallen off the bus."
                   % (100.0 + lines * 0.5))
    return "\n".join(out) + "\n"


def _pci(root):
    devices = [(b, "0x030200", "0x2330") for b in H100_BUSES] + [(b, "0x068000", "0x22a3") for b in NVSWITCH_BUSES]
    for bus, klass, device in devices:
        directory = os.path.join(root, "sys", "bus", "pci", "devices", "0000:%s:00.0" % bus)
        os.makedirs(directory)
        for field, value in (("class", klass), ("vendor", "0x10de"), ("device", device)):
            with open(os.path.join(directory, field), "w") as handle:
                handle.write(value + "\n")


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def build_fleet(workdir, hosts, drift_every=DRIFT_EVERY, unreachable=0):
    """Write hosts' node data and an inventory under ``workdir``.

    Returns ``(inventory_path, drifting)``: ``drifting`` maps host name to the check it drifts in.
    Host i (1-based) drifts when i % drift_every == 0; ``unreachable`` extra hosts point at a closed port.
    """
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir)
    for tool in ("nvidia-smi", "containerd"):
        os.symlink(os.path.join(STANDINS, tool), os.path.join(bindir, tool))
    good_log = kernel_log()
    inventory = {}
    drifting = {}
    for number in range(1, hosts + 1):
        name = "node%03d" % number
        kind = DRIFT_KINDS[(number // drift_every - 1) % len(DRIFT_KINDS)] if number % drift_every == 0 else None
        if kind:
            drifting[name] = kind
        home = os.path.join(workdir, "hosts", name)
        root = os.path.join(home, "root")
        shutil.copytree(ROOT_H100, root)
        _pci(root)
        if kind == "spec":
            _write(os.path.join(root, "proc", "sys", "vm", "max_map_count"), "65530\n")
        _write(os.path.join(home, "kern.log"), kernel_log(fatal=True) if kind == "gpu_health" else good_log)
        _write(os.path.join(home, "containerd.toml"), CONTAINERD_CONFIG % (
            "/usr/local/bin/runc" if kind == "containerd" else "/usr/bin/nvidia-container-runtime"))
        stamp = time.time() - (7200 if kind == "readiness" else 30)
        _write(os.path.join(home, "readiness.prom"),
               "# TYPE gpu_native_node_validation_last_success_ts_seconds gauge\n"
               'gpu_native_node_validation_last_success_ts_seconds{node="%s"} %.3f\n' % (name, stamp))
        _write(os.path.join(home, "toolkit.toml"), TOOLKIT_CONFIG)
        inventory[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "compliance_spec_root": root,
            "compliance_kernel_log": os.path.join(home, "kern.log"),
            "compliance_pci_sysfs_root": os.path.join(root, "sys", "bus", "pci", "devices"),
            "compliance_readiness_textfile": os.path.join(home, "readiness.prom"),
            "compliance_toolkit_config": os.path.join(home, "toolkit.toml"),
            "compliance_environment": {
                "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
                "NVIDIA_SMI_STANDIN_CAPTURE": CAPTURE,
                "CONTAINERD_STANDIN_CONFIG": os.path.join(home, "containerd.toml"),
            },
        }
    for number in range(1, unreachable + 1):
        inventory["gone%02d" % number] = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1",
                                          "ansible_port": 9, "ansible_ssh_timeout": 3}
    data = {"all": {"children": {"gpu_nodes": {"hosts": inventory}},
                    # the simulated hosts read their kernel log from a file: no root (and no sudo) needed
                    "vars": {"gpu_native_spec_matrix": MATRIX, "compliance_lspci": "lspci-not-on-simulated-hosts",
                             "compliance_become": False}}}
    path = os.path.join(workdir, "inventory.json")
    _write(path, json.dumps(data, indent=1))
    return path, drifting


def ansible_env(extra=None):
    env = dict(os.environ)
    env.update({"ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "true",
                "ANSIBLE_HOST_KEY_CHECKING": "false", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "false",
                "PATH": BIN + os.pathsep + env.get("PATH", "")})
    env.update(extra or {})
    return env


def _timed(argv, env):
    started = time.time()
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    return time.time() - started, proc.returncode, proc.stdout.decode("utf-8", "replace")


def run(hosts, forks, workdir):
    inventory, drifting = build_fleet(workdir, hosts, DRIFT_EVERY if hosts >= 2 * DRIFT_EVERY else 2)
    env = ansible_env({"ANSIBLE_FORKS": str(forks)})
    ping_s, ping_rc, ping_out = _timed([os.path.join(BIN, "ansible"), "-i", inventory, "gpu_nodes",
                                        "-m", "ansible.builtin.ping", "-f", str(forks)], env)
    if ping_rc != 0:
        raise SystemExit("ping failed:\n" + ping_out[-3000:])
    reports = os.path.join(workdir, "reports")
    comp_s, comp_rc, comp_out = _timed([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "-f", str(forks),
                                        "-e", "compliance_report_dir=" + reports,
                                        os.path.join(REPO, "playbooks", "compliance.yml")], env)
    with open(os.path.join(reports, "compliance.json")) as handle:
        rows = json.load(handle)
    failed = sorted(set(r["host"] for r in rows if r["status"] in ("fail", "error", "unreachable")))
    module_runs = _module_runs(comp_out)
    parse_ms = _parse_ms(workdir)
    return {
        "hosts": hosts, "forks": forks, "ping_s": round(ping_s, 3), "compliance_s": round(comp_s, 3),
        "ratio": round(comp_s / ping_s, 2) if ping_s else None,
        "module_runs_per_host": module_runs, "parse_ms_max": parse_ms,
        "failed_hosts": failed, "drifting_hosts": sorted(drifting), "playbook_rc": comp_rc,
        "failed_hosts_match": failed == sorted(drifting),
    }


MODULE_TASKS = ("Read the device-plugin count from the node object", "Run the node checks in one execution",
                "Compare the MIG state with the assigned layout")


def _module_runs(output):
    """Module executions per host (max over hosts): results of the per-host module tasks, skips excluded."""
    counts = {}
    task = None
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK ["):].split("]")[0]
            continue
        if task not in MODULE_TASKS:
            continue
        for status in ("ok: [", "changed: [", "failed: [", "fatal: ["):
            if line.startswith(status):
                host = line[len(status):].split("]")[0].split(" ->")[0]
                counts[host] = counts.get(host, 0) + 1
    return max(counts.values()) if counts else 0


def _parse_ms(workdir):
    """The checks' own parse time for one host (8-GPU XML + table, 10k-line log, spec root), in-process.

    The sum over the spec and gpu_health checks' parse_ms (tool run time excluded), the max of 3 runs.
    """
    sys.path.insert(0, COLLECTIONS)
    from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import fleet_compliance  # noqa: E402
    home = os.path.join(workdir, "hosts", "node001")
    os.environ["NVIDIA_SMI_STANDIN_CAPTURE"] = CAPTURE
    os.environ["CONTAINERD_STANDIN_CONFIG"] = os.path.join(home, "containerd.toml")
    os.environ["PATH"] = os.path.join(workdir, "bin") + os.pathsep + os.environ.get("PATH", "")
    best = None
    for attempt in range(3):  # pylint: disable=unused-variable
        result = fleet_compliance.run_checks({
            "matrix": MATRIX, "spec_root": os.path.join(home, "root"), "kernel_log": os.path.join(home, "kern.log"),
            "lspci": "lspci-not-on-simulated-hosts",
            "pci_sysfs_root": os.path.join(home, "root", "sys", "bus", "pci", "devices"),
            "readiness_textfile": os.path.join(home, "readiness.prom"), "checks": ["spec", "gpu_health"]})
        # parse_ms excludes the tools' (here: the Python stand-ins') run time, which a real nvidia-smi replaces.
        total = sum(c.get("parse_ms", 0) for c in result["checks"])
        best = total if best is None else max(best, total)
    return round(best, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--keep", help="build the fleet in this directory and keep it")
    args = parser.parse_args()
    workdir = args.keep or tempfile.mkdtemp(prefix="fleet-bench-")
    try:
        result = run(args.hosts, args.forks, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if not args.json:
        for key, value in result.items():
            print("%-22s %s" % (key, value))
    else:
        print(json.dumps(result, sort_keys=True))
    return 0 if result["failed_hosts_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
