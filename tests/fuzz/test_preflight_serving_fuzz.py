# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the serving gate's filters (plugins/filter/preflight_serving.py).

* any node name and prefix: preflight_serving_pod gives a DNS label of at most 63 characters ending in the node's
  hash, or its own AnsibleFilterError; two different node names never share a name (short of a hash collision);
* any node object and pods (mappings, scalars, lists, nulls anywhere): preflight_free_gpus gives a status, counts
  that add up, or its own AnsibleFilterError.

Inputs are bounded (max_size); no test measures time.
"""
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.filter import preflight_serving as serving
from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import dns_label_problem

FUZZ_TARGETS = ("preflight_serving_pod", "preflight_free_gpus")

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
