# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What does playbooks/onboard.yml cost the controller per node, relative to `ansible -m ping`? (issue 32, item 4)

Simulated fleet: N local-connection nodes, each with its own stand-in captures (tests/standins: nvidia-smi
replaying the 8x H100 capture, dcgmi, the libcuda stand-in, the sysfs PCI tree) and a Node object on the suite's
real control plane (tests/kube_cluster.py) with the kubelet stand-in writing node and pod status; the serving gate
runs its pod against the OpenAI-compatible stand-in. The node stack roles are switched off (they install Debian
packages, which a local-connection node cannot), so what is measured is the cordon, the five gates and the join:
the part of onboarding that is the same on every fleet. The fleet is the one tests/integration/roles/
test_preflight_role.py builds (`run_fleet`), so the benchmark runs what the tests prove.

For each fleet size and each onboard_serial it times, in the same run, on the same inventory and with the same
forks: (a) `ansible -m ping` (the floor) and (b) onboard.yml, each as wall time and as the CPU time of the
controller's processes (ansible-playbook and its forks: the local connection runs the modules in them too, so
the CPU figure is controller plus module work, the same for both terms). Prints one line per run and, with --json,
one JSON object last.

Usage: .venv/bin/python benchmarks/onboard.py [--nodes 10 50] [--serial 100% 5] [--forks 10] [--json]
Needs the Kubernetes binaries (make kube-build) and the collection link (make collection-link).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(REPO, ".cache", "collections"), os.path.join(REPO, "tests"),
                os.path.join(REPO, "tests", "integration", "roles"), os.path.join(REPO, "tests", "standins")]

import kube_cluster  # noqa: E402
import openai_standin  # noqa: E402
import testlib  # noqa: E402
import test_preflight_role as fleet_lib  # noqa: E402


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command, env):
    """(wall s, CPU s of the process and its children, CompletedProcess) of one command."""
    cpu, wall = children_cpu(), time.monotonic()
    done = subprocess.run(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    return time.monotonic() - wall, children_cpu() - cpu, done


def one_run(plane, libcuda, llm_port, nodes, serial, forks, folder):
    """Seed a fleet of `nodes`, measure ping and onboard.yml over it, tear it down; one result row."""
    measured = {}

    def run_playbook(playbook, kubeconfig, args=(), extra_env=None, timeout=None):  # run_fleet's runner, timed
        del timeout  # a benchmark run is not cut short
        env = testlib.ansible_env(kubeconfig, extra_env)
        inventory = args[args.index("-i") + 1]
        ping = [os.path.join(testlib.VENV_BIN, "ansible"), "all:!localhost", "-i", inventory, "-m", "ansible.builtin.ping",
                "--forks", str(forks)]
        measured["ping_s"], measured["ping_cpu_s"], done = timed(ping, env)
        if done.returncode != 0:
            raise SystemExit("ansible -m ping failed:\n" + done.stdout[-2000:])
        command = [os.path.join(testlib.VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", playbook]
        measured["onboard_s"], measured["onboard_cpu_s"], done = timed(command + list(args), env)
        return done

    original = fleet_lib.run_ansible_playbook
    fleet_lib.run_ansible_playbook = run_playbook
    cases = dict(("n%03d" % index, dict(fleet_lib.HEALTHY)) for index in range(nodes))
    variables = dict(fleet_lib.ONBOARD_VARS, onboard_serial=serial)
    dcgm = folder / "dcgm-pass.json"
    dcgm.write_text(fleet_lib.DCGM_PASS)
    try:
        result, fleet = fleet_lib.run_fleet(
            plane, folder, libcuda, cases, llm_ports={"ok": llm_port}, play=fleet_lib.ONBOARD_PLAY,
            args=["-e", json.dumps(variables), "--forks", str(forks)],
            extra_env={"NVIDIA_SMI_STANDIN_CAPTURE": os.path.join(fleet_lib.CAPTURES, "h100x8-healthy"),
                       "DCGMI_STANDIN_OUTPUT": str(dcgm)})
    finally:
        fleet_lib.run_ansible_playbook = original
    try:
        joined = sum(1 for case in cases
                     if fleet.node(case)["metadata"]["labels"].get("gpu-native.io/preflight") == "passed")
    finally:
        fleet.close()
    if result.returncode != 0 or joined != nodes:
        raise SystemExit("onboard.yml did not join the fleet (rc %d, %d of %d joined):\n%s"
                         % (result.returncode, joined, nodes, result.stdout[-3000:]))
    row = {"nodes": nodes, "serial": serial, "forks": forks, "joined": joined}
    row.update((key, round(value, 2)) for key, value in measured.items())
    row["ratio_wall"] = round(measured["onboard_s"] / measured["ping_s"], 2)
    row["ratio_cpu"] = round(measured["onboard_cpu_s"] / measured["ping_cpu_s"], 2)
    row["cpu_s_per_node"] = round(measured["onboard_cpu_s"] / nodes, 2)
    row["ping_cpu_s_per_node"] = round(measured["ping_cpu_s"] / nodes, 3)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--serial", nargs="+", default=["100%", "5"], help="onboard_serial values to compare")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gn-onboard-bench-") as scratch:
        scratch = Path(scratch)
        libcuda = testlib.build_fake_libcuda(scratch)
        server = openai_standin.serve(0, "ok")
        try:
            with kube_cluster.ControlPlane(str(scratch / "plane")) as plane:
                for nodes in args.nodes:
                    for serial in args.serial:
                        folder = scratch / ("run-%d-%s" % (nodes, serial.replace("%", "pct")))
                        folder.mkdir()
                        row = one_run(plane, libcuda, server.server_address[1], nodes, serial, args.forks, folder)
                        rows.append(row)
                        print("nodes %(nodes)3d serial %(serial)5s: ping %(ping_s)6.1f s (%(ping_cpu_s)6.1f s CPU), "
                              "onboard %(onboard_s)6.1f s (%(onboard_cpu_s)7.1f s CPU): %(ratio_wall)5.2fx wall, "
                              "%(ratio_cpu)5.2fx CPU, %(cpu_s_per_node)5.2f s CPU per node" % row, flush=True)
        finally:
            server.shutdown()
    if args.json:
        print(json.dumps({"runs": rows, "load_average": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
