# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/onboard.yml always ends with its fleet summary (issue 25, item 11): when every node is unreachable
the summary play still runs, lists each node as unreachable, and the run fails naming the nodes without a verdict.
Before, Ansible ended the run at "NO MORE HOSTS LEFT" and the summary play never started. The nodes are never
reached, so the Kubernetes API is never read (no control plane needed). The same for preflight.yml is
test_preflight_playbook.py.
"""
import json
import secrets
import sys

import testlib

FLEET = 4
NODES = ["gpu-o%d" % index for index in range(FLEET)]


def run(tmp_path, extra_vars=None):
    hosts = dict((node, {"ansible_connection": "ssh", "ansible_host": "192.0.2.1",
                         "ansible_ssh_common_args": "-o ConnectTimeout=2"}) for node in NODES)
    (tmp_path / "inventory.json").write_text(json.dumps({"gpu_nodes": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text("- ansible.builtin.import_playbook: gpu_native.fleet.onboard\n")
    variables = dict({"onboard_become": False, "preflight_report_dir": ""}, **(extra_vars or {}))
    args = ["-i", str(tmp_path / "inventory.json"), "--forks", str(FLEET), "-e", json.dumps(variables)]
    return testlib.run_ansible_playbook(str(tmp_path / "play.yml"), None, args, timeout=300)


def test_the_summary_runs_when_every_node_is_unreachable(tmp_path):
    result = run(tmp_path)
    out = result.stdout
    assert result.returncode != 0, out[-3000:]
    assert "NO MORE HOSTS LEFT" not in out, out[-3000:]
    assert "Onboarding summary" in out, out[-3000:]
    summary = out[out.index("Onboarding summary"):]
    for node in NODES:
        assert node in summary, summary[:3000]
    assert summary.count("unreachable") >= FLEET, summary[:3000]
    assert "%d node(s) have no verdict" % FLEET in " ".join(out.split()), out[-3000:]
    assert "TASK [Read the cluster's version]" not in out  # no node was reached, so nothing else ran


def test_the_budget_fails_the_run_and_names_the_nodes_not_run(tmp_path):
    # one node per batch, budget 0: the first unreachable node spends it, the others are left alone
    result = run(tmp_path, {"onboard_serial": 1, "onboard_max_fail_percentage": 0})
    out = " ".join(result.stdout.split())
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Onboarding summary" in out
    assert "1 node(s) have no verdict: gpu-o0" in out, result.stdout[-3000:]
    assert "1 of %d node(s) failed, more than onboard_max_fail_percentage 0%%: %d node(s) not run" % (
        FLEET, FLEET - 1) in out, result.stdout[-3000:]
    assert "not run: 1 of %d node(s) failed (gpu-o0)" % FLEET in out


def test_the_summary_runs_when_every_node_fails(tmp_path, kube_job_kubeconfig):
    # reachable nodes (local connection) that are not in the cluster: the cordon fails on each of them. The
    # failure is the node's outcome (error, with the failed task), the summary lists them all, the run fails.
    hosts = dict((node, {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                         "preflight_node_name": "%s-not-in-cluster-%s" % (node, secrets.token_hex(3))})
                 for node in NODES)
    (tmp_path / "inventory.json").write_text(json.dumps({"gpu_nodes": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text("- ansible.builtin.import_playbook: gpu_native.fleet.onboard\n")
    switches = dict(("onboard_" + name, False) for name in (
        "sysctl", "driver", "toolkit", "containerd", "readiness", "mig", "runtime_class"))
    variables = dict(switches, onboard_become=False, onboard_gather_facts=False, preflight_report_dir="",
                     preflight_skip_gates=["serving"], preflight_skip_reasons={"serving": "no LLM server here"})
    args = ["-i", str(tmp_path / "inventory.json"), "--forks", str(FLEET), "-e", json.dumps(variables)]
    result = testlib.run_ansible_playbook(str(tmp_path / "play.yml"), kube_job_kubeconfig("onboarding"), args,
                                          timeout=300)
    out = result.stdout
    assert result.returncode != 0, out[-3000:]
    assert "NO MORE HOSTS LEFT" not in out, out[-3000:]
    assert "Onboarding summary" in out, out[-3000:]
    summary = out[out.index("Onboarding summary"):]
    rows = [line for line in summary.splitlines() if "-not-in-cluster-" in line and " error " in line]
    assert len(rows) == FLEET, summary[:4000]
    assert "%d node(s) have no verdict: %s" % (FLEET, ", ".join(NODES)) in " ".join(out.split()), out[-3000:]


def local_fleet(tmp_path):
    hosts = dict((node, {"ansible_connection": "local", "ansible_python_interpreter": sys.executable})
                 for node in NODES)
    (tmp_path / "inventory.json").write_text(json.dumps({"gpu_nodes": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text("- ansible.builtin.import_playbook: gpu_native.fleet.onboard\n")
    return ["-i", str(tmp_path / "inventory.json"), "--forks", str(FLEET),
            "-e", json.dumps({"onboard_become": False, "onboard_gather_facts": False, "preflight_report_dir": ""})]


def test_an_unreachable_api_stops_before_anything_with_the_variables_to_set(tmp_path):
    """Issue 25, item 6: the first task that reads the API fails with one line naming the variables to set, not
    kubernetes.core's "Invalid kube-config file", and no node is cordoned."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    result = testlib.run_ansible_playbook(str(tmp_path / "play.yml"), None, local_fleet(tmp_path) + [
        "-e", json.dumps({"gpu_native_kubeconfig": str(kubeconfig)})], timeout=300)
    out = " ".join(result.stdout.split())
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Cannot reach the Kubernetes API with kubeconfig %s" % kubeconfig in out, result.stdout[-3000:]
    assert "Nothing was cordoned or changed. Fix: set gpu_native_kubeconfig" in out
    assert "Cordon" not in "".join(line for line in result.stdout.splitlines() if line.startswith("TASK ["))


def test_under_an_awx_credential_the_message_names_its_host(tmp_path):
    # AWX's Kubernetes bearer-token credential injects K8S_AUTH_HOST and K8S_AUTH_API_KEY, no kubeconfig
    result = testlib.run_ansible_playbook(str(tmp_path / "play.yml"), None, local_fleet(tmp_path), extra_env={
        "K8S_AUTH_HOST": "https://127.0.0.1:1", "K8S_AUTH_API_KEY": "x", "K8S_AUTH_VERIFY_SSL": "false"}, timeout=300)
    out = " ".join(result.stdout.split())
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Cannot reach the Kubernetes API with K8S_AUTH_HOST https://127.0.0.1:1 (an AWX Kubernetes credential)" \
        in out, result.stdout[-3000:]
    assert "attach a working Kubernetes bearer-token credential" in out
