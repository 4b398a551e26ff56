# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_policies role against the Kubernetes API stand-in: the applied ValidatingAdmissionPolicy refuses
non-compliant GPU pods with HTTP 422 and the policy's message, and admits compliant ones."""
import json
import os
import sys
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from standin_helpers import NotFound, api_get, run_ansible_playbook, start_k8s_standin  # noqa: E402

VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpu-pod-guardrails"
BINDING = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/gpu-pod-guardrails"
CLUSTER_POLICY = "/apis/kyverno.io/v1/clusterpolicies/gpu-pod-guardrails"

NAMESPACES = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
              for name in ("ml", "gpu-operator")]
KYVERNO_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.kyverno.io"},
    "spec": {"group": "kyverno.io", "scope": "Cluster",
             "names": {"plural": "clusterpolicies", "singular": "clusterpolicy", "kind": "ClusterPolicy",
                       "listKind": "ClusterPolicyList", "shortNames": ["cpol"]},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]}}

PLAY = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gpu_native.fleet.gpu_policies
      vars: %s
"""

RUNTIME_MESSAGE = ("ValidatingAdmissionPolicy 'gpu-pod-guardrails' with binding 'gpu-pod-guardrails' denied request: "
                   "GPU pods must set runtimeClassName: nvidia (container 'train' requests nvidia.com/gpu)")


def gpu_pod(name, namespace="ml", runtime_class="nvidia", privileged=False, resources=None):
    container = {"name": "train", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                 "resources": resources or {"limits": {"nvidia.com/gpu": "1"}},
                 "securityContext": {"privileged": privileged}}
    spec = {"containers": [container]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def create_pod(server, obj):
    request = urllib.request.Request(
        "%s/api/v1/namespaces/%s/pods" % (server.url, obj["metadata"]["namespace"]),
        data=json.dumps(obj).encode(), method="POST",
        headers={"Authorization": "Bearer " + server.token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def api(tmp_path):
    server, kubeconfig = start_k8s_standin(tmp_path, NAMESPACES)
    server.kubeconfig = kubeconfig
    yield server
    server.stop()


@pytest.fixture
def kyverno_api(tmp_path):
    server, kubeconfig = start_k8s_standin(tmp_path, [KYVERNO_CRD] + NAMESPACES)
    server.kubeconfig = kubeconfig
    yield server
    server.stop()


def play(tmp_path, api, role_vars, *args, env_kubeconfig=True):
    path = tmp_path / "play.yml"
    path.write_text(PLAY % json.dumps(role_vars))
    return run_ansible_playbook(str(path), api.kubeconfig if env_kubeconfig else None, args)


def absent(api, path):
    try:
        api_get(api, path)
    except NotFound:
        return True
    return False


def test_vap_refuses_noncompliant_gpu_pods_and_admits_compliant_ones(tmp_path, api):
    # the connection comes from the role's variable alone (module_defaults), not K8S_AUTH_KUBECONFIG
    first = play(tmp_path, api, {"gpu_policies_kubeconfig": api.kubeconfig}, env_kubeconfig=False)
    assert first.returncode == 0, first.stdout
    assert api_get(api, BINDING)["spec"]["validationActions"] == ["Deny"]
    version = api_get(api, VAP)["metadata"]["resourceVersion"]

    code, body = create_pod(api, gpu_pod("no-runtime-class", runtime_class=None))
    assert code == 422, body
    assert body["reason"] == "Invalid"
    assert body["message"] == 'pods "no-runtime-class" is forbidden: ' + RUNTIME_MESSAGE
    code, body = create_pod(api, gpu_pod("privileged", privileged=True))
    assert code == 422 and body["message"].endswith(
        "GPU pods must not run privileged containers, which see every GPU of the node: remove "
        "securityContext.privileged: true (container 'train' sets securityContext.privileged: true)"), body
    code, body = create_pod(api, gpu_pod("unequal", resources={"limits": {"nvidia.com/gpu": "2"},
                                                               "requests": {"nvidia.com/gpu": "1"}}))
    assert code == 422 and "GPU requests must equal limits" in body["message"], body

    assert create_pod(api, gpu_pod("compliant"))[0] == 201
    assert create_pod(api, gpu_pod("mig", resources={"limits": {"nvidia.com/mig-1g.10gb": "1"}}))[0] == 201
    assert create_pod(api, gpu_pod("cpu-only", runtime_class=None, resources={"limits": {"cpu": "1"}}))[0] == 201
    assert create_pod(api, gpu_pod("operator", namespace="gpu-operator", runtime_class=None, privileged=True))[0] \
        == 201

    second = play(tmp_path, api, {"gpu_policies_kubeconfig": api.kubeconfig}, env_kubeconfig=False)
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout
    assert api_get(api, VAP)["metadata"]["resourceVersion"] == version


def test_audit_admits_and_check_mode_writes_nothing(tmp_path, api):
    check = play(tmp_path, api, {}, "--check", "--diff")
    assert check.returncode == 0 and "changed=1" in check.stdout, check.stdout
    assert absent(api, VAP) and absent(api, BINDING)
    audit = play(tmp_path, api, {"gpu_policies_action": "Audit"})
    assert audit.returncode == 0, audit.stdout
    assert api_get(api, BINDING)["spec"]["validationActions"] == ["Warn", "Audit"]
    assert create_pod(api, gpu_pod("no-runtime-class", runtime_class=None))[0] == 201
    enforce = play(tmp_path, api, {})
    assert enforce.returncode == 0 and "changed=1" in enforce.stdout, enforce.stdout
    assert create_pod(api, gpu_pod("no-runtime-class-2", runtime_class=None))[0] == 422


def test_kyverno_engine_needs_kyverno(tmp_path, api):
    result = play(tmp_path, api, {"gpu_policies_engine": "kyverno"})
    assert result.returncode != 0
    assert "does not serve ClusterPolicy in kyverno.io/v1" in result.stdout
    assert "Fix: install Kyverno 1.11 or newer" in result.stdout
    assert absent(api, VAP) and absent(api, BINDING)


def test_switching_engines_and_absent(tmp_path, kyverno_api):
    api = kyverno_api
    kyverno = play(tmp_path, api, {"gpu_policies_engine": "kyverno", "gpu_policies_action": "Audit"})
    assert kyverno.returncode == 0, kyverno.stdout
    cluster_policy = api_get(api, CLUSTER_POLICY)
    assert cluster_policy["spec"]["validationFailureAction"] == "Audit"
    assert cluster_policy["spec"]["rules"][0]["exclude"]["any"][0]["resources"]["namespaces"] == [
        "kube-system", "gpu-operator"]
    assert absent(api, VAP)

    both = play(tmp_path, api, {"gpu_policies_engine": "both"})
    assert both.returncode == 0, both.stdout
    assert api_get(api, CLUSTER_POLICY)["spec"]["validationFailureAction"] == "Enforce"
    assert api_get(api, VAP) and api_get(api, BINDING)

    vap = play(tmp_path, api, {"gpu_policies_engine": "vap"})
    assert vap.returncode == 0, vap.stdout
    assert absent(api, CLUSTER_POLICY) and api_get(api, VAP)

    gone = play(tmp_path, api, {"gpu_policies_state": "absent"})
    assert gone.returncode == 0, gone.stdout
    assert absent(api, VAP) and absent(api, BINDING) and absent(api, CLUSTER_POLICY)
    again = play(tmp_path, api, {"gpu_policies_state": "absent"})
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout


def test_bad_variables_stop_before_any_change(tmp_path, api):
    result = play(tmp_path, api, {"gpu_policies_extra_rules": [{"name": "team", "violations": "[]",
                                                                "message": "m", "severity": "high"}]})
    assert result.returncode != 0
    assert ("gpu_policies_extra_rules[0] has unknown keys severity. Fix: use only name, violations, message."
            in result.stdout), result.stdout
    assert "Nothing was changed." in result.stdout
    assert absent(api, VAP) and absent(api, BINDING)
