# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/preflight.yml over five nodes on the Kubernetes API stand-in (its node history is the record of
every cordon), the fast twin of tests/integration/roles/test_preflight_batches_real_api.py (issue 25, item 1).

One run with preflight_serial=2 and a tenant's GPU pod on one node (evicted before the active tests, the node
joins), one with preflight_evict=false and the default serial (one node at a time; the busy node's active tests
are skipped, it is not failed), one where every node is unreachable (the summary still runs).
"""
import json
import os
import sys

import pytest
import testlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "roles"))
from standin_helpers import api_get, start_k8s_standin  # noqa: E402
from test_preflight_role import CAPTURES, DCGM_PASS, host_vars  # noqa: E402

FLEET = 5
NODES = ["gpu-p%d" % index for index in range(FLEET)]


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory):
    return testlib.build_fake_libcuda(tmp_path_factory.mktemp("libcuda"))


def tenant(node, name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": node, "containers": [
                {"name": "train", "image": "train:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def run(tmp_path, libcuda, extra_vars, tenants=(), inventory_extra=None):
    seed = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}]
    seed += [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {}}, "spec": {},
              "status": {"allocatable": {"nvidia.com/gpu": "8"}}} for node in NODES]
    seed += list(tenants)
    server, kubeconfig = start_k8s_standin(tmp_path, seed, simulate_kubelet=True)
    inventory = {"gpu_nodes": {"hosts": {}}}
    for node in NODES:
        values = host_vars(tmp_path, libcuda, node, dcgm=DCGM_PASS)
        values.pop("preflight_test_env")
        values.update(preflight_node_name=node, preflight_skip_gates=["kubernetes", "serving"],
                      preflight_skip_reasons={"kubernetes": "no device plugin here", "serving": "no LLM server"},
                      preflight_bandwidth=False)
        values.update(inventory_extra or {})
        inventory["gpu_nodes"]["hosts"][node] = values
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text("- ansible.builtin.import_playbook: gpu_native.fleet.preflight\n")
    (tmp_path / "dcgm.json").write_text(DCGM_PASS)
    record = tmp_path / "dcgmi-calls.txt"
    env = {"NVIDIA_SMI_STANDIN_CAPTURE": os.path.join(CAPTURES, "h100x8-healthy"),
           "DCGMI_STANDIN_OUTPUT": str(tmp_path / "dcgm.json"), "DCGMI_STANDIN_RECORD": str(record)}
    variables = dict({"preflight_become": False, "preflight_evict_timeout": 30}, **extra_vars)
    args = ["-i", str(tmp_path / "inventory.json"), "--forks", "5", "-e", json.dumps(variables)]
    result = testlib.run_ansible_playbook(str(tmp_path / "play.yml"), kubeconfig, args, extra_env=env)
    server.stop()
    calls = record.read_text().splitlines() if record.exists() else []
    return result, server, calls


def most_cordoned(server):
    cordoned, most, ever = set(), 0, set()
    with open(os.path.join(server.state_dir, "node-history.jsonl")) as handle:
        for entry in (json.loads(line) for line in handle if line.strip()):
            (cordoned.add if entry["unschedulable"] else cordoned.discard)(entry["node"])
            most, ever = max(most, len(cordoned)), ever | cordoned
    return most, ever


def test_batches_of_two_and_the_tenant_pod_evicted_first(tmp_path, libcuda):
    result, server, calls = run(tmp_path, libcuda, {"preflight_serial": 2}, [tenant(NODES[2], "train-0")])
    assert result.returncode == 0, result.stdout[-5000:]
    most, ever = most_cordoned(server)
    assert most <= 2 and ever == set(NODES), (most, ever)
    assert "evicted ml/train-0 before the active tests" in " ".join(result.stdout.split())
    assert len(calls) == FLEET
    for node in NODES:
        assert ("%s: PASSED" % node) in result.stdout, result.stdout[-3000:]


def test_one_at_a_time_and_the_busy_node_skipped_not_failed(tmp_path, libcuda):
    result, server, calls = run(tmp_path, libcuda, {"preflight_evict": False}, [tenant(NODES[3], "train-1")])
    assert result.returncode == 0, result.stdout[-5000:]
    most, ever = most_cordoned(server)
    assert most <= 1 and ever == set(NODES), (most, ever)
    text = " ".join(result.stdout.split())
    assert "%s: PASSED (spec=pass, hardware=pass, kubernetes=skip, cuda=skip, serving=skip)" % NODES[3] in text, text[-3000:]
    assert "GPU pods running: ml/train-1 (preflight_evict is false)" in text
    assert len(calls) == FLEET - 1  # no dcgmi diag -r 2 next to the tenant


def test_the_summary_runs_when_every_node_is_unreachable(tmp_path, libcuda):
    result, _server, _calls = run(tmp_path, libcuda, {}, inventory_extra={
        "ansible_connection": "ssh", "ansible_host": "192.0.2.1", "ansible_ssh_common_args": "-o ConnectTimeout=2"})
    assert result.returncode != 0
    assert "Preflight summary" in result.stdout, result.stdout[-3000:]
    assert result.stdout.count("unreachable") >= FLEET
    assert "5 node(s) have no verdict" in " ".join(result.stdout.split())
