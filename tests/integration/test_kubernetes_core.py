"""kubernetes.core's k8s, k8s_info, k8s_taint, k8s_drain and k8s_cluster_info run unchanged against the stand-in."""
import json
import urllib.request

SEED = [
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "gpu-node-1", "labels": {"team": "ml"}},
     "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}},
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": "trainer-1", "namespace": "ml", "labels": {"app": "trainer"},
                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer",
                                       "uid": "6a0c1d7e-3c1e-4d8a-9a43-0d6b7c2f1a01", "controller": True}]},
     "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "c", "image": "example.invalid/c:1"}]},
     "status": {"phase": "Running"}},
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": "plugin-1", "namespace": "kube-system", "labels": {"app": "plugin"},
                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "plugin",
                                       "uid": "2f4e6a8c-1b3d-4e5f-8a9b-0c1d2e3f4a5b", "controller": True}]},
     "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "c", "image": "example.invalid/p:1"}]},
     "status": {"phase": "Running"}},
    {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainer", "namespace": "ml"},
     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}},
]

PLAYBOOK = """
- name: kubernetes.core against the stand-in
  hosts: localhost
  gather_facts: false
  vars:
    rc: {apiVersion: node.k8s.io/v1, kind: RuntimeClass, metadata: {name: nvidia}, handler: nvidia}
  tasks:
    - name: Cluster info
      kubernetes.core.k8s_cluster_info:
      register: info
    - name: Create a RuntimeClass in check mode
      kubernetes.core.k8s: {definition: "{{ rc }}"}
      check_mode: true
      register: rc_check
    - name: Look for it
      kubernetes.core.k8s_info: {api_version: node.k8s.io/v1, kind: RuntimeClass, name: nvidia}
      register: rc_after_check
    - name: Create it
      kubernetes.core.k8s: {definition: "{{ rc }}"}
      register: rc_create
    - name: Create it again
      kubernetes.core.k8s: {definition: "{{ rc }}"}
      register: rc_again
    - name: Change the immutable handler
      kubernetes.core.k8s:
        definition: "{{ rc | combine({'handler': 'nvidia-cdi'}) }}"
      register: rc_immutable
      failed_when: false
    - name: Apply a ConfigMap
      kubernetes.core.k8s:
        apply: true
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: c1, namespace: default}, data: {a: "1"}}
      register: cm_apply
    - name: Apply it again
      kubernetes.core.k8s:
        apply: true
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: c1, namespace: default}, data: {a: "1"}}
      register: cm_apply_again
    - name: Server-side apply a PrometheusRule
      kubernetes.core.k8s:
        apply: true
        server_side_apply: {field_manager: gpu-native}
        definition:
          apiVersion: monitoring.coreos.com/v1
          kind: PrometheusRule
          metadata: {name: gpu, namespace: default}
          spec: {groups: [{name: gpu, rules: [{alert: GpuDown, expr: "up == 0"}]}]}
      register: ssa
    - name: Update the PrometheusRule (strategic merge falls back to merge for custom resources)
      kubernetes.core.k8s:
        definition:
          apiVersion: monitoring.coreos.com/v1
          kind: PrometheusRule
          metadata: {name: gpu, namespace: default, labels: {release: prom}}
      register: cr_update
    - name: Label the node, in check mode
      kubernetes.core.k8s:
        state: patched
        kind: Node
        name: gpu-node-1
        definition: {metadata: {labels: {accelerator: nvidia-gpu}}}
      check_mode: true
      register: label_check
    - name: Label the node
      kubernetes.core.k8s:
        state: patched
        kind: Node
        name: gpu-node-1
        definition: {metadata: {labels: {accelerator: nvidia-gpu}}}
      register: label
    - name: Label the node again
      kubernetes.core.k8s:
        state: patched
        kind: Node
        name: gpu-node-1
        definition: {metadata: {labels: {accelerator: nvidia-gpu}}}
      register: label_again
    - name: Taint the node
      kubernetes.core.k8s_taint:
        name: gpu-node-1
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      register: taint
    - name: Taint it again
      kubernetes.core.k8s_taint:
        name: gpu-node-1
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      register: taint_again
    - name: Pods on the node
      kubernetes.core.k8s_info: {kind: Pod, field_selectors: ["spec.nodeName=gpu-node-1"]}
      register: pods
    - name: Nodes by label
      kubernetes.core.k8s_info: {kind: Node, label_selectors: ["accelerator=nvidia-gpu", "team in (ml)"]}
      register: nodes
    - name: Drain while the PDB forbids it
      kubernetes.core.k8s_drain:
        name: gpu-node-1
        delete_options: {ignore_daemonsets: true, wait_timeout: 5}
      register: drain_blocked
      failed_when: false
    - name: Relax the PDB
      kubernetes.core.k8s:
        state: patched
        api_version: policy/v1
        kind: PodDisruptionBudget
        name: trainer
        namespace: ml
        definition: {spec: {minAvailable: 0}}
    - name: Drain
      kubernetes.core.k8s_drain:
        name: gpu-node-1
        delete_options: {ignore_daemonsets: true, wait_timeout: 10, wait_sleep: 1}
      register: drain
    - name: Uncordon
      kubernetes.core.k8s_drain: {name: gpu-node-1, state: uncordon}
      register: uncordon
    - name: Save the results
      ansible.builtin.copy:
        dest: "{{ results_path }}"
        mode: "0600"
        content: "{{ {'info': info, 'rc_check': rc_check, 'rc_after_check': rc_after_check,
                      'rc_create': rc_create, 'rc_again': rc_again, 'rc_immutable': rc_immutable,
                      'cm_apply': cm_apply, 'cm_apply_again': cm_apply_again, 'ssa': ssa,
                      'cr_update': cr_update, 'label_check': label_check, 'label': label,
                      'label_again': label_again, 'taint': taint, 'taint_again': taint_again,
                      'pods': pods, 'nodes': nodes, 'drain_blocked': drain_blocked, 'drain': drain,
                      'uncordon': uncordon} | to_json }}"
"""


