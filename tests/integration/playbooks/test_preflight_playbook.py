# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/preflight.yml when every node is unreachable (issue 25, item 11): the summary play still runs and the
run fails naming the nodes without a verdict. The batches, the eviction first and the busy node skipped are
tests/integration/roles/test_preflight_batches_real_api.py, on the real control plane.
"""
import json
import os
import sys

import pytest
import testlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "roles"))
from test_preflight_role import CAPTURES, DCGM_PASS, host_vars  # noqa: E402

FLEET = 5
NODES = ["gpu-p%d" % index for index in range(FLEET)]


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory):
    return testlib.build_fake_libcuda(tmp_path_factory.mktemp("libcuda"))


def run(tmp_path, libcuda, kubeconfig, extra_vars, inventory_extra=None):
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
    calls = record.read_text().splitlines() if record.exists() else []
    return result, calls


def test_the_summary_runs_when_every_node_is_unreachable(tmp_path, libcuda, kube_job_kubeconfig):
    # the nodes are never reached, so the API is never read: the onboarding job's kubeconfig is only passed on
    result, _calls = run(tmp_path, libcuda, kube_job_kubeconfig("onboarding"), {}, inventory_extra={
        "ansible_connection": "ssh", "ansible_host": "192.0.2.1", "ansible_ssh_common_args": "-o ConnectTimeout=2"})
    assert result.returncode != 0
    assert "Preflight summary" in result.stdout, result.stdout[-3000:]
    assert result.stdout.count("unreachable") >= FLEET
    assert "5 node(s) have no verdict" in " ".join(result.stdout.split())
