"""The stand-in enforces bound ValidatingAdmissionPolicies on Pod create, like kube-apiserver."""
import json
import sys
import urllib.error
import urllib.request

import pytest

VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


def call(server, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + server.token)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def policy(failure_policy="Fail", expression="object.spec.containers.all(c, c.image.startsWith('registry.local/'))"):
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "local-images"},
            "spec": {"failurePolicy": failure_policy,
                     "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["pods"]}]},
                     "matchConditions": [{"name": "not-skipped",
                                          "expression": "!has(object.metadata.labels) || "
                                                        "!('skip' in object.metadata.labels)"}],
                     "variables": [{"name": "first", "expression": "object.spec.containers[0].name"}],
                     "validations": [{"expression": expression,
                                      "message": "images must come from registry.local",
                                      "messageExpression": "'container ' + variables.first + "
                                                           "' must use an image from registry.local'"}]}}


def binding(actions=("Deny",), excluded=("kube-system",), policy_name="local-images"):
    spec = {"policyName": policy_name, "validationActions": list(actions)}
    if excluded:
        spec["matchResources"] = {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(excluded)}]}}
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "local-images-binding"}, "spec": spec}


def pod(name, image, namespace="default", labels=None):
    meta = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "app", "image": image}]}}


def create_pod(server, obj, query=""):
    return call(server, "POST", "/api/v1/namespaces/%s/pods%s" % (obj["metadata"]["namespace"], query), obj)


@pytest.fixture
def bound(standin):
    assert call(standin, "POST", VAP, policy())[0] == 201
    assert call(standin, "POST", BINDINGS, binding())[0] == 201
    return standin


def test_discovery_serves_admissionregistration_v1(standin):
    code, body = call(standin, "GET", "/apis/admissionregistration.k8s.io/v1")
    assert code == 200
    assert sorted(item["kind"] for item in body["resources"] if "/" not in item["name"]) == [
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def test_denied_pod_gets_422_with_the_policy_message(bound):
    code, body = create_pod(bound, pod("bad", "docker.io/library/busybox"))
    expected = ("ValidatingAdmissionPolicy 'local-images' with binding 'local-images-binding' denied request: "
                "container app must use an image from registry.local")
    assert code == 422
    assert body["reason"] == "Invalid" and body["code"] == 422
    assert body["message"] == 'pods "bad" is forbidden: ' + expected
    assert body["details"] == {"name": "bad", "kind": "pods", "causes": [{"message": expected}]}
    assert call(bound, "GET", "/api/v1/namespaces/default/pods/bad")[0] == 404


def test_compliant_pod_is_created(bound):
    code, body = create_pod(bound, pod("good", "registry.local/app:1"))
    assert code == 201 and body["metadata"]["name"] == "good"


def test_dry_run_is_judged_too(bound):
    assert create_pod(bound, pod("bad", "busybox"), "?dryRun=All")[0] == 422


def test_match_condition_false_and_excluded_namespace_skip_the_policy(bound):
    assert create_pod(bound, pod("skipped", "busybox", labels={"skip": "yes"}))[0] == 201
    assert create_pod(bound, pod("system", "busybox", namespace="kube-system"))[0] == 201


def test_namespaces_created_later_carry_the_name_label(bound):
    assert call(bound, "POST", "/api/v1/namespaces", {"metadata": {"name": "ml"}})[0] == 201
    assert create_pod(bound, pod("bad", "busybox", namespace="ml"))[0] == 422


def test_message_falls_back_to_message_when_message_expression_fails(standin):
    broken = policy()
    broken["spec"]["validations"][0]["messageExpression"] = "variables.nope + 'x'"
    assert call(standin, "POST", VAP, broken)[0] == 201
    assert call(standin, "POST", BINDINGS, binding())[0] == 201
    code, body = create_pod(standin, pod("bad", "busybox"))
    assert code == 422 and body["message"].endswith("denied request: images must come from registry.local")


@pytest.mark.parametrize("failure_policy,expected", [("Fail", 422), ("Ignore", 201)])
def test_evaluation_error_follows_failure_policy(standin, failure_policy, expected):
    assert call(standin, "POST", VAP, policy(failure_policy, "object.spec.noSuchField == 1"))[0] == 201
    assert call(standin, "POST", BINDINGS, binding())[0] == 201
    code, body = create_pod(standin, pod("p", "registry.local/app:1"))
    assert code == expected
    if expected == 422:
        assert "expression 'object.spec.noSuchField == 1' resulted in error" in body["message"]


@pytest.mark.parametrize("actions", [("Warn",), ("Audit",), ("Warn", "Audit")])
def test_warn_and_audit_never_refuse(standin, actions):
    assert call(standin, "POST", VAP, policy())[0] == 201
    assert call(standin, "POST", BINDINGS, binding(actions))[0] == 201
    assert create_pod(standin, pod("p", "busybox"))[0] == 201


def test_binding_without_its_policy_does_nothing(standin):
    assert call(standin, "POST", BINDINGS, binding(policy_name="missing"))[0] == 201
    assert create_pod(standin, pod("p", "busybox"))[0] == 201


def test_starts_and_serves_without_the_cel_package_until_a_policy_is_bound(standin, monkeypatch):
    server_globals = type(standin).__init__.__globals__  # the stand-in module this fixture runs
    monkeypatch.setitem(server_globals, "_CEL_STATE", {})
    monkeypatch.setitem(sys.modules, "cel_expr_python", None)  # import fails as if not installed
    assert create_pod(standin, pod("plain", "busybox"))[0] == 201
    assert call(standin, "POST", VAP, policy())[0] == 201
    assert call(standin, "POST", BINDINGS, binding())[0] == 201
    code, body = create_pod(standin, pod("p", "busybox"))
    assert code == 500
    assert "cel-expr-python package is missing" in body["message"] and "requirements.txt" in body["message"]
