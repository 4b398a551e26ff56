# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubernetes.core's k8s, k8s_info, k8s_taint, k8s_drain and k8s_cluster_info, as the collection's roles call them,
against the real control plane (tests/kube_cluster.py) and under the onboarding job's RBAC (rbac/onboarding.yml,
rbac/namespaced.yml bound in the test's namespace): a verb the shipped ClusterRoles lack fails here.

What is real: the API server, etcd, the ReplicaSet, DaemonSet, disruption, garbage-collector and node lifecycle
controllers, the scheduler.  No kubelet runs: `KubeletStandin` writes, through the API, what the node's kubelet
would (node Ready with allocatable; the pods Running and Ready; a gracefully deleted pod removed once "stopped").
The PrometheusRule CRD is a minimal one (any spec accepted), not prometheus-operator's full schema.

Where this test ran on the Kubernetes API stand-in, several of its beliefs were the stand-in's:
- a Running pod without conditions counts as healthy for a PodDisruptionBudget (the disruption controller counts
  Ready=True only), and a budget is enforced the moment it exists (its status is written asynchronously: until the
  controller has observed it, and again after every change, evictions answer 429 "still being processed", so the
  test waits for `observedGeneration` after creating and after relaxing the budget);
- an evicted pod is gone at once (a pod bound to a node keeps a deletionTimestamp until its kubelet finalizes it);
- pods can be seeded with made-up owners (the garbage collector deletes a pod whose owner does not exist: the pods
  here come from a real ReplicaSet and DaemonSet);
