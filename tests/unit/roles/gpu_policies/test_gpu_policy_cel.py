# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU pod guardrails, evaluated with a real CEL engine (cel-expr-python) over a table of pods
(tests/gpu_policy_cases.py, the same table the real API server judges in
tests/integration/roles/test_gpu_policies_role.py).

Every rendered expression (match condition, variables, validations, message expressions) of both
renderings, the ValidatingAdmissionPolicy and the Kyverno ClusterPolicy, is compiled and evaluated
the way kube-apiserver evaluates a policy (tests/cel_admission.py: vap_evaluate). Each case
asserts allow or deny and the exact message. No ansible-playbook, no network.
"""
import copy
import os

import pytest
import yaml

from ansible_collections.gpu_native.fleet.plugins.plugin_utils.gpu_policies import render_policy_objects
import cel_admission
from gpu_policy_cases import CASES, GPU1, GPU_TOLERATION, NODE_PRIV, PRIV, container, pod

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ROLE_VARS = os.path.join(REPO_ROOT, "roles", "gpu_policies", "vars", "main.yml")
ROLE_DEFAULTS = os.path.join(REPO_ROOT, "roles", "gpu_policies", "defaults", "main.yml")


with open(ROLE_VARS, encoding="utf-8") as _handle:
    CEL_DATA = yaml.safe_load(_handle)["__gpu_policies_cel"]
with open(ROLE_DEFAULTS, encoding="utf-8") as _handle:
    DEFAULTS = yaml.safe_load(_handle)


def render(engine, **kwargs):
    args = dict(runtime_class_name="nvidia", gpu_resources=DEFAULTS["gpu_policies_gpu_resources"],
                excluded_namespaces=DEFAULTS["gpu_policies_excluded_namespaces"],
                gpu_taint_keys=DEFAULTS["gpu_policies_gpu_taint_keys"],
                gpu_node_labels=DEFAULTS["gpu_policies_gpu_node_labels"])
    args.update(kwargs)
    return render_policy_objects(CEL_DATA, engine=engine, **args)


def kyverno_as_policy(cluster_policy):
    """The CEL parts of a Kyverno ClusterPolicy rule in the shape vap_evaluate reads."""
    rule = cluster_policy["spec"]["rules"][0]
    return {"failurePolicy": cluster_policy["spec"]["failurePolicy"],
            "matchConditions": rule["celPreconditions"],
            "variables": rule["validate"]["cel"]["variables"],
            "validations": rule["validate"]["cel"]["expressions"]}


def decide_vap(objects, obj, namespace_labels=None):
    policy, binding = objects
    labels = dict(namespace_labels or {}, **{"kubernetes.io/metadata.name": obj["metadata"]["namespace"]})
    if not cel_admission.match_resources(binding["spec"].get("matchResources"), labels, {}, "pods", "CREATE", False):
        return None
    applies, failures = cel_admission.vap_evaluate(policy["spec"], obj)
    return failures[0] if applies and failures else None


def decide_kyverno(cluster_policy, obj):
    excluded = []
    for item in (cluster_policy["spec"]["rules"][0].get("exclude") or {}).get("any", []):
        excluded.extend(item["resources"].get("namespaces", []))
    if obj["metadata"]["namespace"] in excluded:
        return None
    applies, failures = cel_admission.vap_evaluate(kyverno_as_policy(cluster_policy), obj)
    return failures[0] if applies and failures else None


@pytest.fixture(scope="module")
def vap_objects():
    return render("vap")


@pytest.fixture(scope="module")
def kyverno_policy():
    return render("kyverno")[0]


@pytest.mark.parametrize("case_id,obj,expected", CASES, ids=[case[0] for case in CASES])
def test_vap(vap_objects, case_id, obj, expected):
    assert decide_vap(vap_objects, copy.deepcopy(obj)) == expected, case_id


@pytest.mark.parametrize("case_id,obj,expected", CASES, ids=[case[0] for case in CASES])
def test_kyverno(kyverno_policy, case_id, obj, expected):
    assert decide_kyverno(kyverno_policy, copy.deepcopy(obj)) == expected, case_id


def test_both_engines_carry_the_same_cel(vap_objects, kyverno_policy):
    spec = vap_objects[0]["spec"]
    assert kyverno_as_policy(kyverno_policy) == {"failurePolicy": "Fail", "matchConditions": spec["matchConditions"],
                                                 "variables": spec["variables"], "validations": spec["validations"]}


def test_every_expression_compiles_and_evaluates(vap_objects):
    """Each expression alone, over a GPU pod and a non-GPU pod that break every rule they can: no compile or
    runtime error anywhere (a message expression is evaluated only for a failed validation, as the server does)."""
    spec = vap_objects[0]["spec"]
    gpu_pod = pod([container("train", limits=GPU1, privileged=True),
                   container("steal", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])],
                  runtime_class=None, init=[container("i", limits=GPU1)], ephemeral=[container("e")],
                  tolerations=GPU_TOLERATION, node_selector={"accelerator": "nvidia-gpu"},
                  resource_claims=[{"name": "gpu", "resourceClaimName": "c"}])
    other_pod = pod([container("steal", privileged=True,
                               env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}])],
                    tolerations=GPU_TOLERATION)
    failed = set()
    for obj in (gpu_pod, other_pod):
        activation = {"object": obj, "variables": {}}
        value, error = cel_admission.cel_evaluate(spec["matchConditions"][0]["expression"], activation)
        assert (value, error) == (True, None)
        for variable in spec["variables"]:
            value, error = cel_admission.cel_evaluate(variable["expression"], activation)
            assert error is None, (variable["name"], error)
            activation["variables"][variable["name"]] = value
        for validation in spec["validations"]:
            value, error = cel_admission.cel_evaluate(validation["expression"], activation)
            assert error is None and isinstance(value, bool), (validation["expression"], error)
            if not value:
                failed.add(validation["expression"])
                text, error = cel_admission.cel_evaluate(validation["messageExpression"], activation)
                assert error is None and text.startswith(validation["message"] + " ("), (text, error)
    assert [name for name in activation["variables"] if name.startswith("rule_")] == [
        "rule_gpu_no_privileged", "rule_gpu_runtime_class", "rule_gpu_env_without_gpu",
        "rule_gpu_runtime_class_without_gpu", "rule_gpu_node_no_privileged"]
    assert failed == set(item["expression"] for item in spec["validations"])


@pytest.mark.parametrize("namespace", ["kube-system", "gpu-operator"])
def test_excluded_namespaces_are_never_checked(vap_objects, kyverno_policy, namespace):
    bad = pod([container("driver", limits=GPU1, privileged=True)], runtime_class=None, namespace=namespace)
    assert decide_vap(vap_objects, bad) is None
    assert decide_kyverno(kyverno_policy, bad) is None
    bad["metadata"]["namespace"] = "ml"
    assert decide_vap(vap_objects, bad) == PRIV + " (container 'driver' sets securityContext.privileged: true)"
    # the GPU Operator's own kind of pod: privileged, on GPU nodes, NVIDIA_VISIBLE_DEVICES=all, no GPU request
    operator = pod([container("toolkit", privileged=True, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])],
                   runtime_class="nvidia", namespace=namespace, tolerations=GPU_TOLERATION)
    assert decide_vap(vap_objects, operator) is None
    assert decide_kyverno(kyverno_policy, operator) is None


def test_ephemeral_container_is_judged_like_the_others(vap_objects, kyverno_policy):
    debug = pod([container("train", limits=GPU1)], ephemeral=[container("shell", privileged=True)])
    expected = PRIV + " (container 'shell' sets securityContext.privileged: true)"
    assert decide_vap(vap_objects, debug) == decide_kyverno(kyverno_policy, debug) == expected
    steal = pod([container("web")], runtime_class=None, tolerations=GPU_TOLERATION,
                ephemeral=[container("shell", privileged=True)])
    assert decide_vap(vap_objects, steal) == NODE_PRIV + " (container 'shell' sets securityContext.privileged: true)"


def test_the_switches_turn_their_rule_off():
    runtime_class_only = pod([container("web")])
    assert decide_vap(render("vap"), runtime_class_only) is not None
    assert decide_vap(render("vap", refuse_runtime_class_without_gpu=False), runtime_class_only) is None
    claim_only = pod([container("main")], runtime_class=None, resource_claims=[{"name": "nic", "resourceClaimName": "c"}])
    assert decide_vap(render("vap"), claim_only) is not None
    assert decide_vap(render("vap", resource_claims_are_gpu=False), claim_only) is None
    # the GPU taint and node labels are the variables, not fixed names
    custom = render("vap", gpu_taint_keys=["example.com/accel"], gpu_node_labels=["example.com/*"])
    assert decide_vap(custom, pod([container("s", privileged=True)], runtime_class=None,
                                  tolerations=GPU_TOLERATION)) is None
    assert decide_vap(custom, pod([container("s", privileged=True)], runtime_class=None,
                                  tolerations=[{"key": "example.com/accel", "operator": "Exists"}])) is not None
    assert decide_vap(custom, pod([container("s", privileged=True)], runtime_class=None,
                                  node_selector={"example.com/gpu": "yes"})) is not None


def test_namespace_match_labels_limit_both_engines():
    objects = render("both", namespace_match_labels={"tenant": "true"})
    bad = pod([container("steal", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])], runtime_class=None)
    assert decide_vap(objects[:2], bad) is None
    assert decide_vap(objects[:2], bad, namespace_labels={"tenant": "true"}) is not None
    assert objects[2]["spec"]["rules"][0]["match"]["any"][0]["resources"]["namespaceSelector"] == {
        "matchLabels": {"tenant": "true"}}


def test_runtime_class_name_and_gpu_resources_are_configurable():
    objects = render("vap", runtime_class_name="nvidia-cdi", gpu_resources=["nvidia.com/gpu"])
    obj = pod([container("train", limits=GPU1)], runtime_class="nvidia")
    assert decide_vap(objects, obj) == ("GPU pods must set runtimeClassName: nvidia-cdi "
                                        "(container 'train' requests nvidia.com/gpu)")
    obj["spec"]["runtimeClassName"] = "nvidia-cdi"
    assert decide_vap(objects, obj) is None
    # MIG no longer counts as a GPU resource here
    assert decide_vap(objects, pod([container("x", limits={"nvidia.com/mig-1g.10gb": "1"})], runtime_class=None)) \
        is None


def test_extra_rule_in_the_same_form():
    extra = [{"name": "gpu-team-label",
              "violations": "has(object.metadata.labels) && 'team' in object.metadata.labels ? [] "
                            ": variables.gpuContainers.map(c, \"container '\" + c.name + \"'\")",
              "message": "GPU pods must carry a team label for chargeback: add metadata.labels.team"}]
    for engine in ("vap", "kyverno"):
        objects = render(engine, extra_rules=extra)
        decide = (lambda obj, objs=objects: decide_vap(objs, obj)) if engine == "vap" \
            else (lambda obj, objs=objects: decide_kyverno(objs[0], obj))
        assert decide(pod([container("train", limits=GPU1)])) == (
            "GPU pods must carry a team label for chargeback: add metadata.labels.team (container 'train')")
        assert decide(pod([container("train", limits=GPU1)], labels={"team": "vision"})) is None
        # extra rules apply to GPU pods only
        assert decide(pod([container("web")], runtime_class=None)) is None


def test_extra_rule_with_an_invalid_expression_denies_under_fail():
    """failurePolicy Fail: an expression that cannot be evaluated refuses the pod (and says why)."""
    extra = [{"name": "broken", "violations": "object.spec.noSuchField.map(x, x)", "message": "never shown"}]
    message = decide_vap(render("vap", extra_rules=extra), pod([container("train", limits=GPU1)]))
    assert message.startswith("expression 'variables.rule_broken.size() == 0' resulted in error: variable "
                              "rule_broken:"), message
    assert decide_vap(render("vap", extra_rules=extra, failure_policy="Ignore"),
                      pod([container("train", limits=GPU1)])) is None
