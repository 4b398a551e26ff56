"""Fuzz: the spec matrix schema validator, sysctl keys and the report filter.

Properties, for any input:
* ``validate_matrix`` raises only SpecMatrixError, every error names a path,
  and its effort is linear in the matrix's size;
* well-formed matrices are accepted, their constraints kept as written;
* a sysctl key is refused or names a file strictly under /proc/sys;
* ``spec_matrix_report`` raises only AnsibleFilterError.
"""
import os
import string

from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from _bounds import assert_effort_within, effort, size_of
from ansible_collections.gpu_native.fleet.plugins.filter.spec_matrix_report import spec_matrix_report
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import spec_matrix as sm
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import sysctl_relative_path

#: The entry points this file fuzzes (tests/fuzz/test_fuzz_targets.py).
FUZZ_TARGETS = ("spec_matrix", "spec_matrix_report")

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
                    st.sampled_from([">=1.7, <2.0", "550.127.08", "/^5\\.15/", "running", "8", "true", "550.*.*",
                                     "../../etc/shadow", "vm.max_map_count", "=>1", "enabled"]))
keys = st.one_of(st.text(max_size=12), st.sampled_from(
    list(sm.MATRIX_KEYS) + list(sm.PROFILE_KEYS) + list(sm.MATCH_KEYS) + list(sm.COMPATIBILITY_KEYS)
    + ["release", "id", "count", "loaded", "absent", "vm.swappiness", "p"]), st.integers(), st.booleans())
nested = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)), max_leaves=40)

section_values = st.dictionaries(keys, nested, max_size=4)
profiles = st.dictionaries(st.text(max_size=8), st.dictionaries(st.sampled_from(sm.PROFILE_KEYS + ("bogus",)),
                                                                st.one_of(section_values, nested), max_size=6),
                           max_size=3)
shaped_matrix = st.fixed_dictionaries({}, optional={
    "version": st.one_of(st.just(1), scalars),
    "profiles": st.one_of(profiles, nested),
    "compatibility": st.one_of(st.lists(st.dictionaries(st.sampled_from(sm.COMPATIBILITY_KEYS + ("x",)), scalars,
                                                        max_size=4), max_size=3), nested),
    "compatibility_extra": nested,
})


def _check_validation(matrix):
    measured = effort(sm.validate_matrix, matrix)
    assert measured.error is None or isinstance(measured.error, sm.SpecMatrixError), repr(measured.error)
    if measured.error is not None:
        assert measured.error.errors
        for error in measured.error.errors:
            path, dummy, reason = error.partition(": ")
            assert path and reason, error
    # the shipped table alone costs a fixed amount; the rest grows with the input
    assert_effort_within(measured, size_of(matrix), per_unit=600, base=40000, what="validate_matrix")
    return measured


@given(nested)
def test_validate_any_data(matrix):
    _check_validation(matrix)


@given(shaped_matrix)
def test_validate_shaped_matrices(matrix):
    _check_validation(matrix)


version = st.from_regex(r"\A[0-9]{1,3}(\.[0-9]{1,3}){0,3}\Z", fullmatch=True)
comparison = st.lists(st.tuples(st.sampled_from([">=", ">", "<=", "<", "==", "!="]), version), min_size=1,
                      max_size=3).map(lambda parts: ", ".join(op + v for op, v in parts))
version_constraint = st.one_of(version, comparison)
sysctl_key = st.lists(st.text(alphabet=string.ascii_lowercase + "_-", min_size=1, max_size=10), min_size=1,
                      max_size=4).map(".".join)
valid_profile = st.fixed_dictionaries({}, optional={
    "description": st.text(max_size=20),
    "os": st.fixed_dictionaries({"id": st.sampled_from(["ubuntu", "debian", "rhel"]), "version": version}),
    "kernel": st.fixed_dictionaries({"release": version_constraint}),
    "driver": st.fixed_dictionaries({"version": version_constraint}),
    "containerd": st.fixed_dictionaries({"version": version_constraint}),
    "kubernetes": st.fixed_dictionaries({"version": version_constraint, "compatibility": st.booleans()}),
    "sysctl": st.dictionaries(sysctl_key, st.one_of(st.integers(min_value=0), st.text(
        alphabet=string.digits + " ", min_size=1, max_size=12).filter(str.strip)), max_size=3),
    "packages": st.dictionaries(st.text(alphabet=string.ascii_lowercase + "-", min_size=1, max_size=12),
                                st.one_of(st.sampled_from(["present", "absent"]), version_constraint), max_size=3),
    "gpu": st.fixed_dictionaries({}, optional={
        "count": st.one_of(st.integers(min_value=0, max_value=16), st.integers(0, 16).map(str),
                           st.integers(0, 16).map(lambda n: ">=%d" % n)),
        "mig_mode": st.sampled_from(["enabled", "disabled", True, False])}),
})


@given(st.dictionaries(st.text(min_size=1, max_size=10), valid_profile, max_size=3))
def test_valid_matrices_are_accepted_as_written(profile_map):
    matrix = sm.validate_matrix({"version": 1, "profiles": profile_map})
    assert list(matrix["profiles"]) == list(profile_map)
    for name, profile in profile_map.items():
        for section in ("kernel", "driver", "containerd"):
            if section in profile:
                key = "release" if section == "kernel" else "version"
                assert matrix["profiles"][name][section][key].text == profile[section][key].strip()
        for key in profile.get("sysctl", {}):
            assert key in matrix["profiles"][name]["sysctl"]
    assert [row["row"]["kubernetes"] for row in matrix["compatibility"]] == [
        row["kubernetes"] for row in sm.DEFAULT_COMPATIBILITY]


@given(st.one_of(st.text(max_size=60), st.text(alphabet="./\\\x00\n ab", max_size=30), st.integers(), st.none()))
def test_sysctl_keys_stay_under_proc_sys(key):
    try:
        parts = sysctl_relative_path(key)
    except ValueError:
        return
    joined = os.path.normpath(os.path.join("/proc/sys", *parts))
    assert joined.startswith("/proc/sys/") and joined != "/proc/sys"
    assert all(part and part not in (".", "..") and "/" not in part and "\x00" not in part for part in parts)


@given(nested, st.sampled_from(["markdown", "text", "html"]), st.booleans())
def test_report_filter_raises_only_its_error(data, fmt, only_problems):
    measured = effort(spec_matrix_report, data, format=fmt, only_problems=only_problems)
    assert measured.error is None or isinstance(measured.error, AnsibleFilterError), repr(measured.error)


@given(st.lists(st.one_of(nested, st.fixed_dictionaries({"check": scalars, "status": scalars}, optional={
    "name": scalars, "expected": scalars, "actual": nested, "note": scalars})), max_size=5), nested)
def test_report_filter_on_result_shaped_data(results, summary):
    measured = effort(spec_matrix_report, {"results": results, "summary": summary})
    assert measured.error is None or isinstance(measured.error, AnsibleFilterError), repr(measured.error)
