# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How much does gpu_native.fleet.spec_matrix cost per node, relative to `ansible -m ping`?

Runs, alternately and on the same inventory (localhost, local connection):
  baseline:  ansible localhost -m ansible.builtin.ping
  measured:  ansible localhost -m gpu_native.fleet.spec_matrix  (the example inventory's
             h100-serving profile, every section, fail_on_drift=false)
and prints the median wall time of each and their ratio.  It also times the
module's own work in-process (fact collection + judging, no Ansible overhead)
against this machine's real /proc, /sys and tools.

"Well under a second per node" holds when the ratio stays near 1: the module
costs about what Ansible's cheapest round trip costs.

Usage: .venv/bin/python benchmarks/spec_matrix_bench.py [--runs N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(REPO, ".venv", "bin")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")


def example_matrix():
    import yaml
    with open(os.path.join(REPO, "inventories", "example", "group_vars", "gpu_nodes", "spec_matrix.yml")) as handle:
        return yaml.safe_load(handle)["gpu_native_spec_matrix"]


def ansible(module, args=None):
    argv = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m", module]
    if args is not None:
        argv += ["-a", args]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        output = proc.stdout.decode()[-2000:] + proc.stderr.decode()[-2000:]
        raise SystemExit("%s failed (rc=%d):\n%s" % (module, proc.returncode, output))
    return elapsed


def in_process(matrix, runs):
    sys.path.insert(0, COLLECTIONS)
    from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import NodeFacts
    from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_matrix import judge_profile, validate_matrix
    times = []
    for dummy in range(runs):
        start = time.perf_counter()
        validated = validate_matrix(matrix)
        judge_profile(validated, "h100-serving", NodeFacts())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (default 5)")
    options = parser.parse_args()
    if not os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections", "gpu_native", "fleet")):
        raise SystemExit("run `make collection-link` first")
    matrix = example_matrix()
    args = json.dumps({"matrix": matrix, "profile": "h100-serving", "fail_on_drift": False})
    ansible("ansible.builtin.ping")  # warm caches once
    ping, spec = [], []
    for dummy in range(options.runs):
        ping.append(ansible("ansible.builtin.ping"))
        spec.append(ansible("gpu_native.fleet.spec_matrix", args))
    ping_median, spec_median = statistics.median(ping), statistics.median(spec)
    work = in_process(matrix, options.runs * 4)
    print("runs per command:                 %d" % options.runs)
    print("ansible -m ping (baseline):       %.3f s median" % ping_median)
    print("ansible -m spec_matrix:           %.3f s median" % spec_median)
    print("ratio spec_matrix / ping:         %.2f" % (spec_median / ping_median))
    print("module work in-process:           %.1f ms median (collection + judging)" % (work * 1000))
    print("module work / ping round trip:    %.3f" % (work / ping_median))


if __name__ == "__main__":
    main()
