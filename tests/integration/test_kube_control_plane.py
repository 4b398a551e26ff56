"""The real control plane of the tests (tests/kube_cluster.py) is the upstream one, and each part of it works.

Each test proves one component by a behaviour only that component has: the API server's version and its
admission, the controller-manager's ServiceAccount, token and disruption controllers, the scheduler.
"""
import base64
import json
import secrets
import subprocess

import pytest

import kube_cluster as control_plane


def pod(name, node_name=None, labels=None):
    spec = {"containers": [{"name": "main", "image": "registry.invalid/pause:3.10"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def test_the_binaries_are_the_pinned_upstream_release(kube_cluster):
    version = kube_cluster.api("GET", "/version")
    assert version["gitVersion"] == kube_cluster.version == "v1.35.4"
    assert (version["major"], version["minor"]) == ("1", "35")
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"):
        out = subprocess.run([kube_cluster.binaries + "/" + name, "--version"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, check=True).stdout
        assert out.strip() == "Kubernetes v1.35.4", (name, out)
    assert kube_cluster.startup_seconds is not None
    # the API groups the collection's roles use, and resource.k8s.io/v1 for the DRA work
    groups = {g["name"]: [v["version"] for v in g["versions"]] for g in kube_cluster.api("GET", "/apis")["groups"]}
    for group, version in (("node.k8s.io", "v1"), ("policy", "v1"), ("admissionregistration.k8s.io", "v1"),
                           ("apps", "v1"), ("resource.k8s.io", "v1")):
        assert version in groups.get(group, []), (group, groups.get(group))


def test_a_new_namespace_gets_its_default_serviceaccount_token_and_root_ca(kube_cluster, kube_namespace):
    ns = kube_namespace
    # the serviceaccount controller made `default` (the fixture waited for it); the root-ca publisher the CA
    account = kube_cluster.api("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % ns)
    assert account["metadata"]["name"] == "default"
    ca = kube_cluster.wait_for("kube-root-ca.crt", lambda: kube_cluster.request(
        "GET", "/api/v1/namespaces/%s/configmaps/kube-root-ca.crt" % ns)[1].get("data"))
    with open(kube_cluster.pki.ca_path, encoding="ascii") as handle:
        assert ca["ca.crt"].strip() == handle.read().strip()
    # the token controller (--service-account-private-key-file, --root-ca-file) fills a legacy token Secret
    kube_cluster.api("POST", "/api/v1/namespaces/%s/secrets" % ns, {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "legacy-token", "annotations": {"kubernetes.io/service-account.name": "default"}}})
    data = kube_cluster.wait_for("the token controller to fill legacy-token", lambda: kube_cluster.api(
        "GET", "/api/v1/namespaces/%s/secrets/legacy-token" % ns).get("data", {}).get("token"))
    token = base64.b64decode(data).decode()
    # the API server accepts it (authentication) and RBAC refuses what the account was not granted
    review = kube_cluster.api("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, token=token)
    assert review["status"]["userInfo"]["username"] == "system:serviceaccount:%s:default" % ns
    status, answer = kube_cluster.request("GET", "/api/v1/nodes", token=token)
    assert status == 403, answer
    assert 'cannot list resource "nodes"' in answer["message"]
    # and a bad token is 401, not 403
    assert kube_cluster.request("GET", "/api/v1/nodes", token="not-a-token")[0] == 401


def test_a_pod_without_a_node_stays_pending_unschedulable(kube_cluster, kube_namespace):
    ns = kube_namespace
    created = kube_cluster.api("POST", "/api/v1/namespaces/%s/pods" % ns, pod("unplaced"))
    # admission and defaulting of a real server
    assert created["status"]["phase"] == "Pending" and created["status"]["qosClass"] == "BestEffort"
    assert {t["key"] for t in created["spec"]["tolerations"]} == {"node.kubernetes.io/not-ready",
                                                                  "node.kubernetes.io/unreachable"}

    def scheduled_condition():
        conditions = kube_cluster.api("GET", "/api/v1/namespaces/%s/pods/unplaced" % ns)["status"].get("conditions", [])
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)
    condition = kube_cluster.wait_for("the scheduler's verdict", scheduled_condition)
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable", condition
    # no node can take it: none registered ("no nodes available"), or only other tests' nodes, not ready ("0/n")
    assert condition["message"] == "no nodes available to schedule pods" or \
        condition["message"].startswith("0/"), condition
    assert "nodeName" not in kube_cluster.api("GET", "/api/v1/namespaces/%s/pods/unplaced" % ns)["spec"]


def test_an_eviction_under_a_pod_disruption_budget_answers_429(kube_cluster, kube_namespace):
    ns = kube_namespace
    node = "pdb-node-" + secrets.token_hex(3)
    kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    try:
        kube_cluster.api("POST", "/api/v1/namespaces/%s/pods" % ns, pod("guarded", node, {"app": "guarded"}))
        # no kubelet runs it: write the status a kubelet would (a Pending pod is evicted whatever its budget)
        kube_cluster.api("PATCH", "/api/v1/namespaces/%s/pods/guarded/status" % ns,
                         {"status": {"phase": "Running",
                                     "conditions": [{"type": "Ready", "status": "True"}]}},
                         content_type="application/merge-patch+json")
        kube_cluster.api("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % ns, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-one"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})

        def observed():
            budget = kube_cluster.api("GET", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/keep-one" % ns)
            status = budget.get("status", {})
            return status if status.get("observedGeneration") == budget["metadata"]["generation"] else None
        status = kube_cluster.wait_for("the disruption controller to observe keep-one", observed)
        assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (1, 1, 0)

        code, answer = kube_cluster.request(
            "POST", "/api/v1/namespaces/%s/pods/guarded/eviction" % ns,
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "guarded", "namespace": ns}})
        assert code == 429, answer
        assert answer["reason"] == "TooManyRequests"
        assert "Cannot evict pod as it would violate the pod's disruption budget." in answer["message"]
        assert answer["details"]["causes"][0] == {"reason": "DisruptionBudget",
                                                  "message": "The disruption budget keep-one needs 1 healthy pods "
                                                             "and has 1 currently"}
        assert kube_cluster.api("GET", "/api/v1/namespaces/%s/pods/guarded" % ns)["metadata"].get(
            "deletionTimestamp") is None
    finally:
        kube_cluster.request("DELETE", "/api/v1/nodes/" + node)


def test_a_validating_admission_policy_whose_cel_does_not_compile_is_refused(kube_cluster):
    name = "broken-cel-" + secrets.token_hex(3)
    code, answer = kube_cluster.request("POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "validations": [{"expression": "object.spec.containers.all(c, c.image.startsWith('x')"}]}})
    assert code == 422, answer
    assert answer["reason"] == "Invalid"
    assert answer["details"]["causes"][0]["field"] == "spec.validations[0].expression"
    assert "compilation failed" in answer["details"]["causes"][0]["message"]
    assert kube_cluster.request(
        "GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/" + name)[0] == 404


def test_pod_security_admission_is_on(kube_cluster):
    ns = kube_cluster.create_namespace(labels={"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        code, answer = kube_cluster.request("POST", "/api/v1/namespaces/%s/pods" % ns, pod("loose"))
        assert code == 403, answer
        assert 'violates PodSecurity "restricted:latest"' in answer["message"]
    finally:
        kube_cluster.delete_namespace(ns)


def test_the_control_plane_listens_on_loopback_only(kube_cluster):
    assert kube_cluster.url.startswith("https://127.0.0.1:")
    with open("/proc/net/tcp", encoding="ascii") as handle:
        rows = [line.split() for line in handle.readlines()[1:]]
    ours = set(kube_cluster.ports.values())
    listening = {int(row[1].split(":")[1], 16): row[1].split(":")[0] for row in rows if row[3] == "0A"}
    for port in ours:
        assert listening.get(port) == "0100007F", (port, listening.get(port))  # 127.0.0.1
    assert json.loads(open(kube_cluster.kubeconfig, encoding="utf-8").read())["clusters"][0]["cluster"]["server"] \
        == kube_cluster.url


def test_start_fails_with_the_fix_when_the_binaries_are_missing(tmp_path):
    plane = control_plane.ControlPlane(str(tmp_path / "data"), binaries=str(tmp_path / "nothing"))
    with pytest.raises(control_plane.ControlPlaneError) as err:
        plane.start()
    assert "Fix: run `make kube-build`" in str(err.value)
    assert not plane.processes
