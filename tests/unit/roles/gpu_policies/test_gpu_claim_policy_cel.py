# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DRA claim guardrails (ResourceClaims, ResourceClaimTemplates), evaluated with a real CEL engine
(cel-expr-python, tests/cel_admission.py: vap_evaluate) in both renderings over the table of
tests/gpu_policy_cases.py (CLAIM_CASES), the same table tests/integration/plugins/test_dra_gate_real_api.py gives the
real API server."""
import copy
import os

import pytest
import yaml

from ansible_collections.gpu_native.fleet.plugins.plugin_utils.gpu_policies import (
    GpuPolicyError,
    render_claim_policy_objects,
)
import cel_admission
from gpu_policy_cases import CLAIM_ADMIN_NAMESPACES, CLAIM_CASES, CLAIM_CLASS_NAMESPACES

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
with open(os.path.join(REPO_ROOT, "roles", "gpu_policies", "vars", "main.yml"), encoding="utf-8") as _handle:
    CLAIM_CEL = yaml.safe_load(_handle)["__gpu_policies_claim_cel"]


def render(engine):
    return render_claim_policy_objects(CLAIM_CEL, engine, class_namespaces=CLAIM_CLASS_NAMESPACES,
                                       admin_namespaces=CLAIM_ADMIN_NAMESPACES)


def decide(spec, obj):
    applies, failures = cel_admission.vap_evaluate(spec, obj)
    return failures[0] if applies and failures else None


def kyverno_spec(policy):
    rule = policy["spec"]["rules"][0]
    return {"failurePolicy": policy["spec"]["failurePolicy"], "matchConditions": rule["celPreconditions"],
            "variables": rule["validate"]["cel"]["variables"], "validations": rule["validate"]["cel"]["expressions"]}


@pytest.mark.parametrize("case_id,obj,expected", CLAIM_CASES, ids=[case[0] for case in CLAIM_CASES])
def test_vap(case_id, obj, expected):
    assert decide(render("vap")[0]["spec"], copy.deepcopy(obj)) == expected, case_id


@pytest.mark.parametrize("case_id,obj,expected", CLAIM_CASES, ids=[case[0] for case in CLAIM_CASES])
def test_kyverno(case_id, obj, expected):
    assert decide(kyverno_spec(render("kyverno")[0]), copy.deepcopy(obj)) == expected, case_id


def test_the_objects():
    policy, binding, kyverno = render("both")
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
         "resources": ["resourceclaims", "resourceclaimtemplates"]}]
    assert binding["spec"] == {"policyName": "gpu-claim-guardrails", "validationActions": ["Deny"]}
    assert kyverno_spec(kyverno)["variables"] == policy["spec"]["variables"]
    assert kyverno["spec"]["rules"][0]["match"]["any"][0]["resources"]["kinds"] == [
        "resource.k8s.io/v1/ResourceClaim", "resource.k8s.io/v1/ResourceClaimTemplate"]


def test_unrestricted_by_default():
    spec = render_claim_policy_objects(CLAIM_CEL, "vap")[0]["spec"]
    assert decide(spec, copy.deepcopy(CLAIM_CASES[6][1])) is None  # full GPU elsewhere: no class restricted


@pytest.mark.parametrize("kwargs", [{"class_namespaces": ["x"]}, {"class_namespaces": {"Bad_Class": ["a"]}},
                                    {"class_namespaces": {"gpu.nvidia.com": ["Not A Namespace"]}},
                                    {"admin_namespaces": "kube-system"}, {"engine": "both2"}, {"name": "X"},
                                    # the API server refuses Deny with Warn: the same rule as the pod guardrails'
                                    {"vap_validation_actions": ["Deny", "Warn"]},
                                    {"vap_validation_actions": ["Deny", "Deny"]}, {"action": "Block"}])
def test_bad_settings_are_refused(kwargs):
    args = dict(engine="vap")
    args.update(kwargs)
    with pytest.raises(GpuPolicyError):
        render_claim_policy_objects(CLAIM_CEL, **args)
