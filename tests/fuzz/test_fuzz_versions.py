"""Fuzz: version comparison and the constraint language (plugins/module_utils/_common/versions.py).

Properties, for any input:
* only the module's own errors (VersionError, ConstraintError) ever escape;
  ``Constraint.matches`` never raises;
* effort (executed lines, see _bounds.py) stays within a linear bound of the
  input's size;
* each scheme is a total order: antisymmetric, reflexive, transitive;
* inputs the old code accepted give the same answer as before for the
  ``tool`` rule (the old module is kept as the oracle in _versions_before.py).
"""
import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import _versions_before as before
from _bounds import assert_effort_within, effort, size_of
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.versions import (
    CONSTRAINT_KINDS,
    SCHEMES,
    ConstraintError,
    Version,
    VersionError,
    compare_versions,
    parse_constraint,
)

VERSION_ALPHABET = string.digits * 3 + ".+-~^:_" + "abrcgitzAZ"
version_like = st.from_regex(r"\A(\d{1,3}:)?v?\d{1,5}([.+~^_-]{1,2}[0-9a-z]{1,6}){0,6}\Z", fullmatch=True)
version_text = st.one_of(
    version_like,
    st.text(alphabet=VERSION_ALPHABET, min_size=1, max_size=40),
    st.text(max_size=40),
)
scheme = st.sampled_from(SCHEMES)
operator = st.sampled_from([">=", ">", "<=", "<", "==", "!=", "=>", "=", "~", "^", "!", ""])
constraint_text = st.one_of(
    version_text,
    st.lists(st.tuples(operator, st.sampled_from(["", " "]), version_text), min_size=1, max_size=6).map(
        lambda parts: ",".join(op + space + v for op, space, v in parts)),
    st.text(alphabet=string.printable, max_size=60).map(lambda t: "/" + t + "/"),
    st.text(max_size=80),
)
any_value = st.one_of(constraint_text, st.integers(), st.booleans(), st.floats(allow_nan=True), st.none(),
                      st.lists(st.integers(), max_size=3),
                      st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
actual_value = st.one_of(version_text, st.integers(), st.booleans(), st.floats(), st.none(), st.text(max_size=80))


def _cmp(a, b, rule):
    try:
        return compare_versions(a, b, scheme=rule)
    except VersionError:
        return None


@given(version_text, version_text, scheme)
def test_compare_raises_only_version_error_and_is_antisymmetric(left, right, rule):
    measured = effort(compare_versions, left, right, scheme=rule)
    assert measured.error is None or isinstance(measured.error, VersionError), repr(measured.error)
    assert_effort_within(measured, len(left) + len(right), per_unit=60, base=400, what="compare_versions")
    if measured.error is None:
        assert measured.result in (-1, 0, 1)
        assert compare_versions(right, left, scheme=rule) == -measured.result
        assert compare_versions(left, left, scheme=rule) == 0


@given(st.lists(version_text, min_size=3, max_size=3), scheme)
def test_each_rule_is_transitive(triple, rule):
    a, b, c = triple
    ab, bc, ac = _cmp(a, b, rule), _cmp(b, c, rule), _cmp(a, c, rule)
    assume(None not in (ab, bc, ac))
    if ab <= 0 and bc <= 0:
        assert ac <= 0, (a, b, c, rule)
    if ab == 0 and bc == 0:
        assert ac == 0, (a, b, c, rule)


@given(version_text, version_text)
def test_tool_rule_answers_as_before(left, right):
    assume("^" not in left + right)
    try:
        old = before.compare_versions(left, right)
    except before.VersionError:
        return
    assert compare_versions(left, right) == old, (left, right)


@given(any_value, st.sampled_from(CONSTRAINT_KINDS))
def test_parse_constraint_raises_only_constraint_error(value, kind):
    measured = effort(parse_constraint, value, "profiles.p.x", kind)
    assert measured.error is None or isinstance(measured.error, ConstraintError), repr(measured.error)
    assert_effort_within(measured, size_of(value), per_unit=400, base=3000, what="parse_constraint")
    if isinstance(measured.error, ConstraintError):
        assert "at profiles.p.x" in str(measured.error)


@given(constraint_text, actual_value, scheme)
def test_matches_never_raises(text, actual, rule):
    try:
        constraint = parse_constraint(text)
    except ConstraintError:
        return
    measured = effort(constraint.matches, actual, rule)
    assert measured.error is None, repr(measured.error)
    assert measured.result in (True, False)
    assert_effort_within(measured, size_of(text) + size_of(actual), per_unit=200, base=1000, what="matches")


@given(constraint_text, actual_value)
def test_constraints_answer_as_before(text, actual):
    # '^' (rpm's "after the base") is a version character now; the old code refused it
    assume("^" not in text and "^" not in str(actual))
    try:
        old = before.parse_constraint(text)
    except before.ConstraintError:
        old = None
    try:
        new = parse_constraint(text)
    except ConstraintError as exc:
        # refusals the old code did not make: nested repetition, limits
        assert old is None or "nested repetition" in str(exc) or "nested more than" in str(exc) or \
            "longer than" in str(exc) or "more than" in str(exc), (text, str(exc))
        return
    assert old is not None, "accepted now, refused before: %r" % text
    assert (new.kind, new.text) == (old.kind, old.text)
    assert new.matches(actual) == old.matches(actual), (text, actual)


@pytest.mark.parametrize("rule", SCHEMES)
def test_long_inputs_stay_linear(rule):
    # the same shape at two sizes: effort grows at most linearly (generous factor)
    small = effort(compare_versions, "1." * 20 + "0", "1." * 20 + "1", scheme=rule)
    large = effort(compare_versions, "1." * 120 + "0", "1." * 120 + "1", scheme=rule)
    assert small.error is None and large.error is None
    assert large.lines <= 6 * 3 * small.lines, (small.lines, large.lines)


@given(version_text, scheme)
def test_version_objects_hash_like_they_compare(text, rule):
    try:
        version = Version(text, rule)
    except VersionError:
        return
    same = Version(text, rule)
    assert version == same and hash(version) == hash(same)
