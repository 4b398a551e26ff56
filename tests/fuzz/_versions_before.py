# Source: plugins/module_utils/_common/versions.py at commit c1042cc, before issue #11 (the 'tool' rule
# and the constraint language as they were). tests/fuzz uses it as the oracle for
# 'valid inputs give the same answer as before'. Do not edit.
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Version parsing, comparison and the constraint language of gpu_native.fleet.

Small public API (standard library only, Python 3.8+)::

    parse_version("1:5.15.0-105-generic")     -> Version
    compare_versions("535.261.03", "550")     -> -1 / 0 / 1
    parse_constraint(">=1.7, <2.0")           -> Constraint (raises ConstraintError)
    satisfies("1.7.22", ">=1.7, <2.0")        -> True

Versions
    Compared the way dpkg compares them (``epoch:upstream-revision``):
    runs of digits compare as numbers (``08 == 8``, ``10 > 9``), other
    characters compare as text where ``~`` sorts before everything, even
    the end of the string (``1.17.0~rc1 < 1.17.0``), and letters sort before
    punctuation.  A leading ``v`` is dropped (``v1.31.2``).  Two things are
    normalised first so that versions as tools print them compare as people
    mean them:

    * a trailing kernel flavour made only of letters (``-generic``,
      ``-amd64``, ``-cloud-amd64``) is set aside, so ``5.15.0-105-generic``
      compares as ``5.15.0-105``;
    * a SemVer pre-release (``-rc.1``, ``-beta``) becomes a ``~`` suffix so it
      sorts before the release; SemVer build metadata (``+k3s1``) is
      ignored only when it follows a SemVer pre-release or a plain
      ``x.y.z`` (Debian's ``+deb12u1``/``+b1`` after a revision stay
      significant).

Constraints
    * ``/regex/``: ``re.search`` on the actual value as text;
    * a comma-separated list of comparisons, all of which must hold:
      ``>=5.15.0-100, <5.16``; operators ``>= > <= < == !=``;
    * anything else is an exact value: it matches a version equal to it or
      any version in its series (``1.33`` matches ``1.33.2`` and
      ``v1.33.0``; ``550.127.08`` matches the package version
      ``550.127.08-1``; ``1.3`` does not match ``1.33``).  Values that are
      not versions (``running``, ``ubuntu``, ``32768 60999``) compare as
      text, whitespace-normalised.  Booleans compare exactly; numbers given
      as YAML integers compare numerically.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

__all__ = [
    "ConstraintError",
    "VersionError",
    "Version",
    "Constraint",
    "parse_version",
    "is_version",
    "compare_versions",
    "parse_constraint",
    "satisfies",
    "OPERATORS",
]

#: Comparison operators accepted in constraint strings, longest first.
OPERATORS = (">=", "<=", "==", "!=", ">", "<")

_VERSION_RE = re.compile(r"^(?:(\d+):)?([0-9][A-Za-z0-9.+~_:-]*)$")
_FLAVOUR_RE = re.compile(r"(?:-[A-Za-z][A-Za-z0-9_]*)+$")
_SEMVER_PRE_RE = re.compile(
    r"^(\d+(?:\.\d+)*)-((?:alpha|beta|rc|pre|dev)[0-9A-Za-z.]*)(\+[0-9A-Za-z.-]+)?$", re.I)
_SEMVER_BUILD_RE = re.compile(r"^(\d+\.\d+\.\d+)\+[0-9A-Za-z.-]+$")
_OPERATOR_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<|=>|=<|=|~=|\^|~)?\s*(.*?)\s*$")
_SERIES_SEPARATORS = ".-+~:_"


class VersionError(ValueError):
    """Raised when a string cannot be read as a version."""


class ConstraintError(ValueError):
    """Raised for a malformed constraint; the message names the string and why."""

    def __init__(self, text, reason, path=None):
        self.text = text
        self.reason = reason
        self.path = path
        super(ConstraintError, self).__init__(self._render())

    def _render(self):
        where = (" at %s" % self.path) if self.path else ""
        return "bad constraint %r%s: %s" % (self.text, where, self.reason)

    def at(self, path):
        """Return the same error located at ``path`` (e.g. ``profiles.a.kernel.release``)."""
        return ConstraintError(self.text, self.reason, path)


def _char_order(char):
    # dpkg's ordering of non-digit characters: '~' before the end of the
    # string, letters before everything else.
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(left, right):
    """dpkg's verrevcmp: compare two version fragments, returns -1, 0 or 1."""
    i = j = 0
    while i < len(left) or j < len(right):
        first_diff = 0
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            lc = _char_order(left[i]) if i < len(left) and not left[i].isdigit() else 0
            rc = _char_order(right[j]) if j < len(right) and not right[j].isdigit() else 0
            if lc != rc:
                return -1 if lc < rc else 1
            i += 1
            j += 1
        while i < len(left) and left[i] == "0":
            i += 1
        while j < len(right) and right[j] == "0":
            j += 1
        while i < len(left) and left[i].isdigit() and j < len(right) and right[j].isdigit():
            if not first_diff:
                first_diff = ord(left[i]) - ord(right[j])
            i += 1
            j += 1
        if i < len(left) and left[i].isdigit():
            return 1
        if j < len(right) and right[j].isdigit():
            return -1
        if first_diff:
            return -1 if first_diff < 0 else 1
    return 0


