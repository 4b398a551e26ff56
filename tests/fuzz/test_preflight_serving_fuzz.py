# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the serving gate's filters (plugins/filter/preflight_serving.py).

* any node name and prefix: preflight_serving_pod gives a DNS label of at most 63 characters ending in the node's
  hash, or its own AnsibleFilterError; two different node names never share a name (short of a hash collision);
* any node object and pods (mappings, scalars, lists, nulls anywhere): preflight_free_gpus gives a status, counts
  that add up, or its own AnsibleFilterError;
* under DRA, any node name, slices, claims, class and labels: preflight_dra_free_devices gives a status whose free
  devices are published and not allocated, or its own AnsibleFilterError; preflight_dra_claim_template puts nothing
  but device UUIDs in its CEL expression; preflight_dra_serving_pod never leaves spec.nodeName nor the GPU resource.

Inputs are bounded (max_size); no test measures time.
"""
import re

from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.filter import preflight_serving as serving
from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import dns_label_problem

FUZZ_TARGETS = ("preflight_serving_pod", "preflight_free_gpus", "preflight_dra_free_devices",
                "preflight_dra_claim_template", "preflight_dra_serving_pod")

NODE_NAMES = st.one_of(st.text(max_size=300), st.text(alphabet="abcz019-._AZ", max_size=260),
                       st.none(), st.integers())
PREFIXES = st.one_of(st.just("gpu-native-preflight"), st.text(alphabet="abz09-_A", max_size=50), st.none())
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12),
                    st.sampled_from(["nvidia.com/gpu", "8", "1", "Running", "Succeeded", "Failed"]))
VALUES = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.sampled_from(["metadata", "spec", "status", "containers", "initContainers", "resources", "requests",
                         "limits", "nvidia.com/gpu", "phase", "allocatable", "labels", "name", "namespace"]),
        inner, max_size=4)),
    max_leaves=12)


@given(NODE_NAMES, PREFIXES)
def test_the_pod_name_is_always_a_dns_label(node, prefix):
    try:
        identity = serving.preflight_serving_pod(node, prefix)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("preflight_serving_pod: ") and "Fix:" in str(exc)
        return
    assert dns_label_problem(identity["name"]) is None and len(identity["name"]) <= 63
    assert identity["name"].endswith("-" + identity["node_hash"]) and identity["name"].startswith(prefix + "-")


@given(st.text(alphabet="ab-.", min_size=1, max_size=120), st.text(alphabet="ab-.", min_size=1, max_size=120))
def test_different_nodes_get_different_names(first, second):
    if first != second:
        assert serving.preflight_serving_pod(first)["name"] != serving.preflight_serving_pod(second)["name"]


@given(VALUES, st.lists(VALUES, max_size=6), st.one_of(st.just("nvidia.com/gpu"), SCALARS), st.one_of(VALUES))
def test_free_gpus_never_raise_another_error(node, pods, resource, ignore):
    try:
        result = serving.preflight_free_gpus(node, pods, resource, ignore)
    except AnsibleFilterError as exc:
        assert "Fix: set preflight_serving_gpu_resource" in str(exc)
        return
    assert result["status"] in ("free", "busy", "absent")
    assert (result["reason"] is None) == (result["status"] == "free")
    if result["allocatable"] is not None:
        assert result["free"] == max(result["allocatable"] - result["used"], 0)


DRA_KEYS = ["metadata", "spec", "status", "devices", "attributes", "name", "nodeName", "driver", "pool", "generation",
            "resourceSliceCount", "allocation", "results", "device", "labels", "uuid", "type", "string", "namespace"]
DRA_SCALARS = st.one_of(SCALARS, st.sampled_from(["gpu.nvidia.com", "n1", "gpu", "mig", "gpu-0", 1,
                                                  "GPU-2fa81118-5a5f-aa66-7660-471eed407181"]))
DRA_VALUES = st.recursive(
    DRA_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.sampled_from(DRA_KEYS), inner, max_size=5)), max_leaves=16)
UUIDS = st.one_of(st.lists(st.one_of(st.from_regex(r"\A(GPU|MIG)-[0-9a-f-]{1,20}\Z"), st.text(max_size=20)),
                           max_size=4), DRA_SCALARS)


@given(st.one_of(st.just("n1"), NODE_NAMES), st.one_of(st.none(), st.lists(DRA_VALUES, max_size=4), DRA_SCALARS),
       st.one_of(st.none(), st.lists(DRA_VALUES, max_size=4), DRA_SCALARS),
       st.one_of(st.sampled_from(["gpu.nvidia.com", "mig.nvidia.com"]), SCALARS), DRA_VALUES)
def test_dra_free_devices_never_raise_another_error(node, slices, claims, device_class, ignore):
    try:
        result = serving.preflight_dra_free_devices(node, slices, claims, device_class, ignore)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("preflight_dra_free_devices: ") and "Fix:" in str(exc)
        return
    assert result["status"] in ("free", "busy", "absent", "unknown")
    assert (result["reason"] is None) == (result["status"] == "free")
    assert set(result["free"]) <= set(result["devices"]) and not set(result["free"]) & set(result["allocated"])
    assert (result["status"] == "free") == bool(result["free"])


@given(st.text(alphabet="abz09-", max_size=70), DRA_SCALARS, DRA_VALUES,
       st.one_of(st.just("gpu.nvidia.com"), SCALARS), UUIDS)
def test_the_claim_template_selects_only_device_uuids(name, namespace, labels, device_class, uuids):
    try:
        template = serving.preflight_dra_claim_template(name, namespace, labels, device_class, uuids)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("preflight_dra_claim_template: ")
        return
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["count"] == 1 and request["deviceClassName"] == device_class
    expression = request["selectors"][0]["cel"]["expression"]
    inner = expression[len('device.attributes["gpu.nvidia.com"].uuid in ['):-1]
    assert all(re.match(r'^"(GPU|MIG)-[0-9a-fA-F-]+"$', part) for part in inner.split(", ")), expression


@given(DRA_VALUES, st.one_of(st.just("n1"), NODE_NAMES), st.one_of(st.just("p"), SCALARS),
       st.one_of(st.just("nvidia.com/gpu"), SCALARS))
def test_the_dra_pod_never_keeps_the_node_name_or_the_gpu_resource(pod, node, template, resource):
    if isinstance(pod, dict):  # a pod with a node name, a GPU limit, and whatever else was drawn as a container
        pod = dict(pod, spec={"nodeName": "x", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}},
                                                              {"resources": pod.get("spec")}]})
    try:
        result = serving.preflight_dra_serving_pod(pod, node, template, resource)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("preflight_dra_serving_pod: ")
        return
    assert "nodeName" not in result["spec"]
    assert result["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": template}]
    for container in result["spec"]["containers"]:
        assert resource not in (container["resources"].get("limits") or {})
