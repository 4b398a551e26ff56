"""gpu_native.fleet.gpu_readiness's Grafana dashboards as ConfigMaps, applied with kubernetes.core.k8s to the real
control plane (tests/kube_cluster.py): one ConfigMap per file in files/dashboards, labelled grafana_dashboard "1"
(kube-prometheus-stack's sidecar), the JSON unchanged as a string, the folder annotation when asked, idempotent.
"""
import json
import os
import re

from testlib import REPO_ROOT

DASHBOARD_DIR = os.path.join(REPO_ROOT, "roles", "gpu_readiness", "files", "dashboards")

PLAY = """
- name: The dashboards only
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Dashboards
      ansible.builtin.include_role:
        name: gpu_native.fleet.gpu_readiness
        tasks_from: grafana_dashboards
"""


def recap(output):
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output[-3000:]
    return {"changed": int(match.group(2)), "failed": int(match.group(4))}


def test_dashboard_configmaps(run_playbook, kube_cluster, kube_namespace, kube_kubeconfig):
    extra = {"gpu_readiness_grafana_dashboards_namespace": kube_namespace,
             "gpu_readiness_grafana_dashboards_folder": "GPU fleet",
             "gpu_readiness_grafana_dashboards_labels": {"release": "kps"},
             "gpu_readiness_kubeconfig_controller": kube_kubeconfig}
    args = ["-e", json.dumps(extra)]
    first = run_playbook(PLAY, kube_kubeconfig, args)
    assert first.returncode == 0, first.stdout[-4000:]
    assert recap(first.stdout)["changed"] == 1  # one task, three items
    files = sorted(os.listdir(DASHBOARD_DIR))
    listed = kube_cluster.api("GET", "/api/v1/namespaces/%s/configmaps?labelSelector=grafana_dashboard%%3D1"
                              % kube_namespace)["items"]
    assert sorted(item["metadata"]["name"] + ".json" for item in listed) == files
    for item in listed:
        name = item["metadata"]["name"] + ".json"
        assert item["metadata"]["labels"]["release"] == "kps"
        assert item["metadata"]["annotations"] == {"grafana_folder": "GPU fleet"}
        assert list(item["data"]) == [name]
        with open(os.path.join(DASHBOARD_DIR, name)) as handle:
            assert json.loads(item["data"][name]) == json.load(handle)

    again = run_playbook(PLAY, kube_kubeconfig, args)
    assert again.returncode == 0 and recap(again.stdout)["changed"] == 0, again.stdout[-4000:]
