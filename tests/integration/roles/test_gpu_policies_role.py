# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_native.fleet.gpu_policies against the real Kubernetes control plane, through ansible-playbook.

The control plane is the upstream one (tests/kube_cluster.py, shared by the tests of this process). Each test
gets a policy name, a RuntimeClass and two namespaces of its own, and the role is told to judge only those
namespaces (``gpu_policies_namespace_match_labels``), so that its cluster-scoped ValidatingAdmissionPolicy never
touches another test's pods; the second namespace plays the system namespace (``gpu_policies_excluded_namespaces``).

The pods are the table of tests/gpu_policy_cases.py, the same table the CEL-engine unit tests judge, sent as
server-side dry runs (admission runs in full, nothing is stored). A binding is enforced about a second after it
is created: the tests poll a probe pod until it is refused, never sleep.

Beliefs of the stand-in these tests corrected: the real server refuses a GPU request that differs from its
limit in its own validation, before any admission policy (so the role no longer carries such a rule); it
refuses a policy whose CEL does not compile (422), which the role now finds in a dry run before it writes
anything; and a pod naming a RuntimeClass that does not exist is refused (403), so each test creates its own.
"""
import copy
import json
import re
import secrets

import pytest

from gpu_policy_cases import CASES, EVASION_IDS, case_pod

VAP_API = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
BINDING_API = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/"
CLUSTER_POLICY_API = "/apis/kyverno.io/v1/clusterpolicies/"
CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
KYVERNO_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.kyverno.io"},
    "spec": {"group": "kyverno.io", "scope": "Cluster",
             "names": {"plural": "clusterpolicies", "singular": "clusterpolicy", "kind": "ClusterPolicy",
                       "listKind": "ClusterPolicyList", "shortNames": ["cpol"]},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]}}

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  roles:
    - gpu_native.fleet.gpu_policies
"""


def failure_message(output):
    messages = re.findall(r"^fatal: \[localhost\]: FAILED! => (\{.*\})$", output, re.MULTILINE)
    assert messages, output[-3000:]
    return json.loads(messages[-1])["msg"]


def recap(output):
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output[-3000:]
    return {"ok": int(match.group(1)), "changed": int(match.group(2)), "failed": int(match.group(4))}