- a node keeps exactly the taints it was given (the control plane manages node.kubernetes.io/* taints);
- custom resources are served without a CustomResourceDefinition.
"""
import json
import secrets
import urllib.parse

import pytest

from kube_cluster import KubeletStandin

PLAYBOOK = """
- name: kubernetes.core against the real control plane, as the onboarding job
  hosts: localhost
  gather_facts: false
  vars:
    rc: {apiVersion: node.k8s.io/v1, kind: RuntimeClass, metadata: {name: "{{ rc_name }}"}, handler: nvidia}
  tasks:
    - name: Cluster info
      kubernetes.core.k8s_cluster_info:
      register: info
    - name: Create a RuntimeClass in check mode
      kubernetes.core.k8s: {definition: "{{ rc }}"}
      check_mode: true
      register: rc_check
    - name: Look for it
      kubernetes.core.k8s_info: {api_version: node.k8s.io/v1, kind: RuntimeClass, name: "{{ rc_name }}"}
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
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: c1, namespace: "{{ ns }}"}, data: {a: "1"}}
      register: cm_apply
    - name: Apply it again
      kubernetes.core.k8s:
        apply: true
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: c1, namespace: "{{ ns }}"}, data: {a: "1"}}
      register: cm_apply_again
    - name: Server-side apply a PrometheusRule
      kubernetes.core.k8s:
        apply: true
        server_side_apply: {field_manager: gpu-native}
        definition:
          apiVersion: monitoring.coreos.com/v1
          kind: PrometheusRule
          metadata: {name: gpu, namespace: "{{ ns }}"}
          spec: {groups: [{name: gpu, rules: [{alert: GpuDown, expr: "up == 0"}]}]}
      register: ssa
    - name: Update the PrometheusRule (strategic merge falls back to merge for custom resources)
      kubernetes.core.k8s:
        definition:
          apiVersion: monitoring.coreos.com/v1
          kind: PrometheusRule
          metadata: {name: gpu, namespace: "{{ ns }}", labels: {release: prom}}
      register: cr_update
    - name: Label the node, in check mode
      kubernetes.core.k8s:
        state: patched
        kind: Node
        name: "{{ node }}"
        definition: {metadata: {labels: {accelerator: nvidia-gpu}}}
      check_mode: true
      register: label_check
    - name: Label the node
      kubernetes.core.k8s:
        state: patched
        kind: Node
        name: "{{ node }}"
        definition: {metadata: {labels: {accelerator: nvidia-gpu}}}
      register: label
    - name: Label the node again
      kubernetes.core.k8s:
        state: patched
        kind: Node
        name: "{{ node }}"
        definition: {metadata: {labels: {accelerator: nvidia-gpu}}}
      register: label_again
    - name: Taint the node
      kubernetes.core.k8s_taint:
        name: "{{ node }}"
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      register: taint
    - name: Taint it again
      kubernetes.core.k8s_taint:
        name: "{{ node }}"
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      register: taint_again
    - name: Pods on the node
      kubernetes.core.k8s_info: {kind: Pod, field_selectors: ["spec.nodeName={{ node }}"]}
      register: pods
    - name: Nodes by label
      kubernetes.core.k8s_info: {kind: Node, label_selectors: ["accelerator=nvidia-gpu", "fleet-test in ({{ mark }})"]}
      register: nodes
    - name: Drain while the PDB forbids it
      kubernetes.core.k8s_drain:
        name: "{{ node }}"
        delete_options: {ignore_daemonsets: true, wait_timeout: 5}
      register: drain_blocked
      failed_when: false
    # the test's own steps, as admin: the job may not change budgets
    - name: Relax the PDB (as admin)
      kubernetes.core.k8s:
        kubeconfig: "{{ admin_kubeconfig }}"
        state: patched
        api_version: policy/v1
        kind: PodDisruptionBudget
        name: trainer
        namespace: "{{ ns }}"
        definition: {spec: {minAvailable: 0}}
    - name: Wait until the disruption controller has observed the change (evictions answer 429 until then)
      kubernetes.core.k8s_info:
        kubeconfig: "{{ admin_kubeconfig }}"
        api_version: policy/v1
        kind: PodDisruptionBudget
        name: trainer
        namespace: "{{ ns }}"
      register: pdb
      until: >-
        pdb.resources[0].status.observedGeneration | default(0) == pdb.resources[0].metadata.generation
        and pdb.resources[0].status.disruptionsAllowed | default(0) > 0
      retries: 120
      delay: 0.5
    - name: Drain
      kubernetes.core.k8s_drain:
        name: "{{ node }}"
        delete_options: {ignore_daemonsets: true, wait_timeout: 60, wait_sleep: 1}
      register: drain
    - name: Uncordon
      kubernetes.core.k8s_drain: {name: "{{ node }}", state: uncordon}
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

PROMETHEUSRULE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": "PrometheusRule", "listKind": "PrometheusRuleList", "plural": "prometheusrules",
                       "singular": "prometheusrule"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"spec": {"type": "object",
                                                           "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


def own_taints(node):
    return [t for t in node["spec"].get("taints", []) if not t["key"].startswith("node.kubernetes.io/")]


def pods_on(plane, node):
    return plane.api("GET", "/api/v1/pods?fieldSelector=" + urllib.parse.quote("spec.nodeName=" + node))["items"]


@pytest.fixture
def prometheusrule_crd(kube_cluster):
    """The PrometheusRule CRD (minimal schema), created once per session and kept; waits until it is Established."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/prometheusrules.monitoring.coreos.com"
    kube_cluster.api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", PROMETHEUSRULE_CRD,
                     expect=(201, 409))
    kube_cluster.wait_for("the PrometheusRule CRD to be Established", lambda: any(
        c["type"] == "Established" and c["status"] == "True"
        # a CRD just created has status.conditions null until its controller writes them
        for c in (kube_cluster.api("GET", path).get("status") or {}).get("conditions") or []))
    # a CRD just established can still answer 404/429 for a moment: wait until its resources are listed
    kube_cluster.wait_for("the PrometheusRule resource to be served", lambda: kube_cluster.request(
        "GET", "/apis/monitoring.coreos.com/v1/prometheusrules")[0] == 200)


def test_kubernetes_core_modules_work_as_the_onboarding_job(kube_cluster, kube_namespace, kube_job_kubeconfig,
                                                            prometheusrule_crd, run_playbook, tmp_path):
    plane, ns = kube_cluster, kube_namespace
    mark = secrets.token_hex(3)
    node = "gpu-node-" + mark
    rc_name = "nvidia-" + mark
    plane.api("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"team": "ml", "fleet-test": mark}},
        "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}})
    placement = {"nodeSelector": {"fleet-test": mark},
                 "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                                 {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    container = [{"name": "c", "image": "example.invalid/c:1"}]
    plane.api("POST", "/apis/apps/v1/namespaces/%s/replicasets" % ns, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "trainer"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer"}},
                 "template": {"metadata": {"labels": {"app": "trainer"}},
                              "spec": dict(placement, containers=container)}}})
    plane.api("POST", "/apis/apps/v1/namespaces/%s/daemonsets" % ns, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "plugin"},
        "spec": {"selector": {"matchLabels": {"app": "plugin"}},
                 "template": {"metadata": {"labels": {"app": "plugin"}},
                              "spec": dict(placement, containers=container)}}})
    plane.api("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % ns, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainer"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}})
    kubeconfig = kube_job_kubeconfig("onboarding")
    admin_kubeconfig = plane.write_kubeconfig(str(tmp_path / "admin.kubeconfig"), namespace=ns)
    results_path = tmp_path / "results.json"
    try:
        with KubeletStandin(plane, [node]) as kubelet:
            def settled():
                pods = pods_on(plane, node)
                running = sorted(p["metadata"]["labels"]["app"] for p in pods if p["status"].get("phase") == "Running")
                pdb = plane.api("GET", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/trainer" % ns)
                observed = pdb.get("status", {}).get("observedGeneration") == pdb["metadata"]["generation"]
                return running == ["plugin", "trainer"] and observed and pdb["status"].get("currentHealthy") == 1 \
                    and pods
            before = plane.wait_for("the trainer and plugin pods Running on %s and the PDB observed" % node, settled,
                                    timeout=120)
            trainer_uid = [p["metadata"]["uid"] for p in before if p["metadata"]["labels"]["app"] == "trainer"][0]
            plugin_uid = [p["metadata"]["uid"] for p in before if p["metadata"]["labels"]["app"] == "plugin"][0]
            run = run_playbook(PLAYBOOK, kubeconfig, ["-e", json.dumps({
                "results_path": str(results_path), "node": node, "ns": ns, "rc_name": rc_name, "mark": mark,
                "admin_kubeconfig": admin_kubeconfig})])
            assert run.returncode == 0, run.stdout[-4000:]
            assert not kubelet.errors, kubelet.errors
        r = json.loads(results_path.read_text())

        assert r["info"]["version"]["server"]["kubernetes"]["gitVersion"] == plane.version
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
        assert sorted(p["metadata"]["labels"]["app"] for p in r["pods"]["resources"]) == ["plugin", "trainer"]
        assert [n["metadata"]["name"] for n in r["nodes"]["resources"]] == [node]
        assert "disruption budget" in r["drain_blocked"]["msg"], r["drain_blocked"]
        assert r["drain"]["changed"] is True and "1 Pod(s) deleted from node" in r["drain"]["result"], r["drain"]
        assert r["uncordon"]["changed"] is True

        obj = plane.api("GET", "/api/v1/nodes/" + node)
        assert obj["metadata"]["labels"] == {"team": "ml", "fleet-test": mark, "accelerator": "nvidia-gpu"}
        assert own_taints(obj) == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                                   {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        assert not obj["spec"].get("unschedulable")
        remaining = {p["metadata"]["uid"] for p in pods_on(plane, node)}
        assert trainer_uid not in remaining  # evicted (the ReplicaSet may have placed a new one since the uncordon)
        assert plugin_uid in remaining  # the DaemonSet pod was left alone
        assert plane.api("GET", "/api/v1/namespaces/%s/configmaps/c1" % ns)["data"] == {"a": "1"}
    finally:
        plane.request("DELETE", "/api/v1/nodes/" + node)
        plane.request("DELETE", "/apis/node.k8s.io/v1/runtimeclasses/" + rc_name)


POLICIES_PLAYBOOK = """
- name: The policies job's calls (roles/gpu_policies/tasks/apply.yml), as the policies job
  hosts: localhost
  gather_facts: false
  vars:
    labels: {app.kubernetes.io/managed-by: gpu_native.fleet}
    policy:
      apiVersion: admissionregistration.k8s.io/v1
      kind: ValidatingAdmissionPolicy
      metadata: {name: "{{ name }}", labels: "{{ labels }}"}
      spec:
        failurePolicy: Fail
        matchConstraints:
          resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
        validations: [{expression: "true"}]
    binding:
      apiVersion: admissionregistration.k8s.io/v1
      kind: ValidatingAdmissionPolicyBinding
      metadata: {name: "{{ name }}", labels: "{{ labels }}"}
      spec: {policyName: "{{ name }}", validationActions: [Audit]}
  tasks:
    - name: Read the cluster's APIs
      kubernetes.core.k8s_cluster_info:
      register: info
    - name: Apply
      kubernetes.core.k8s: {state: present, apply: true, definition: "{{ item }}"}
      loop: ["{{ policy }}", "{{ binding }}"]
    - name: Apply again
      kubernetes.core.k8s: {state: present, apply: true, definition: "{{ item }}"}
      loop: ["{{ policy }}", "{{ binding }}"]
      register: again
    - name: Find them by name and label
      kubernetes.core.k8s_info:
        api_version: "{{ item.apiVersion }}"
        kind: "{{ item.kind }}"
        name: "{{ item.metadata.name }}"
        label_selectors: [app.kubernetes.io/managed-by=gpu_native.fleet]
      loop: ["{{ binding }}", "{{ policy }}"]
      register: found
    - name: Remove them
      kubernetes.core.k8s: {state: absent, api_version: "{{ item.apiVersion }}", kind: "{{ item.kind }}",
                            name: "{{ item.metadata.name }}"}
      loop: ["{{ binding }}", "{{ policy }}"]
    - name: A node is none of the policies job's business
      kubernetes.core.k8s_info: {kind: Node, name: "{{ name }}"}
      register: node_read
      failed_when: false
    - name: Save the results
      ansible.builtin.copy:
        dest: "{{ results_path }}"
        mode: "0600"
        content: "{{ {'again': again, 'found': found, 'node_read': node_read,
                      'vap': 'ValidatingAdmissionPolicy' in info.apis['admissionregistration.k8s.io/v1']} | to_json }}"
"""


def test_the_policies_job_applies_finds_and_removes_admission_policies(kube_cluster, kube_job_kubeconfig,
                                                                       run_playbook, tmp_path):
    """rbac/policies.yml allows what roles/gpu_policies/tasks/apply.yml calls, and nothing about nodes."""
    name = "gpu-native-rbac-" + secrets.token_hex(3)
    results_path = tmp_path / "policies.json"
    try:
        run = run_playbook(POLICIES_PLAYBOOK, kube_job_kubeconfig("policies"),
                           ["-e", json.dumps({"name": name, "results_path": str(results_path)})])
        assert run.returncode == 0, run.stdout[-4000:]
        r = json.loads(results_path.read_text())
        assert r["vap"] is True
        assert [item["changed"] for item in r["again"]["results"]] == [False, False]
        assert [len(item["resources"]) for item in r["found"]["results"]] == [1, 1]
        refusal = json.dumps(r["node_read"]).replace("\\", "")
        assert "gpu-native-policies" in refusal and 'cannot get resource "nodes"' in refusal, r["node_read"]
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            assert kube_cluster.request("GET", "/apis/admissionregistration.k8s.io/v1/%s/%s" % (kind, name))[0] == 404
    finally:
        kube_cluster.request("DELETE", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/" + name)
        kube_cluster.request("DELETE", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/" + name)