def _tokens(text):
    """Split into digit runs (as ints) and other runs (as text)."""
    return [int(tok) if tok.isdigit() else tok for tok in re.findall(r"\d+|\D+", text)]


class Version:
    """A parsed version.

    Attributes: ``original`` (as given), ``epoch`` (int or None when absent),
    ``upstream``, ``revision`` (text after the last ``-``, or ``""``),
    ``flavour`` (kernel flavour set aside, e.g. ``-generic``).
    Instances compare with ``< <= == != >= >`` and hash consistently.
    """

    __slots__ = ("original", "epoch", "upstream", "revision", "flavour")

    def __init__(self, text):
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise VersionError("not a version: %r" % (text,))
        original = str(text).strip()
        body = original
        if body[:1] in ("v", "V") and body[1:2].isdigit():
            body = body[1:]
        match = _VERSION_RE.match(body)
        if not match:
            raise VersionError(
                "not a version: %r (a version starts with a digit, optionally after 'v' or 'EPOCH:')" % original)
        epoch, body = match.group(1), match.group(2)
        flavour = ""
        flavour_match = _FLAVOUR_RE.search(body)
        if flavour_match and flavour_match.start() > 0:
            pre = _SEMVER_PRE_RE.match(body)
            if not pre:
                flavour = flavour_match.group(0)
                body = body[:flavour_match.start()]
        pre = _SEMVER_PRE_RE.match(body)
        if pre:
            body = "%s~%s" % (pre.group(1), pre.group(2))
        else:
            build = _SEMVER_BUILD_RE.match(body)
            if build:
                body = build.group(1)
        if "-" in body:
            upstream, revision = body.rsplit("-", 1)
        else:
            upstream, revision = body, ""
        self.original = original
        self.epoch = int(epoch) if epoch is not None else None
        self.upstream = upstream
        self.revision = revision
        self.flavour = flavour

    @property
    def normalized(self):
        """The compared form, e.g. ``5.15.0-105`` for ``5.15.0-105-generic``."""
        text = self._body()
        return ("%d:%s" % (self.epoch, text)) if self.epoch is not None else text

    def compare(self, other):
        """Return -1, 0 or 1 comparing ``self`` with ``other`` (Version or text)."""
        if not isinstance(other, Version):
            other = Version(other)
        left_epoch = self.epoch or 0
        right_epoch = other.epoch or 0
        if left_epoch != right_epoch:
            return -1 if left_epoch < right_epoch else 1
        result = _verrevcmp(self.upstream, other.upstream)
        if result:
            return result
        return _verrevcmp(self.revision, other.revision)

    def _body(self):
        return self.upstream + ("-" + self.revision if self.revision else "")

    def in_series(self, series):
        """True when ``self`` equals ``series`` or lies in it (``1.33.2`` in ``1.33``).

        The epoch must match only when ``series`` names one, so the package
        version ``1:550.127.08-1`` lies in the series ``550.127.08``.
        """
        if not isinstance(series, Version):
            series = Version(series)
        if series.epoch is not None and (self.epoch or 0) != series.epoch:
            return False
        if _verrevcmp(self.upstream, series.upstream) == 0 and _verrevcmp(self.revision, series.revision) == 0:
            return True
        mine = _tokens(self._body())
        prefix = _tokens(series._body())
        if len(prefix) >= len(mine) or mine[:len(prefix)] != prefix:
            return False
        following = mine[len(prefix)]
        return isinstance(following, str) and following[:1] in _SERIES_SEPARATORS

    def __eq__(self, other):
        try:
            return self.compare(other) == 0
        except VersionError:
            return NotImplemented

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other):
        return self.compare(other) < 0

    def __le__(self, other):
        return self.compare(other) <= 0

    def __gt__(self, other):
        return self.compare(other) > 0

    def __ge__(self, other):
        return self.compare(other) >= 0

    def __hash__(self):
        # Equal versions ("08" vs "8") must hash alike: hash the token form.
        return hash((self.epoch or 0, tuple(_tokens(self.upstream)), tuple(_tokens(self.revision))))

    def __repr__(self):
        return "Version(%r)" % self.original

    def __str__(self):
        return self.original


def parse_version(text):
    """Parse ``text`` into a :class:`Version`; raises :class:`VersionError`."""
    return Version(text)


def is_version(text):
    """True when ``text`` reads as a version (starts with a digit, or ``v`` + digit)."""
    try:
        Version(text)
    except VersionError:
        return False
    return True


def compare_versions(left, right):
    """Compare two versions given as text; returns -1, 0 or 1.

    >>> compare_versions("5.15.0-105-generic", "5.15.0-100")
    1
    >>> compare_versions("535.261.03", "535.261.3")
    0
    """
    return Version(left).compare(Version(right))