class Guardrails:
    """One test's view of the control plane: its namespaces, RuntimeClass and policy name."""

    def __init__(self, plane, run_playbook, kubeconfig):
        self.plane = plane
        self.run_playbook = run_playbook
        self.kubeconfig = kubeconfig
        suffix = secrets.token_hex(4)
        self.name = "gpu-guard-" + suffix
        self.runtime_class = "nvidia-" + suffix
        self.other_runtime_class = "runc-" + suffix  # what the table's "runc" becomes
        self.labels = {"gpu-native.io/guardrails-test": suffix}
        self.namespace = plane.create_namespace("ml-", labels=self.labels)
        self.system_namespace = plane.create_namespace("sys-", labels=self.labels)
        # as the runtime_class role makes it: pods naming it get the GPU toleration and node selector
        plane.api("POST", "/apis/node.k8s.io/v1/runtimeclasses", {
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": self.runtime_class},
            "handler": "nvidia", "scheduling": {
                "nodeSelector": {"accelerator": "nvidia-gpu"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}})
        plane.api("POST", "/apis/node.k8s.io/v1/runtimeclasses", {
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": self.other_runtime_class},
            "handler": "runc"})

    def variables(self, extra=None):
        result = {"gpu_policies_kubeconfig": self.kubeconfig, "gpu_policies_name": self.name,
                  "gpu_policies_runtime_class_name": self.runtime_class,
                  "gpu_policies_namespace_match_labels": self.labels,
                  "gpu_policies_excluded_namespaces": [self.system_namespace]}
        result.update(extra or {})
        return result

    def play(self, extra=None, args=()):
        return self.run_playbook(PLAYBOOK, args=["-e", json.dumps(self.variables(extra))] + list(args))

    def get(self, api, name=None):
        status, body = self.plane.request("GET", api + (name or self.name))
        return body if status == 200 else None

    def pod(self, case_id, namespace=None):
        """The case's pod with this test's RuntimeClass, in this test's namespace."""
        obj = case_pod(case_id, namespace or self.namespace, name=case_id[:63])
        renamed = {"nvidia": self.runtime_class, "runc": self.other_runtime_class}
        if obj["spec"].get("runtimeClassName") in renamed:
            obj["spec"]["runtimeClassName"] = renamed[obj["spec"]["runtimeClassName"]]
        return obj

    def admit(self, obj, dry_run=True):
        """(HTTP status, answer) of creating `obj` (a server-side dry run unless told otherwise)."""
        return self.plane.request("POST", "/api/v1/namespaces/%s/pods%s" % (
            obj["metadata"]["namespace"], "?dryRun=All" if dry_run else ""), obj)

    def denial(self, expected):
        """The full text the API server answers for a denial carrying `expected`."""
        return ("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s"
                % (self.name, self.name, expected.replace("runtimeClassName: nvidia",
                                                          "runtimeClassName: " + self.runtime_class)
                   .replace("runtimeClassName nvidia", "runtimeClassName " + self.runtime_class)))

    def wait_enforced(self):
        """Poll until the binding is in force (about a second after it is created)."""
        probe = self.pod("evasion-runtime-class-only")
        self.plane.wait_for("the binding %s to be enforced" % self.name,
                            lambda: self.admit(probe)[0] == 422, timeout=30)

    def cleanup(self):
        for api in (BINDING_API, VAP_API):
            self.plane.request("DELETE", api + self.name)
        for runtime_class in (self.runtime_class, self.other_runtime_class):
            self.plane.request("DELETE", "/apis/node.k8s.io/v1/runtimeclasses/" + runtime_class)
        for namespace in (self.namespace, self.system_namespace):
            self.plane.delete_namespace(namespace)


@pytest.fixture
def guardrails(kube_cluster, run_playbook, tmp_path):
    kubeconfig = kube_cluster.write_kubeconfig(str(tmp_path / "kubeconfig"))
    test = Guardrails(kube_cluster, run_playbook, kubeconfig)
    yield test
    test.cleanup()


def test_the_evasion_table_is_refused_and_legitimate_pods_admitted(guardrails):
    first = guardrails.play()
    assert first.returncode == 0, first.stdout[-4000:]
    assert recap(first.stdout)["changed"] == 2  # the policy and its binding
    binding = guardrails.get(BINDING_API)
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == guardrails.labels
    # no CEL type warning against the real Pod schema
    policy = guardrails.plane.wait_for("the policy's type check", lambda: (guardrails.get(VAP_API).get("status") or {})
                                       .get("observedGeneration") and guardrails.get(VAP_API))
    assert not (policy["status"].get("typeChecking") or {}).get("expressionWarnings"), policy["status"]
    guardrails.wait_enforced()

    outcomes = {}
    for case_id, _obj, expected in CASES:
        status, answer = guardrails.admit(guardrails.pod(case_id))
        outcomes[case_id] = (status, answer.get("message") if isinstance(answer, dict) else answer)
    wrong = {}
    for case_id, _obj, expected in CASES:
        status, message = outcomes[case_id]
        if expected is None:
            if status != 201:
                wrong[case_id] = outcomes[case_id]
        elif (status, message) != (422, 'pods "%s" is forbidden: %s' % (case_id[:63], guardrails.denial(expected))):
            wrong[case_id] = outcomes[case_id]
    assert wrong == {}
    assert len(EVASION_IDS) >= 15 and all(outcomes[case_id][0] == 422 for case_id in EVASION_IDS)

    # the system namespace (excluded) admits every evasion pod
    for case_id in EVASION_IDS:
        status, answer = guardrails.admit(guardrails.pod(case_id, namespace=guardrails.system_namespace))
        assert status == 201, (case_id, answer)

    second = guardrails.play()
    assert second.returncode == 0 and recap(second.stdout)["changed"] == 0, second.stdout[-3000:]


def test_ephemeral_containers_are_judged_on_their_subresource(guardrails):
    assert guardrails.play().returncode == 0
    guardrails.wait_enforced()
    obj = guardrails.pod("compliant-limits-only")
    status, created = guardrails.admit(obj, dry_run=False)
    assert status == 201, created
    path = "/api/v1/namespaces/%s/pods/%s" % (guardrails.namespace, obj["metadata"]["name"])

    def add_ephemeral(privileged):
        """PUT the ephemeralcontainers subresource of the current pod (the scheduler updates it: retry on 409)."""
        for _attempt in range(10):
            current = guardrails.plane.api("GET", path)
            current["spec"]["ephemeralContainers"] = [{"name": "shell", "image": "registry.invalid/busybox",
                                                       "securityContext": {"privileged": privileged}}]
            status, answer = guardrails.plane.request("PUT", path + "/ephemeralcontainers", current)
            if status != 409:
                return status, answer
        return status, answer
    status, answer = add_ephemeral(True)
    assert status == 422, answer
    assert answer["message"].endswith(guardrails.denial(
        "GPU pods must not run privileged containers, which see every GPU of the node: remove "
        "securityContext.privileged: true (container 'shell' sets securityContext.privileged: true)")), answer
    status, answer = add_ephemeral(False)
    assert status == 200, answer


def test_unequal_gpu_requests_are_refused_by_the_api_server_itself(guardrails):
    """Why the role carries no requests-equal-limits rule: core validation refuses such a pod first, with or
    without the policy, so a policy message for it could never be seen."""
    obj = guardrails.pod("compliant-limits-only")
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}
    status, answer = guardrails.admit(obj)
    assert status == 422 and "must be equal to nvidia.com/gpu limit" in answer["message"], answer
    del obj["spec"]["containers"][0]["resources"]["limits"]
    status, answer = guardrails.admit(obj)
    assert status == 422 and "Limit must be set for non overcommitable resources" in answer["message"], answer


