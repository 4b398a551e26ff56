"""versions: dpkg-style comparison, kernel releases, driver versions, the constraint language."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.versions import (
    ConstraintError,
    Version,
    VersionError,
    compare_versions,
    is_version,
    parse_constraint,
    satisfies,
)


@pytest.mark.parametrize("left, right, expected", [
    # driver versions: numbers compare numerically, leading zeros do not matter
    ("535.261.03", "535.261.3", 0),
    ("535.261.03", "535.54.03", 1),
    ("550.127.08", "550.127.5", 1),
    ("535.261.03", "550", -1),
    ("565.57.01", "565.57.01", 0),
    # kernel releases: ABI number counts, the flavour does not
    ("5.15.0-105-generic", "5.15.0-100", 1),
    ("5.15.0-105-generic", "5.15.0-105", 0),
    ("5.15.0-99-generic", "5.15.0-100-generic", -1),
    ("5.15.0-105-generic", "5.16", -1),
    ("6.1.0-18-cloud-amd64", "6.1.0-18-amd64", 0),
    ("6.1.0-18-amd64", "6.1.0-9-amd64", 1),
    ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-427.13.1", 1),
    ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503", -1),
    # Debian suffixes, epochs and revisions
    ("1.6.20~ds1-1+b1", "1.6.20", -1),
    ("1.6.20~ds1", "1.6.19", 1),
    ("1.17.3-1", "1.17.3", 1),
    ("1:1.0", "2.0", 1),
    ("1.0+deb12u1", "1.0", 1),
    ("2.8ubuntu1", "2.8", 1),
    ("1.0a", "1.0+", -1),
    # SemVer: v prefix, pre-releases before the release, build metadata ignored
    ("v1.31.2", "1.31.2", 0),
    ("1.17.0-rc.1", "1.17.0", -1),
    ("1.17.0-rc.2", "1.17.0-rc.1", 1),
    ("v1.31.2+k3s1", "1.31.2", 0),
    # plain dotted numbers
    ("12.10", "12.9", 1),
    ("1.7", "1.7.0", -1),
    ("22.04", "22.04", 0),
])
def test_compare_versions(left, right, expected):
    assert compare_versions(left, right) == expected
    swapped_left, swapped_right = right, left
    assert compare_versions(swapped_left, swapped_right) == -expected


def test_version_parts_and_operators():
    version = Version("1:5.15.0-105-generic")
    assert (version.epoch, version.upstream, version.revision, version.flavour) == (1, "5.15.0", "105", "-generic")
    assert version.normalized == "1:5.15.0-105"
    assert str(version) == "1:5.15.0-105-generic"
    assert Version("535.261.03") == Version("535.261.3")
    assert hash(Version("535.261.03")) == hash(Version("535.261.3"))
    assert Version("1.7") < Version("1.7.1") <= Version("1.7.1") < Version("2.0")
    assert sorted(["1.10", "1.9", "1.9.1", "1.10~rc1"], key=Version) == ["1.9", "1.9.1", "1.10~rc1", "1.10"]


@pytest.mark.parametrize("text", ["", "latest", "abc1.0", "1.0 beta", None, True, [1]])
def test_not_a_version(text):
    assert not is_version(text)
    with pytest.raises(VersionError):
        Version(text)


@pytest.mark.parametrize("version, series, expected", [
    ("1.33.2", "1.33", True),
    ("v1.33.0", "1.33", True),
    ("1.33", "1.33", True),
    ("1.330", "1.33", False),
    ("1.3", "1.33", False),
    ("1.33", "1.3", False),
    ("550.127.08-1", "550.127.08", True),
    ("1:550.127.08-1", "550.127.08", True),
    ("1:550.127.08-1", "2:550.127.08", False),
    ("565.57.01", "565", True),
    ("5650.1", "565", False),
    ("12.7", "12", True),
])
def test_series(version, series, expected):
    assert Version(version).in_series(series) is expected


class TestConstraintForms:
    def test_exact_version_matches_its_series(self):
        constraint = parse_constraint("1.33")
        assert constraint.kind == "exact"
        assert constraint.matches("1.33.4") and constraint.matches("v1.33.0")
        assert not constraint.matches("1.34.0") and not constraint.matches("1.3")

    def test_exact_driver_version_matches_numerically(self):
        assert satisfies("550.127.8", "550.127.08")
        assert not satisfies("550.127.05", "550.127.08")

    def test_exact_text_value(self):
        assert satisfies("running", "running")
        assert not satisfies("Running", "running")
        assert satisfies("32768\t60999", "32768 60999")
        assert not satisfies("32768 61000", "32768 60999")

    def test_numbers_and_booleans(self):
        assert parse_constraint(8).text == "8"
        assert satisfies(8, 8) and satisfies("8", 8) and not satisfies(7, 8)
        assert satisfies("262144", 262144)
        assert satisfies(True, True) and not satisfies("true", True) and not satisfies(1, True)
        assert parse_constraint(False).text == "false"

    def test_comparisons(self):
        constraint = parse_constraint(">=5.15.0-100, <5.16")
        assert constraint.kind == "comparisons"
        assert [pair[0] for pair in constraint.comparisons] == [">=", "<"]
        assert constraint.matches("5.15.0-105-generic")
        assert not constraint.matches("5.15.0-99-generic")
        assert not constraint.matches("5.16.0-1-generic")
        assert not constraint.matches("not-a-version")
        assert not constraint.matches(None)

    @pytest.mark.parametrize("constraint, actual, expected", [
        (">=550", "550.127.08", True),
        (">550", "550", False),
        (">550", "550.1", True),
        ("<=1.17", "1.17", True),
        ("<=1.17", "1.17.3", False),
        ("<2.0", "1.7.22", True),
        ("==1.17.3", "1.17.3", True),
        ("==1.17", "1.17.3", False),
        ("!=1.7.19", "1.7.19", False),
        ("!=1.7.19", "1.7.22", True),
        (">= 1.7 ,  < 2.0", "1.7.22", True),
        (">=1.31, <1.34, !=1.32.0", "1.32.0", False),
        (">=262144", "262144", True),
        (">=262144", 65530, False),
    ])
    def test_each_operator(self, constraint, actual, expected):
        assert satisfies(actual, constraint) is expected

    def test_regex(self):
        constraint = parse_constraint("/^5\\.15\\.0-\\d+-(generic|nvidia)$/")
        assert constraint.kind == "regex"
        assert constraint.matches("5.15.0-105-nvidia")
        assert not constraint.matches("5.15.0-105-lowlatency")
        assert satisfies(True, "/^true$/")
        assert not constraint.matches(None)


@pytest.mark.parametrize("text, reason", [
    ("", "empty constraint"),
    ("   ", "empty constraint"),
    ("=>1.7", "unknown operator '=>'"),
    ("~=1.7", "unknown operator '~='"),
    ("^1.7", "unknown operator '^'"),
    ("=1.7", "unknown operator '='"),
    ("1.7, <2.0", "'1.7' has no operator"),
    (">=1.7, 2.0", "'2.0' has no operator"),
    (">=", "operator '>=' has no version after it"),
    (">=latest", "'latest' is not a version"),
    (">=1.7,,<2.0", "empty comparison between commas"),
    (">=1.7,", "empty comparison between commas"),
    ("/abc", "a regular expression must be written /pattern/"),
    ("/", "a regular expression must be written /pattern/"),
    ("/[a-/", "invalid regular expression"),
    ({"a": 1}, "expected a string, number or boolean, got dict"),
    (None, "expected a string, number or boolean, got NoneType"),
])
def test_bad_constraints(text, reason):
    with pytest.raises(ConstraintError) as info:
        parse_constraint(text, "profiles.h100.containerd.version")
    message = str(info.value)
    assert reason in message
    assert "at profiles.h100.containerd.version" in message
    assert repr(text) in message
    assert info.value.text == text and info.value.path == "profiles.h100.containerd.version"


def test_constraint_error_without_path_and_relocated():
    error = ConstraintError(">=x", "'x' is not a version")
    assert str(error) == "bad constraint '>=x': 'x' is not a version"
    assert str(error.at("a.b")) == "bad constraint '>=x' at a.b: 'x' is not a version"


# ---- schemes (issue #11) and limits (issue #10) ------------------------------------
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import versions as versions_module  # noqa: E402


def test_the_tool_rule_is_the_default_and_is_not_the_package_rule():
    # the three pairs of issue #11: the tool rule (SemVer build metadata dropped) disagrees with dpkg
    assert compare_versions("5.5.0-1", "5.5.0+dfsg-2") == 1
    assert compare_versions("5.5.0-1", "5.5.0+dfsg-2", scheme="dpkg") == -1
    assert "tool" in compare_versions.__doc__ and "dpkg" in compare_versions.__doc__
    with pytest.raises(ValueError):
        compare_versions("1", "2", scheme="semver")


def test_versions_of_each_scheme():
    assert repr(Version("1:1.0-1", "dpkg")) == "Version('1:1.0-1', scheme='dpkg')"
    assert Version("1.0", "dpkg") == Version("1.0-0", "dpkg") == Version("1.00", "dpkg")
    assert hash(Version("1.0", "dpkg")) == hash(Version("1.00-0", "dpkg"))
    assert Version("1.0^git1", "rpm") > "1.0"
    assert Version("2:1.0-1.el9", "rpm").epoch == 2
    assert Version("1.0~rc1", "rpm").in_series("1.0")
    assert Version("1:550.127.08-1", "dpkg").in_series("550.127.08")
    assert not Version("1:550.127.08-1", "dpkg").in_series("2:550.127.08")
    with pytest.raises(VersionError):
        Version("1.0-", "dpkg")
    with pytest.raises(VersionError):
        Version("x:1.0", "dpkg")
    with pytest.raises(VersionError):
        Version("", "rpm")


@pytest.mark.parametrize("actual, constraint, scheme, expected", [
    ("5.5.0+dfsg-2", ">5.5.0-1", "dpkg", True),
    ("5.5.0+dfsg-2", ">5.5.0-1", "tool", False),
    ("3.9.1+dfsg-1", ">3.9.1-6", "dpkg", True),
    ("0.6.0+dfsg-1", "<0.6.0+dfsg-6", "dpkg", True),
    ("0.6.0+dfsg-1", "0.6.0", "dpkg", True),  # series
    ("1.0^git1-1", ">1.0-1", "rpm", True),
    ("1.0~rc1-1", "<1.0", "rpm", True),
])
def test_constraints_use_the_scheme_of_the_fact(actual, constraint, scheme, expected):
    assert satisfies(actual, constraint, scheme) is expected


@pytest.mark.parametrize("value, kind, reason", [
    ("550.*.*", "version", "wildcards are not supported"),
    (">=550.*", "text", "wildcards are not supported"),
    ("latest", "version", "not a version"),
    (True, "version", "expected a version, got a boolean"),
    (True, "count", "got a boolean"),
    ("eight", "count", "expected a whole number"),
    (">=4.5", "count", "'4.5' is not a whole number"),
    (1.5, "count", "expected a whole number"),
    ("1" * 300, "version", "not a version"),
    ("x" * 1100, "text", "longer than 1024 characters"),
    (",".join([">=1"] * 17), "version", "more than 16 comparisons"),
    ("/" + "a" * 600 + "/", "text", "regular expression longer than 512 characters"),
    ("/(a*)*b/", "text", "nested repetition"),
    ("/(?:x+y?)+$/", "text", "nested repetition"),
])
def test_kinds_and_limits(value, kind, reason):
    with pytest.raises(ConstraintError) as info:
        parse_constraint(value, "p.q", kind)
    assert reason in str(info.value) and "at p.q" in str(info.value)


def test_long_values_are_not_versions_and_regexes_see_a_bounded_prefix():
    assert not is_version("1" * (versions_module.MAX_VERSION_LENGTH + 1))
    assert not satisfies("1" * 1000, ">=1")
    assert not satisfies("a" * (versions_module.MAX_MATCHED_TEXT + 10) + "END", "/END/")