def _normalize_text(value):
    return " ".join(str(value).split())


class Constraint:
    """A parsed constraint; call :meth:`matches` with an actual value.

    ``kind`` is ``exact``, ``comparisons`` or ``regex``; ``text`` is the
    constraint as written (booleans and numbers rendered as text);
    ``comparisons`` is a list of ``(operator, Version)`` for that kind.
    """

    __slots__ = ("text", "kind", "value", "comparisons", "pattern")

    def __init__(self, text, kind, value=None, comparisons=None, pattern=None):
        self.text = text
        self.kind = kind
        self.value = value
        self.comparisons = comparisons or []
        self.pattern = pattern

    def matches(self, actual):
        """True when ``actual`` satisfies the constraint; ``None`` never does.

        Raises nothing: an actual that is not a version never satisfies a
        comparison.
        """
        if actual is None:
            return False
        if self.kind == "regex":
            return self.pattern.search(_actual_text(actual)) is not None
        if self.kind == "comparisons":
            try:
                version = Version(actual)
            except VersionError:
                return False
            for operator, wanted in self.comparisons:
                result = version.compare(wanted)
                if not _OPERATOR_TESTS[operator](result):
                    return False
            return True
        return _exact_matches(self.value, actual)

    def __repr__(self):
        return "Constraint(%r)" % self.text

    def __str__(self):
        return self.text


_OPERATOR_TESTS = {
    ">=": lambda r: r >= 0,
    ">": lambda r: r > 0,
    "<=": lambda r: r <= 0,
    "<": lambda r: r < 0,
    "==": lambda r: r == 0,
    "!=": lambda r: r != 0,
}


def _actual_text(actual):
    if isinstance(actual, bool):
        return "true" if actual else "false"
    return str(actual)


def _exact_matches(wanted, actual):
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return isinstance(wanted, bool) and isinstance(actual, bool) and wanted == actual
    if isinstance(wanted, (int, float)) and isinstance(actual, (int, float)):
        return wanted == actual
    wanted_text = _normalize_text(wanted)
    actual_text = _normalize_text(actual)
    if wanted_text == actual_text:
        return True
    if is_version(wanted_text) and is_version(actual_text):
        return Version(actual_text).in_series(Version(wanted_text))
    return False


def _looks_like_comparison(part):
    return part.lstrip()[:1] in ("<", ">", "=", "!", "~", "^")


def parse_constraint(value, path=None):
    """Parse a constraint given as text, a number or a boolean.

    Returns a :class:`Constraint`.  Raises :class:`ConstraintError` naming
    the string, ``path`` (when given) and the reason, for example::

        bad constraint '=>1.7' at profiles.h100.containerd.version:
        unknown operator '=>'; use one of >= > <= < == !=
    """
    if isinstance(value, bool):
        return Constraint("true" if value else "false", "exact", value=value)
    if isinstance(value, (int, float)):
        return Constraint(str(value), "exact", value=value)
    if not isinstance(value, str):
        raise ConstraintError(value, "expected a string, number or boolean, got %s" % type(value).__name__, path)
    text = value.strip()
    if not text:
        raise ConstraintError(value, "empty constraint", path)
    if text.startswith("/"):
        if len(text) < 2 or not text.endswith("/"):
            raise ConstraintError(value, "a regular expression must be written /pattern/", path)
        try:
            pattern = re.compile(text[1:-1])
        except re.error as exc:
            raise ConstraintError(value, "invalid regular expression: %s" % exc, path)
        return Constraint(text, "regex", pattern=pattern)
    parts = text.split(",")
    if not any(_looks_like_comparison(part) for part in parts):
        return Constraint(text, "exact", value=text)
    comparisons = []
    for part in parts:
        if not part.strip():
            raise ConstraintError(value, "empty comparison between commas", path)
        match = _OPERATOR_RE.match(part)
        operator, operand = match.group(1), match.group(2)
        if operator is None:
            raise ConstraintError(
                value, "%r has no operator; write each comparison as OP VERSION with OP one of %s"
                % (part.strip(), " ".join(OPERATORS)), path)
        if operator not in OPERATORS:
            raise ConstraintError(value, "unknown operator %r; use one of %s" % (operator, " ".join(OPERATORS)), path)
        if not operand:
            raise ConstraintError(value, "operator %r has no version after it" % operator, path)
        try:
            comparisons.append((operator, Version(operand)))
        except VersionError:
            raise ConstraintError(value, "%r is not a version (comparisons need versions such as 1.7 or 5.15.0-100)"
                                  % operand, path)
    return Constraint(text, "comparisons", comparisons=comparisons)


def satisfies(actual, constraint):
    """True when ``actual`` satisfies ``constraint`` (text or :class:`Constraint`)."""
    if not isinstance(constraint, Constraint):
        constraint = parse_constraint(constraint)
    return constraint.matches(actual)
