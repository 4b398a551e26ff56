# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a command (an ansible-playbook run) and SIGKILL its whole process group as soon as the Kubernetes API
shows NODE cordoned with LABEL=VALUE: a run that crashed between cordoning a node and giving it back.

Usage: run_killed.py KUBECONFIG NODE LABEL VALUE LOG -- COMMAND...
Prints one JSON line {killed, rc, node}; exits 1 when the command ended before the state was seen.
"""
import json
import os
import signal
import subprocess
import sys
import time

from kubernetes import client, config


def main(argv):
    kubeconfig, node, label, value, log = argv[1:6]
    command = argv[argv.index("--") + 1:]
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    core = client.CoreV1Api(client.ApiClient(configuration))
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 600
        seen = None
        while process.poll() is None and time.time() < deadline:
            current = core.read_node(node)
            if current.spec.unschedulable and (current.metadata.labels or {}).get(label) == value:
                seen = {"unschedulable": True, label: value,
                        "annotations": dict((k, v) for k, v in (current.metadata.annotations or {}).items()
                                            if k.startswith("gpu-native.io/"))}
                os.killpg(process.pid, signal.SIGKILL)
                break
            time.sleep(0.2)
        rc = process.wait()
    print(json.dumps({"killed": seen is not None, "rc": rc, "node": node, "seen": seen}))
    return 0 if seen is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
