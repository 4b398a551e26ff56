# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rendering of the GPU pod guardrails: object shapes per engine, and every bad input refused clearly."""
import copy
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter.gpu_policy_objects import gpu_policy_objects
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.gpu_policies import (
    GpuPolicyError,
    render_policy_objects,
)

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
with open(os.path.join(REPO_ROOT, "roles", "gpu_policies", "vars", "main.yml"), encoding="utf-8") as _handle:
    CEL_DATA = yaml.safe_load(_handle)["__gpu_policies_cel"]

RULE = {"name": "team-label", "violations": "[]", "message": "add a team label"}


def kinds(objects):
    return [(item["apiVersion"], item["kind"], item["metadata"]["name"]) for item in objects]


def test_engines_render_their_objects():
    assert kinds(render_policy_objects(CEL_DATA)) == [
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "gpu-pod-guardrails"),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", "gpu-pod-guardrails")]
    assert kinds(render_policy_objects(CEL_DATA, engine="kyverno", name="gpu")) == [
        ("kyverno.io/v1", "ClusterPolicy", "gpu")]
    assert len(render_policy_objects(CEL_DATA, engine="both")) == 3


def test_vap_shape_and_binding():
    policy, binding = render_policy_objects(CEL_DATA, excluded_namespaces=["kube-system", "gpu-operator"])
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0] == {
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    assert spec["matchConstraints"]["resourceRules"][1]["resources"] == ["pods/ephemeralcontainers"]
    assert [item["name"] for item in spec["matchConditions"]] == ["reaches-for-gpus"]
    assert [item["expression"] for item in spec["validations"]] == [
        "variables.rule_gpu_no_privileged.size() == 0", "variables.rule_gpu_runtime_class.size() == 0",
        "variables.rule_gpu_env_without_gpu.size() == 0", "variables.rule_gpu_runtime_class_without_gpu.size() == 0",
        "variables.rule_gpu_node_no_privileged.size() == 0"]
    assert all("\n" not in item["expression"] for item in spec["variables"] + spec["validations"])
    assert binding["spec"] == {
        "policyName": "gpu-pod-guardrails", "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "gpu-operator"]}]}}}
    assert policy["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu_native.fleet"}
    _policy, binding = render_policy_objects(CEL_DATA, excluded_namespaces=[])
    assert "matchResources" not in binding["spec"]


def test_actions_map_to_both_engines():
    _policy, binding = render_policy_objects(CEL_DATA, action="Audit")
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]
    _policy, binding = render_policy_objects(CEL_DATA, action="Audit", vap_validation_actions=["Audit"])
    assert binding["spec"]["validationActions"] == ["Audit"]
    policy = render_policy_objects(CEL_DATA, engine="kyverno", action="Audit")[0]
    assert policy["spec"]["validationFailureAction"] == "Audit"
    policy = render_policy_objects(CEL_DATA, engine="kyverno", excluded_namespaces=["gpu-operator"])[0]
    rule = policy["spec"]["rules"][0]
    assert rule["exclude"] == {"any": [{"resources": {"namespaces": ["gpu-operator"]}}]}
    assert rule["match"]["any"][0] == {"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}}
    assert policy["spec"]["validationFailureAction"] == "Enforce"


def test_placeholders_are_filled_and_quoted():
    policy = render_policy_objects(CEL_DATA, runtime_class_name="nvidia-cdi",
                                   gpu_resources=["nvidia.com/gpu", "nvidia.com/mig-*"])[0]
    text = yaml.safe_dump(policy)
    assert "@" not in text
    variables = {item["name"]: item["expression"] for item in policy["spec"]["variables"]}
    assert variables["gpuResourceNames"] == '["nvidia.com/gpu"]'
    assert variables["gpuResourcePrefixes"] == '["nvidia.com/mig-"]'
    assert '== "nvidia-cdi"' in variables["rule_gpu_runtime_class"]
    assert policy["spec"]["validations"][1]["message"] == "GPU pods must set runtimeClassName: nvidia-cdi"
    assert '["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"]' in variables["rule_gpu_env_without_gpu"]
    assert '["void", "none"]' in variables["rule_gpu_env_without_gpu"]


def test_isolation_placeholders_follow_the_variables():
    policy = render_policy_objects(CEL_DATA, gpu_taint_keys=["example.com/gpu"],
                                   gpu_node_labels=["accelerator", "nvidia.com/*"],
                                   resource_claims_are_gpu=False, refuse_runtime_class_without_gpu=False)[0]
    variables = {item["name"]: item["expression"] for item in policy["spec"]["variables"]}
    assert 't.key in ["example.com/gpu"]' in variables["onGpuNodes"]
    assert 'k in ["accelerator"] || ["nvidia.com/"].exists(p, k.startsWith(p))' in variables["onGpuNodes"]
    assert variables["isGpuPod"].endswith("(false && has(object.spec.resourceClaims) "
                                          "&& object.spec.resourceClaims.size() > 0)")
    assert variables["rule_gpu_runtime_class_without_gpu"].startswith("false && ")
    assert "@" not in yaml.safe_dump(policy)


def test_extra_rules_are_wrapped_for_gpu_pods_only():
    policy = render_policy_objects(CEL_DATA, extra_rules=[RULE])[0]
    variables = {item["name"]: item["expression"] for item in policy["spec"]["variables"]}
    assert variables["rule_team_label"] == "variables.isGpuPod ? ([]) : []"


def test_the_role_data_is_not_changed_by_rendering():
    before = copy.deepcopy(CEL_DATA)
    render_policy_objects(CEL_DATA, engine="both", extra_rules=[RULE])
    assert CEL_DATA == before


@pytest.mark.parametrize("kwargs,fragment", [
    ({"engine": "opa"}, "gpu_policies_engine is 'opa'. Fix: set it to vap, kyverno or both."),
    ({"name": "GPU_Guard"}, "gpu_policies_name ('GPU_Guard') must be a lowercase DNS label"),
    ({"runtime_class_name": "Nvidia"}, "gpu_policies_runtime_class_name ('Nvidia') must be a RuntimeClass name"),
    ({"gpu_resources": []}, "gpu_policies_gpu_resources is empty"),
    ({"gpu_resources": "nvidia.com/gpu"}, "gpu_policies_gpu_resources must be a list of strings"),
    ({"gpu_resources": ["gpu"]}, "gpu_policies_gpu_resources[0] ('gpu') is not an extended resource name"),
    ({"gpu_resources": ["nvidia.com/*gpu"]}, "gpu_policies_gpu_resources[0] ('nvidia.com/*gpu')"),
    ({"gpu_resources": ["nvidia.com/gpu", "nvidia.com/gpu"]},
     "gpu_policies_gpu_resources lists nvidia.com/gpu more than once"),
    ({"excluded_namespaces": ["Kube-System"]}, "gpu_policies_excluded_namespaces[0] ('Kube-System') is not a "
                                               "namespace name"),
    ({"excluded_namespaces": ["x"] * 300}, "gpu_policies_excluded_namespaces has 300 entries; at most 256"),
    ({"action": "Deny"}, "gpu_policies_action is 'Deny'. Fix: set it to Enforce or Audit."),
    ({"failure_policy": "Open"}, "gpu_policies_failure_policy is 'Open'"),
    ({"vap_validation_actions": ["Deny", "Warn"]}, "Deny and Warn never together"),
    ({"vap_validation_actions": ["Block"]}, "gpu_policies_vap_validation_actions (['Block'])"),
    ({"extra_rules": {"name": "x"}}, "gpu_policies_extra_rules must be a list of rules"),
    ({"extra_rules": [dict(RULE, severity="high")]}, "gpu_policies_extra_rules[0] has unknown keys severity. "
                                                     "Fix: use only name, violations, message."),
    ({"extra_rules": [{"name": "x", "message": "m"}]}, "gpu_policies_extra_rules[0] needs a non-empty string "
                                                       "violations"),
    ({"extra_rules": [dict(RULE, name="Team_Label")]}, "gpu_policies_extra_rules[0].name ('Team_Label')"),
    ({"extra_rules": [dict(RULE, message="two\nlines")]}, "gpu_policies_extra_rules[0].message must be one line"),
    ({"extra_rules": [dict(RULE, violations="x" * 6000)]}, "gpu_policies_extra_rules[0].violations is 6000 "
                                                           "characters long"),
    ({"extra_rules": [dict(RULE, name="gpu-runtime-class")]}, "gpu_policies_extra_rules[0].name "
                                                              "'gpu-runtime-class' is already used"),
    ({"extra_rules": [RULE, RULE]}, "gpu_policies_extra_rules[1].name 'team-label' is already used"),
    ({"extra_rules": [RULE] * 65}, "gpu_policies_extra_rules has 65 rules; at most 64"),
    ({"gpu_taint_keys": "nvidia.com/gpu"}, "gpu_policies_gpu_taint_keys must be a list of strings"),
    ({"gpu_taint_keys": ["nvidia.com/*"]}, "gpu_policies_gpu_taint_keys[0] ('nvidia.com/*') is not a taint key"),
    ({"gpu_taint_keys": ['x" || true || "']}, "gpu_policies_gpu_taint_keys[0]"),
    ({"gpu_node_labels": ["Bad Key"]}, "gpu_policies_gpu_node_labels[0] ('Bad Key') is not a node label key"),
    ({"gpu_node_labels": ["nvidia.com/*x"]}, "gpu_policies_gpu_node_labels[0] ('nvidia.com/*x')"),
    ({"gpu_node_labels": ["a"] * 65}, "gpu_policies_gpu_node_labels has 65 entries; at most 64"),
    ({"resource_claims_are_gpu": "yes"}, "gpu_policies_resource_claims_are_gpu must be true or false"),
    ({"refuse_runtime_class_without_gpu": 1}, "gpu_policies_refuse_runtime_class_without_gpu must be true or"),
])
def test_bad_input_is_refused_with_the_variable_and_the_fix(kwargs, fragment):
    with pytest.raises(GpuPolicyError) as error:
        render_policy_objects(CEL_DATA, **kwargs)
    assert fragment in str(error.value)
    assert "Fix:" in str(error.value) and "\n" not in str(error.value)


def test_broken_role_data_is_reported():
    with pytest.raises(GpuPolicyError, match="restore the role's vars/main.yml"):
        render_policy_objects({"rules": []})
    data = copy.deepcopy(CEL_DATA)
    data["variables"][0]["name"] = "not-an-identifier"
    with pytest.raises(GpuPolicyError, match=r"__gpu_policies_cel.variables\[0\]"):
        render_policy_objects(data)
    data = copy.deepcopy(CEL_DATA)
    data["macros"]["lower"] = "true"
    with pytest.raises(GpuPolicyError, match=r"__gpu_policies_cel.macros must map"):
        render_policy_objects(data)
    data = copy.deepcopy(CEL_DATA)
    del data["gpu_env_names"]
    with pytest.raises(GpuPolicyError, match=r"__gpu_policies_cel.gpu_env_names must be a list"):
        render_policy_objects(data)


def test_filter_wraps_errors_and_defaults():
    assert len(gpu_policy_objects(CEL_DATA, engine="both")) == 3
    with pytest.raises(AnsibleFilterError, match="gpu_policies_engine is 'x'"):
        gpu_policy_objects(CEL_DATA, engine="x")


def test_namespace_match_labels_join_the_exclusions():
    _policy, binding = render_policy_objects(CEL_DATA, excluded_namespaces=["kube-system"],
                                             namespace_match_labels={"tenant": "true"})
    assert binding["spec"]["matchResources"] == {"namespaceSelector": {
        "matchLabels": {"tenant": "true"},
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}}
    for bad in ({"tenant": True}, {"Bad Key": "x"}, {"tenant": "x" * 64}, ["tenant"]):
        with pytest.raises(GpuPolicyError, match="gpu_policies_namespace_match_labels"):
            render_policy_objects(CEL_DATA, namespace_match_labels=bad)