def get(server, path):
    req = urllib.request.Request(server.url + path, headers={"Authorization": "Bearer " + server.token})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_kubernetes_core_modules_work_unchanged(standin_factory, run_playbook, tmp_path):
    server = standin_factory(seed=SEED)
    kubeconfig = server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    results_path = tmp_path / "results.json"
    run = run_playbook(PLAYBOOK, kubeconfig, ["-e", "results_path=%s" % results_path])
    assert run.returncode == 0, run.stdout[-4000:]
    r = json.loads(results_path.read_text())

    assert r["info"]["version"]["server"]["kubernetes"]["gitVersion"].startswith("v1.")
    assert r["rc_check"]["changed"] is True and r["rc_after_check"]["resources"] == []
    assert r["rc_create"]["changed"] is True and r["rc_create"]["result"]["handler"] == "nvidia"
    assert r["rc_again"]["changed"] is False
    assert "field is immutable" in r["rc_immutable"]["msg"]
    assert r["cm_apply"]["changed"] is True and r["cm_apply_again"]["changed"] is False
    assert r["ssa"]["changed"] is True and r["ssa"]["result"]["spec"]["groups"][0]["name"] == "gpu"
    assert r["cr_update"]["changed"] is True and r["cr_update"]["result"]["metadata"]["labels"] == {"release": "prom"}
    assert r["label_check"]["changed"] is True
    assert r["label"]["changed"] is True and r["label_again"]["changed"] is False
    assert r["taint"]["changed"] is True and r["taint_again"]["changed"] is False
    assert sorted(p["metadata"]["name"] for p in r["pods"]["resources"]) == ["plugin-1", "trainer-1"]
    assert [n["metadata"]["name"] for n in r["nodes"]["resources"]] == ["gpu-node-1"]
    assert "disruption budget" in r["drain_blocked"]["msg"]
    assert r["drain"]["changed"] is True and "1 Pod(s) deleted from node" in r["drain"]["result"]
    assert r["uncordon"]["changed"] is True

    node = get(server, "/api/v1/nodes/gpu-node-1")
    assert node["metadata"]["labels"] == {"team": "ml", "accelerator": "nvidia-gpu"}
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                                      {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert not node["spec"].get("unschedulable")
    remaining = get(server, "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-1")["items"]
    assert [p["metadata"]["name"] for p in remaining] == ["plugin-1"]  # DaemonSet pod left alone
    assert get(server, "/api/v1/namespaces/default/configmaps/c1")["data"] == {"a": "1"}