def test_runtime_class_switch_and_audit_and_check_mode(guardrails):
    check = guardrails.play(args=["--check", "--diff"])
    assert check.returncode == 0 and recap(check.stdout)["changed"] == 2, check.stdout[-3000:]
    assert guardrails.get(VAP_API) is None and guardrails.get(BINDING_API) is None

    off = guardrails.play({"gpu_policies_refuse_runtime_class_without_gpu": False})
    assert off.returncode == 0, off.stdout[-3000:]
    # in force once the env rule refuses its pod; the RuntimeClass-only pod is then admitted
    guardrails.plane.wait_for("the binding to be enforced", lambda: guardrails.admit(
        guardrails.pod("evasion-env-in-container"))[0] == 422, timeout=30)
    assert guardrails.admit(guardrails.pod("evasion-runtime-class-only"))[0] == 201

    audit = guardrails.play({"gpu_policies_action": "Audit"})
    assert audit.returncode == 0, audit.stdout[-3000:]
    assert guardrails.get(BINDING_API)["spec"]["validationActions"] == ["Warn", "Audit"]
    guardrails.plane.wait_for("the Audit binding", lambda: guardrails.admit(
        guardrails.pod("evasion-env-in-container"))[0] == 201, timeout=30)

    enforce = guardrails.play()  # the binding's actions change back; the policy is the same
    assert enforce.returncode == 0 and recap(enforce.stdout)["changed"] == 1, enforce.stdout[-3000:]
    guardrails.wait_enforced()


def test_extra_rules_are_compiled_by_the_server_before_anything_is_written(guardrails):
    good = guardrails.play({"gpu_policies_extra_rules": [{
        "name": "team-label", "violations": "has(object.metadata.labels) && 'team' in object.metadata.labels ? [] "
                                            ": variables.gpuContainers.map(c, \"container '\" + c.name + \"'\")",
        "message": "GPU pods must carry a team label: add metadata.labels.team"}]})
    assert good.returncode == 0, good.stdout[-3000:]
    guardrails.wait_enforced()
    status, answer = guardrails.admit(guardrails.pod("compliant-limits-only"))
    assert status == 422 and answer["message"].endswith(
        "GPU pods must carry a team label: add metadata.labels.team (container 'train')"), answer
    policy_version = guardrails.get(VAP_API)["metadata"]["resourceVersion"]
    binding_version = guardrails.get(BINDING_API)["metadata"]["resourceVersion"]

    # a rule that does not compile (the server compiles with object as dyn; a field missing from the Pod
    # schema is only a status.typeChecking warning, not a compile error)
    broken = guardrails.play({"gpu_policies_extra_rules": [{
        "name": "broken", "violations": "variables.gpuContainers.map(c, c.name", "message": "never shown"}]})
    assert broken.returncode != 0
    message = failure_message(broken.stdout)
    assert message.startswith("The API server refused ValidatingAdmissionPolicy %s: " % guardrails.name), message
    assert "compilation failed" in message and "spec.variables[" in message, message
    assert message.endswith("Nothing was changed."), message
    assert guardrails.get(VAP_API)["metadata"]["resourceVersion"] == policy_version
    assert guardrails.get(BINDING_API)["metadata"]["resourceVersion"] == binding_version


def test_a_refused_policy_leaves_no_binding(guardrails):
    broken = guardrails.play({"gpu_policies_extra_rules": [{
        "name": "broken", "violations": "[1, 2", "message": "never shown"}]})
    assert broken.returncode != 0
    message = failure_message(broken.stdout)
    assert message.startswith("The API server refused ValidatingAdmissionPolicy %s: ValidatingAdmissionPolicy."
                              "admissionregistration.k8s.io \"%s\" is invalid: spec.variables[" % (
                                  guardrails.name, guardrails.name)), message
    assert "compilation failed: ERROR: <input>:1:" in message and "\\" not in message, message
    assert guardrails.get(VAP_API) is None
    assert guardrails.get(BINDING_API) is None


def test_kyverno_engine_needs_kyverno(guardrails):
    result = guardrails.play({"gpu_policies_engine": "kyverno"})
    assert result.returncode != 0
    message = failure_message(result.stdout)
    assert "does not serve ClusterPolicy in kyverno.io/v1" in message and "Fix: install Kyverno 1.11" in message
    assert guardrails.get(VAP_API) is None and guardrails.get(BINDING_API) is None


