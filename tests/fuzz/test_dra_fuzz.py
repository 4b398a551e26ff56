# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the DRA filters (plugins/filter/dra.py, plugins/plugin_utils/dra.py).

* any node object, slices, DeviceClasses, pods (mappings, scalars, lists, nulls anywhere) and nvidia-smi -L text:
  dra_kubernetes_gate gives ``{status: pass|fail, reasons, details}`` with a reason for every failure, or its own
  AnsibleFilterError with the fix;
* any slices: dra_advertised_resources gives counts by resource name, None, or its own error with the fix;
* any pods and ResourceClaims: gpu_pod_eviction's rules (gpu_pods.select_pods with dra_drivers) judge every pod
  once, and read a bounded number of claims;
* any text: parse_smi_list gives GPUs whose MIG devices are bounded, or its own DraError; the work is linear in
  the text's length.

Inputs are bounded (max_size); no test measures time.
"""
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.filter import dra as dra_filter
from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s import gpu_pods
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import dra

from _bounds import assert_effort_within, effort

FUZZ_TARGETS = ("dra_kubernetes_gate", "dra_compliance", "dra_advertised_resources")

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12), st.sampled_from(
    ["gpu.nvidia.com", "gpu-node-1", "gpu", "mig", "1g.5gb", "GPU-1", "MIG-1", "Running", "True", "Ready", "1", "0",
     "580.126.20"]))
KEYS = st.sampled_from(["metadata", "spec", "status", "name", "driver", "nodeName", "pool", "generation",
                        "resourceSliceCount", "devices", "attributes", "type", "uuid", "string", "version",
                        "productName", "profile", "parentUUID", "driverVersion", "allocatable", "nvidia.com/gpu",
                        "phase", "conditions"])
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(KEYS, inner, max_size=4)), max_leaves=14)
SMI = st.one_of(st.none(), st.integers(), st.text(max_size=200), st.lists(st.sampled_from([
    "GPU 0: NVIDIA A100-PCIE-40GB (UUID: GPU-2fa81118-5a5f-aa66-7660-471eed407181)",
    "  MIG 1g.5gb      Device  0: (UUID: MIG-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d)",
    "GPU 1: X (UUID: GPU-1)", "  MIG 7g.80gb Device 0: (UUID: MIG-2)", "", "junk"]), max_size=12).map("\n".join))
MODES = st.one_of(st.sampled_from(dra.MODES), SCALARS)


@given(MODES, VALUES, st.dictionaries(st.sampled_from(dra_filter.DRA_KEYS + ("other",)),
                                      st.one_of(VALUES, st.lists(VALUES, max_size=4), SMI), max_size=6), VALUES)
def test_the_gate_never_raises_another_error(mode, node, inputs, gate):
    try:
        result = dra_filter.dra_kubernetes_gate(gate, mode, node, inputs)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("dra_kubernetes_gate: ") and "Fix" in str(exc)
        return
    assert isinstance(result, dict)
    if result["details"].get("allocation_mode") == dra.MODE_DRA:
        assert result["status"] in ("pass", "fail")
        assert (result["status"] == "fail") == bool(result["reasons"])
        assert all(isinstance(reason, str) and reason for reason in result["reasons"])


@given(st.text(max_size=400))
def test_parse_smi_list_is_bounded_and_linear(text):
    measured = effort(dra.parse_smi_list, text)
    assert_effort_within(measured, len(text), per_unit=60, base=4000, what="parse_smi_list")
    if measured.error is None:
        assert all(len(gpu["migs"]) <= dra.MAX_MIGS_PER_GPU for gpu in measured.result)
    else:
        assert isinstance(measured.error, dra.DraError)


ATTRIBUTES = st.dictionaries(st.sampled_from(["type", "uuid", "productName", "profile", "parentUUID",
                                              "driverVersion"]),
                             st.one_of(st.dictionaries(st.sampled_from(["string", "version", "int", "bool"]), SCALARS,
                                                       max_size=2), SCALARS), max_size=6)
DEVICES = st.lists(st.one_of(st.fixed_dictionaries({"name": SCALARS, "attributes": st.one_of(ATTRIBUTES, SCALARS)}),
                             SCALARS), max_size=5)
SLICES = st.lists(st.fixed_dictionaries({
    "metadata": st.one_of(st.fixed_dictionaries({"name": SCALARS}), SCALARS),
    "spec": st.fixed_dictionaries({
        "driver": st.sampled_from(["gpu.nvidia.com", "other"]), "nodeName": st.sampled_from(["n1", "n2"]),
        "pool": st.one_of(st.fixed_dictionaries({"name": st.sampled_from(["n1", "n2", ""]),
                                                 "generation": st.one_of(st.integers(-2, 3), SCALARS),
                                                 "resourceSliceCount": st.one_of(st.integers(-1, 3), SCALARS)}),
                          SCALARS),
        "devices": st.one_of(DEVICES, SCALARS)})}), max_size=5)


@given(st.sampled_from(["dra", "auto"]), SLICES, SMI, st.lists(VALUES, max_size=3), VALUES)
def test_the_gate_on_slice_shaped_input(mode, slices, smi, pods, allocatable):
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": allocatable}}
    try:
        inputs = {"slices": slices, "nvidia_smi_list": smi, "plugin_pods": [p for p in pods if isinstance(p, dict)],
                  "driver_version": "580.126.20"}
        result = dra_filter.dra_kubernetes_gate({}, mode, node, inputs)
    except AnsibleFilterError as exc:
        assert "Fix" in str(exc)
        return
    if result["details"].get("allocation_mode") == dra.MODE_DRA:
        assert (result["status"] == "fail") == bool(result["reasons"])


@given(st.one_of(VALUES, st.fixed_dictionaries({"resources": st.one_of(SLICES, VALUES)})), MODES, VALUES,
       st.one_of(VALUES, st.fixed_dictionaries({"rc": st.one_of(st.just(0), SCALARS), "stdout": SMI})), SCALARS)
def test_the_compliance_row_is_always_a_row(slices, mode, node, smi, name):
    try:
        row = dra_filter.dra_compliance(slices, mode, node, smi, name)
    except AnsibleFilterError as exc:
        assert "Fix" in str(exc)
        return
    assert row["check"] == "dra" and row["status"] in ("pass", "fail", "error", "skip")
    assert row["status"] == "pass" or row["actual"]


@given(st.one_of(SLICES, VALUES), st.one_of(st.just("n1"), SCALARS))
def test_advertised_resources_is_counts_or_none(slices, node_name):
    """dra_advertised_resources: {resource name: count as a string} or None, or its own error with the fix."""
    try:
        result = dra_filter.dra_advertised_resources(slices, node_name)
    except AnsibleFilterError as exc:
        assert "Fix" in str(exc)
        return
    assert result is None or all(name.startswith("nvidia.com/") and count.isdigit() and int(count) > 0
                                 for name, count in result.items())


CLAIM_KEYS = st.sampled_from(["metadata", "spec", "status", "name", "namespace", "nodeName", "resourceClaims",
                              "resourceClaimName", "resourceClaimTemplateName", "resourceClaimStatuses", "allocation",
                              "devices", "results", "driver", "pool", "device", "phase", "ownerReferences", "kind",
                              "controller", "containers", "resources", "limits", "nvidia.com/gpu"])
CLAIM_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(CLAIM_KEYS, inner, max_size=5)),
                            max_leaves=16)


@given(st.lists(CLAIM_VALUES, max_size=6), st.dictionaries(st.text(max_size=8), CLAIM_VALUES, max_size=6),
       st.booleans())
def test_eviction_rules_with_any_pods_and_claims_account_for_every_pod(pods, claims, drain):
    """gpu_pods.select_pods over DRA-shaped pods and claims (gpu_pod_eviction's dra_drivers): every pod ends in
    exactly one of evict, wait, skipped, refused; nothing else is raised."""
    reads = []

    def read_claim(namespace, name):
        reads.append((namespace, name))
        return claims.get(name)
    selection = gpu_pods.select_pods(pods, drain=drain, dra_drivers=gpu_pods.DEFAULT_DRA_DRIVERS,
                                     read_claim=read_claim)
    judged = len(selection.evict) + len(selection.wait) + len(selection.skipped) + len(selection.refused)
    assert judged == len(pods)
    assert len(reads) <= len(pods) * gpu_pods.MAX_CLAIMS
