# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU pod guardrails, evaluated with a real CEL engine (cel-expr-python) over a table of pods.

Every rendered expression (match condition, variables, validations, message expressions) of both
renderings, the ValidatingAdmissionPolicy and the Kyverno ClusterPolicy, is compiled and evaluated
the way kube-apiserver evaluates a policy (tests/k8s_standin/server.py: vap_evaluate). Each case
asserts allow or deny and the exact message. No ansible-playbook, no network.
"""
import copy
import importlib.util
import os

import pytest
import yaml

from ansible_collections.gpu_native.fleet.plugins.plugin_utils.gpu_policies import render_policy_objects

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ROLE_VARS = os.path.join(REPO_ROOT, "roles", "gpu_policies", "vars", "main.yml")
ROLE_DEFAULTS = os.path.join(REPO_ROOT, "roles", "gpu_policies", "defaults", "main.yml")

_SPEC = importlib.util.spec_from_file_location("k8s_standin_server_cel",
                                               os.path.join(REPO_ROOT, "tests", "k8s_standin", "server.py"))
STANDIN = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(STANDIN)

with open(ROLE_VARS, encoding="utf-8") as _handle:
    CEL_DATA = yaml.safe_load(_handle)["__gpu_policies_cel"]
with open(ROLE_DEFAULTS, encoding="utf-8") as _handle:
    DEFAULTS = yaml.safe_load(_handle)

REQ = ("GPU requests must equal limits: set resources.limits of each GPU resource to its request, "
       "or leave the GPU out of requests (it defaults to the limit)")
PRIV = ("GPU pods must not run privileged containers, which see every GPU of the node: "
        "remove securityContext.privileged: true")
RTC = "GPU pods must set runtimeClassName: nvidia"


def render(engine, **kwargs):
    args = dict(runtime_class_name="nvidia", gpu_resources=DEFAULTS["gpu_policies_gpu_resources"],
                excluded_namespaces=DEFAULTS["gpu_policies_excluded_namespaces"])
    args.update(kwargs)
    return render_policy_objects(CEL_DATA, engine=engine, **args)


def container(name, limits=None, requests=None, privileged=None):
    result = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    resources = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if resources:
        result["resources"] = resources
    if privileged is not None:
        result["securityContext"] = {"privileged": privileged}
    return result


def pod(containers, runtime_class="nvidia", init=None, ephemeral=None, namespace="ml", labels=None):
    spec = {"containers": containers}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    if init:
        spec["initContainers"] = init
    if ephemeral:
        spec["ephemeralContainers"] = ephemeral
    meta = {"name": "p", "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


GPU1 = {"nvidia.com/gpu": "1"}
CPU = {"cpu": "500m", "memory": "1Gi"}

# (id, pod, expected message or None for allowed)
CASES = [
    ("compliant-limits-only", pod([container("train", limits=GPU1)]), None),
    ("compliant-requests-equal-limits",
     pod([container("train", limits={"nvidia.com/gpu": "2", "cpu": "4"},
                    requests={"nvidia.com/gpu": "2", "cpu": "1"})]), None),
    ("compliant-int-and-string-quantities",
     pod([container("train", limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": "2"})]), None),
    ("compliant-mixed-containers",
     pod([container("sidecar", limits=CPU, requests=CPU), container("train", limits=GPU1)],
         init=[container("fetch", limits=CPU)]), None),
    ("compliant-mig", pod([container("infer", limits={"nvidia.com/mig-1g.10gb": "1"})]), None),
    ("requests-differ-from-limits",
     pod([container("train", limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"})]),
     REQ + " (container 'train')"),
    ("requests-without-limits",
     pod([container("train", requests={"nvidia.com/gpu": "1"})]), REQ + " (container 'train')"),
    ("mig-requests-differ",
     pod([container("infer", limits={"nvidia.com/mig-1g.10gb": "1"}, requests={"nvidia.com/mig-1g.10gb": "2"})]),
     REQ + " (container 'infer')"),
    ("privileged-gpu-container",
     pod([container("train", limits=GPU1, privileged=True)]),
     PRIV + " (container 'train' sets securityContext.privileged: true)"),
    ("privileged-sidecar-in-gpu-pod",
     pod([container("train", limits=GPU1), container("debug", privileged=True)]),
     PRIV + " (container 'debug' sets securityContext.privileged: true)"),
    ("privileged-ephemeral-in-gpu-pod",
     pod([container("train", limits=GPU1)], ephemeral=[container("shell", privileged=True)]),
     PRIV + " (container 'shell' sets securityContext.privileged: true)"),
    ("privileged-false-is-fine", pod([container("train", limits=GPU1, privileged=False)]), None),
    ("no-runtime-class", pod([container("train", limits=GPU1)], runtime_class=None),
     RTC + " (container 'train' requests nvidia.com/gpu)"),
    ("wrong-runtime-class", pod([container("train", limits=GPU1)], runtime_class="runc"),
     RTC + " (container 'train' requests nvidia.com/gpu)"),
    ("limits-only-no-runtime-class-mig",
     pod([container("infer", limits={"nvidia.com/mig-1g.10gb": "1"})], runtime_class=None),
     RTC + " (container 'infer' requests nvidia.com/mig-1g.10gb)"),
    ("gpu-shared-no-runtime-class",
     pod([container("notebook", limits={"nvidia.com/gpu.shared": "1"})], runtime_class=None),
     RTC + " (container 'notebook' requests nvidia.com/gpu.shared)"),
    ("init-container-gpu-no-runtime-class",
     pod([container("main", limits=CPU)], init=[container("warmup", limits=GPU1)], runtime_class=None),
     RTC + " (container 'warmup' requests nvidia.com/gpu)"),
    ("two-gpu-containers-no-runtime-class",
     pod([container("a", limits=GPU1), container("b", limits=GPU1), container("c", limits=CPU)],
         runtime_class=None),
     RTC + " (container 'a' requests nvidia.com/gpu and 1 more)"),
    ("every-violation-first-rule-reported",
     pod([container("train", limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"}, privileged=True)],
         runtime_class=None),
     REQ + " (container 'train')"),
    ("privileged-and-no-runtime-class",
     pod([container("train", limits=GPU1, privileged=True)], runtime_class=None),
     PRIV + " (container 'train' sets securityContext.privileged: true)"),
    # pods without a GPU are never touched, whatever they do
    ("non-gpu-privileged-no-runtime-class",
     pod([container("web", limits=CPU, privileged=True)], runtime_class=None), None),
    ("non-gpu-no-resources", pod([container("web")], runtime_class=None), None),
    ("non-gpu-other-extended-resource",
     pod([container("nic", limits={"rdma/hca_shared_devices_a": "1"})], runtime_class=None), None),
    ("non-gpu-lookalike-resource",
     pod([container("x", limits={"nvidia.com/gpu-feature": "1", "example.com/nvidia.com/gpu": "1"})],
         runtime_class=None), None),
    ("gpu-zero-still-a-gpu-pod",
     pod([container("train", limits={"nvidia.com/gpu": "0"})], runtime_class=None),
     RTC + " (container 'train' requests nvidia.com/gpu)"),
]


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
    if not STANDIN._match_resources(binding["spec"].get("matchResources"), labels, {}, "pods", "CREATE", False):
        return None
    applies, failures = STANDIN.vap_evaluate(policy["spec"], obj)
    return failures[0] if applies and failures else None


def decide_kyverno(cluster_policy, obj):
    excluded = []
    for item in (cluster_policy["spec"]["rules"][0].get("exclude") or {}).get("any", []):
        excluded.extend(item["resources"].get("namespaces", []))
    if obj["metadata"]["namespace"] in excluded:
        return None
    applies, failures = STANDIN.vap_evaluate(kyverno_as_policy(cluster_policy), obj)
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
    """Each expression alone, over a violating GPU pod: no compile or runtime error anywhere."""
    spec = vap_objects[0]["spec"]
    obj = pod([container("train", limits=GPU1, requests={"nvidia.com/gpu": "2"}, privileged=True)],
              runtime_class=None, init=[container("i", limits=GPU1)], ephemeral=[container("e")])
    activation = {"object": obj, "variables": {}}
    value, error = STANDIN.cel_evaluate(spec["matchConditions"][0]["expression"], activation)
    assert (value, error) == (True, None)
    for variable in spec["variables"]:
        value, error = STANDIN.cel_evaluate(variable["expression"], activation)
        assert error is None, (variable["name"], error)
        activation["variables"][variable["name"]] = value
    for validation in spec["validations"]:
        for field in ("expression", "messageExpression"):
            value, error = STANDIN.cel_evaluate(validation[field], activation)
            assert error is None, (validation[field], error)
    assert [name for name in activation["variables"] if name.startswith("rule_")] == [
        "rule_gpu_requests_equal_limits", "rule_gpu_no_privileged", "rule_gpu_runtime_class"]


@pytest.mark.parametrize("namespace", ["kube-system", "gpu-operator"])
def test_excluded_namespaces_are_never_checked(vap_objects, kyverno_policy, namespace):
    bad = pod([container("driver", limits=GPU1, privileged=True)], runtime_class=None, namespace=namespace)
    assert decide_vap(vap_objects, bad) is None
    assert decide_kyverno(kyverno_policy, bad) is None
    bad["metadata"]["namespace"] = "ml"
    assert decide_vap(vap_objects, bad) == PRIV + " (container 'driver' sets securityContext.privileged: true)"


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
        assert decide(pod([container("web")])) is None


def test_extra_rule_with_an_invalid_expression_denies_under_fail():
    """failurePolicy Fail: an expression that cannot be evaluated refuses the pod (and says why)."""
    extra = [{"name": "broken", "violations": "object.spec.noSuchField.map(x, x)", "message": "never shown"}]
    message = decide_vap(render("vap", extra_rules=extra), pod([container("train", limits=GPU1)]))
    assert message.startswith("expression 'variables.rule_broken.size() == 0' resulted in error: variable "
                              "rule_broken:"), message
    assert decide_vap(render("vap", extra_rules=extra, failure_policy="Ignore"),
                      pod([container("train", limits=GPU1)])) is None