@pytest.fixture
def kyverno_crd(kube_cluster):
    """Kyverno's ClusterPolicy kind (the CRD only: no Kyverno controller judges pods here)."""
    kube_cluster.request("DELETE", CRD_API + KYVERNO_CRD["metadata"]["name"])
    kube_cluster.wait_for("an old ClusterPolicy CRD to go", lambda: kube_cluster.request(
        "GET", CRD_API + KYVERNO_CRD["metadata"]["name"])[0] == 404)
    kube_cluster.api("POST", CRD_API.rstrip("/"), copy.deepcopy(KYVERNO_CRD))

    def established():
        crd = kube_cluster.api("GET", CRD_API + KYVERNO_CRD["metadata"]["name"])
        served = kube_cluster.request("GET", "/apis/kyverno.io/v1/clusterpolicies")[0] == 200
        return served and any(c["type"] == "Established" and c["status"] == "True"
                              for c in (crd.get("status") or {}).get("conditions") or [])
    kube_cluster.wait_for("the ClusterPolicy CRD to be served", established)
    yield
    kube_cluster.request("DELETE", CRD_API + KYVERNO_CRD["metadata"]["name"])


def test_switching_engines_and_absent(guardrails, kyverno_crd):
    kyverno = guardrails.play({"gpu_policies_engine": "kyverno", "gpu_policies_action": "Audit"})
    assert kyverno.returncode == 0, kyverno.stdout[-3000:]
    cluster_policy = guardrails.get(CLUSTER_POLICY_API)
    assert cluster_policy["spec"]["validationFailureAction"] == "Audit"
    rule = cluster_policy["spec"]["rules"][0]
    assert rule["exclude"]["any"][0]["resources"]["namespaces"] == [guardrails.system_namespace]
    assert rule["match"]["any"][0]["resources"]["namespaceSelector"] == {"matchLabels": guardrails.labels}
    assert guardrails.get(VAP_API) is None

    both = guardrails.play({"gpu_policies_engine": "both"})
    assert both.returncode == 0, both.stdout[-3000:]
    assert guardrails.get(CLUSTER_POLICY_API)["spec"]["validationFailureAction"] == "Enforce"
    assert guardrails.get(VAP_API) and guardrails.get(BINDING_API)

    vap = guardrails.play({"gpu_policies_engine": "vap"})
    assert vap.returncode == 0, vap.stdout[-3000:]
    assert guardrails.get(CLUSTER_POLICY_API) is None and guardrails.get(VAP_API)

    gone = guardrails.play({"gpu_policies_state": "absent"})
    assert gone.returncode == 0, gone.stdout[-3000:]
    assert guardrails.get(VAP_API) is None and guardrails.get(BINDING_API) is None
    assert guardrails.get(CLUSTER_POLICY_API) is None
    again = guardrails.play({"gpu_policies_state": "absent"})
    assert again.returncode == 0 and recap(again.stdout)["changed"] == 0, again.stdout[-3000:]


def test_bad_variables_stop_before_any_change(guardrails):
    result = guardrails.play({"gpu_policies_extra_rules": [{"name": "team", "violations": "[]",
                                                            "message": "m", "severity": "high"}]})
    assert result.returncode != 0
    message = failure_message(result.stdout)
    assert "gpu_policies_extra_rules[0] has unknown keys severity. Fix: use only name, violations, message." \
        in message and "Nothing was changed." in message
    result = guardrails.play({"gpu_policies_gpu_taint_keys": ['x" || true || "']})
    assert result.returncode != 0 and "gpu_policies_gpu_taint_keys[0]" in failure_message(result.stdout)
    assert guardrails.get(VAP_API) is None and guardrails.get(BINDING_API) is None


def test_credentials_that_may_not_write_policies_change_nothing(guardrails, tmp_path):
    """A token without RBAC rights on admission policies: the dry run is refused (403) and says so."""
    review = guardrails.plane.api("POST", "/api/v1/namespaces/%s/serviceaccounts/default/token" % guardrails.namespace,
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                   "spec": {"expirationSeconds": 600}})
    kubeconfig = guardrails.plane.write_kubeconfig(str(tmp_path / "tenant.kubeconfig"), token=review["status"]["token"])
    result = guardrails.play({"gpu_policies_kubeconfig": kubeconfig})
    assert result.returncode != 0
    message = failure_message(result.stdout)
    assert message.startswith("The API server refused ValidatingAdmissionPolicy %s: " % guardrails.name), message
    assert "cannot create resource" in message or "forbidden" in message, message
    assert "a 403 means the credentials of gpu_policies_kubeconfig may not write these objects" in message, message
    assert message.endswith("Nothing was changed.")
    assert guardrails.get(VAP_API) is None and guardrails.get(BINDING_API) is None
