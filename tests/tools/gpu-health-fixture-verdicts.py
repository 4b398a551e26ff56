# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run `ansible localhost -m gpu_native.fleet.gpu_health` on every fixture case.

The cases and their expected verdicts live in tests/fixtures/nvidia/verdicts.json.
Usage (from the repository root, after `make collection-link`):

    .venv/bin/python tests/tools/gpu-health-fixture-verdicts.py [--match TEXT]

Prints one line per case and exits 1 when any verdict differs.
"""
import argparse
import json
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "module_utils", "gpu"))

from gpu_fixtures import captured_inputs, verdict_cases  # noqa: E402


def run_case(case, ansible):
    args = {"source": "captured", "captured": captured_inputs(case)}
    if "expected_gpus" in case:
        args["expected_gpus"] = case["expected_gpus"]
    env = dict(os.environ)
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", os.path.join(REPO, ".cache", "collections"))
    env["ANSIBLE_LOCALHOST_WARNING"] = "false"
    env["ANSIBLE_STDOUT_CALLBACK"] = "json"
    env["ANSIBLE_LOAD_CALLBACK_PLUGINS"] = "true"
    proc = subprocess.run([ansible, "localhost", "-m", "gpu_native.fleet.gpu_health", "-a", json.dumps(args)],
                          capture_output=True, text=True, env=env, check=False)
    try:
        output = json.loads(proc.stdout)
        result = output["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        return None, "ansible output unreadable (rc=%d): %s %s" % (proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    return result, None


def check(case, result):
    problems = []
    if result.get("failed"):
        return ["module failed: %s" % result.get("msg")]
    if result["gpu_ready"] != case["gpu_ready"]:
        problems.append("gpu_ready %s, expected %s" % (result["gpu_ready"], case["gpu_ready"]))
    unhealthy = sorted(g["pci_bus_id"] for g in result["gpus"] if not g["healthy"])
    if unhealthy != sorted(case["unhealthy"]):
        problems.append("unhealthy %s, expected %s" % (unhealthy, case["unhealthy"]))
    for key in ("nvidia_smi_gpu_count", "pci_gpu_count"):
        if key in case and result[key] != case[key]:
            problems.append("%s %s, expected %s" % (key, result[key], case[key]))
    if "fatal_xids" in case:
        fatal = sorted(set(e["xid"] for e in result["xid_events"]
                           if e["action"] in ("reset_gpu", "reboot_node") and not e["cleared"]))
        if fatal != sorted(case["fatal_xids"]):
            problems.append("pending fatal Xids %s, expected %s" % (fatal, case["fatal_xids"]))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--match", default="", help="only cases whose name contains TEXT")
    parser.add_argument("--ansible", default=os.path.join(REPO, ".venv", "bin", "ansible"))
    options = parser.parse_args()
    failures = 0
    for case in verdict_cases():
        if options.match not in case["name"]:
            continue
        result, error = run_case(case, options.ansible)
        problems = [error] if error else check(case, result)
        failures += bool(problems)
        print("%s  %s%s" % ("FAIL" if problems else "ok  ", case["name"], (": " + "; ".join(problems)) if problems else
                            " (gpu_ready=%s)" % result["gpu_ready"]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
