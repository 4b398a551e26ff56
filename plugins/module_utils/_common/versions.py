# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Version parsing, comparison and the constraint language of gpu_native.fleet.

Small public API (standard library only, Python 3.8+)::

    parse_version("1:5.15.0-105-generic")          -> Version (scheme "tool")
    compare_versions("535.261.03", "550")          -> -1 / 0 / 1 (scheme "tool")
    compare_versions("5.5.0-1", "5.5.0+dfsg-2", scheme="dpkg")  -> -1
    dpkg_compare("1.0~rc1", "1.0")                 -> -1 (exactly dpkg --compare-versions)
    rpm_compare("1.0^git1", "1.0")                 -> 1  (exactly rpm's rpm.vercmp)
    parse_constraint(">=1.7, <2.0")                -> Constraint (raises ConstraintError)
    satisfies("1.7.22", ">=1.7, <2.0")             -> True

Schemes: which rule compares two versions
    A version is compared with the rule of the place it was read from;
    a constraint a user writes is compared with the rule of the fact it is
    checked against (``Constraint.matches(actual, scheme)``).

    ``dpkg``
        Versions read from the dpkg database.  Exactly ``dpkg
        --compare-versions``: ``[epoch:]upstream[-revision]``, digit runs as
        numbers, ``~`` before everything (even the end), letters before other
        characters, a missing revision equal to ``0``.  No normalisation:
        ``+dfsg``, ``+b1``, ``+really`` count as dpkg says.
    ``rpm``
        Versions read from the rpm database.  Exactly rpm's ``rpm.vercmp``
        (``rpmverCmp`` on ``[epoch:]version[-release]``): ``~`` sorts before
        everything, ``^`` after the base version but before anything else
        appended, digit segments beat letter segments, other characters only
        separate; a missing release sorts before any release (``1.0`` <
        ``1.0-1``); a missing epoch is 0.
    ``tool``
        Versions printed by tools (``kubelet --version``, ``containerd
        --version``, ``nvidia-ctk --version``, ``nvidia-smi``, the kernel
        release, ``VERSION_ID``) and versions people write.  dpkg's order,
        after three conveniences: a leading ``v`` is dropped (``v1.31.2``);
        a trailing kernel flavour made only of letters (``-generic``,
        ``-amd64``, ``-cloud-amd64``) is set aside, so ``5.15.0-105-generic``
        compares as ``5.15.0-105``; a SemVer pre-release (``-rc.1``,
        ``-beta``) becomes a ``~`` suffix so it sorts before the release, and
        SemVer build metadata (``+k3s1``) is ignored after a pre-release or a
        plain ``x.y.z``.  Never use it for package versions.

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

    ``parse_constraint(value, path, kind)`` checks the value for the kind of
    fact it will be compared with: ``version`` (an exact value must be a
    version: ``550.*.*`` is refused), ``count`` (a non-negative integer or
    integer comparisons; booleans refused), ``text`` (anything).

Limits (hostile input): a version is at most :data:`MAX_VERSION_LENGTH`
characters, a constraint at most :data:`MAX_CONSTRAINT_LENGTH` with at most
:data:`MAX_COMPARISONS` comparisons, a regular expression at most
:data:`MAX_REGEX_LENGTH` characters and without nested repetition such as
``(a+)+`` (exponential backtracking); a regular expression looks at the first
:data:`MAX_MATCHED_TEXT` characters of a value.  Every comparison is linear
in the length of its inputs.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:  # Python 3.11+ moved (and deprecated) sre_parse
    import re._parser as _sre_parse  # pylint: disable=ungrouped-imports
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_parse as _sre_parse

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

__all__ = [
    "ConstraintError",
    "VersionError",
    "Version",
    "Constraint",
    "SCHEMES",
    "CONSTRAINT_KINDS",
    "parse_version",
    "is_version",
    "compare_versions",
    "dpkg_compare",
    "rpm_compare",
    "parse_constraint",
    "satisfies",
    "OPERATORS",
]

#: Comparison operators accepted in constraint strings, longest first.
OPERATORS = (">=", "<=", "==", "!=", ">", "<")

#: Comparison rules, by where a version comes from (see the module docstring).
SCHEMES = ("tool", "dpkg", "rpm")

#: What a constraint is checked against: see :func:`parse_constraint`.
CONSTRAINT_KINDS = ("text", "version", "count")

MAX_VERSION_LENGTH = 256
MAX_CONSTRAINT_LENGTH = 1024
MAX_COMPARISONS = 16
MAX_REGEX_LENGTH = 512
MAX_REGEX_DEPTH = 50
MAX_MATCHED_TEXT = 65536

_VERSION_RE = re.compile(r"^(?:(\d+):)?([0-9][A-Za-z0-9.+~^_:-]*)$")
_FLAVOUR_RE = re.compile(r"(?:-[A-Za-z][A-Za-z0-9_]*)+$")
_SEMVER_PRE_RE = re.compile(
    r"^(\d+(?:\.\d+)*)-((?:alpha|beta|rc|pre|dev)[0-9A-Za-z.]*)(\+[0-9A-Za-z.-]+)?$", re.I)
_SEMVER_BUILD_RE = re.compile(r"^(\d+\.\d+\.\d+)\+[0-9A-Za-z.-]+$")
_OPERATOR_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<|=>|=<|=|~=|\^|~)?\s*(.*?)\s*$")
_SERIES_SEPARATORS = ".-+~:_^"
_INTEGER_RE = re.compile(r"^\d+$")


class VersionError(FleetError, ValueError):
    """Raised when a string cannot be read as a version."""


class ConstraintError(FleetError, ValueError):
    """Raised for a malformed constraint; the message names the string and why."""

    def __init__(self, text, reason, path=None):
        self.text = text
        self.reason = reason
        self.path = path
        super(ConstraintError, self).__init__(self._render())

    def _render(self):
        where = (" at %s" % self.path) if self.path else ""
        shown = repr(self.text)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return "bad constraint %s%s: %s" % (shown, where, self.reason)

    def at(self, path):
        """Return the same error located at ``path`` (e.g. ``profiles.a.kernel.release``)."""
        return ConstraintError(self.text, self.reason, path)


def _check_scheme(scheme):
    if scheme not in SCHEMES:
        raise ValueError("unknown version scheme %r; use one of %s" % (scheme, ", ".join(SCHEMES)))


# ---- dpkg -----------------------------------------------------------------
# dpkg works on bytes (signed char on the platforms we run on): digits and
# letters are ASCII only.  Source: dpkg lib/dpkg/version.c (order, verrevcmp,
# dpkg_version_compare) and lib/dpkg/parsehelp.c (parseversion).
_DIGITS = frozenset(range(0x30, 0x3A))
_ALPHA = frozenset(list(range(0x41, 0x5B)) + list(range(0x61, 0x7B)))
_ALNUM = _DIGITS | _ALPHA
_TILDE = 0x7E
_CARET = 0x5E


def _bytes(text):
    return text.encode("utf-8", "surrogateescape")


def _dpkg_order(byte):
    if byte in _ALPHA:
        return byte
    if byte == _TILDE:
        return -1
    if byte >= 0x80:
        return byte  # a signed char c >= 0x80 is c - 256; dpkg adds 256
    return byte + 256


def _verrevcmp(left, right):
    """dpkg's verrevcmp on two byte strings; returns -1, 0 or 1."""
    i = j = 0
    len_left, len_right = len(left), len(right)
    while i < len_left or j < len_right:
        first_diff = 0
        while (i < len_left and left[i] not in _DIGITS) or (j < len_right and right[j] not in _DIGITS):
            lc = _dpkg_order(left[i]) if i < len_left and left[i] not in _DIGITS else 0
            rc = _dpkg_order(right[j]) if j < len_right and right[j] not in _DIGITS else 0
            if lc != rc:
                return -1 if lc < rc else 1
            i += 1
            j += 1
        while i < len_left and left[i] == 0x30:
            i += 1
        while j < len_right and right[j] == 0x30:
            j += 1
        while i < len_left and left[i] in _DIGITS and j < len_right and right[j] in _DIGITS:
            if not first_diff:
                first_diff = left[i] - right[j]
            i += 1
            j += 1
        if i < len_left and left[i] in _DIGITS:
            return 1
        if j < len_right and right[j] in _DIGITS:
            return -1
        if first_diff:
            return -1 if first_diff < 0 else 1
    return 0


def _dpkg_parse(text):
    """``(epoch, upstream, revision)`` as dpkg's parseversion reads them (bytes).

    Raises :class:`VersionError` where dpkg reports an error (not for its
    warnings, such as an upstream that does not start with a digit).
    """
    if not isinstance(text, str):
        raise VersionError("not a version: %r" % (text,))
    data = _bytes(text.strip())
    if not data:
        raise VersionError("not a version: empty")
    if len(data) > MAX_VERSION_LENGTH:
        raise VersionError("not a version: longer than %d characters" % MAX_VERSION_LENGTH)
    if any(byte in b" \t\n\r\v\f" for byte in data):
        raise VersionError("not a version: %r contains whitespace" % text)
    epoch = 0
    colon = data.find(b":")
    if colon >= 0:
        digits = data[:colon]
        if not digits or not all(byte in _DIGITS for byte in digits):
            raise VersionError("not a version: %r has a bad epoch" % text)
        epoch = int(digits)
        if epoch > 2147483647:
            raise VersionError("not a version: %r has an epoch that is too big" % text)
        data = data[colon + 1:]
        if not data:
            raise VersionError("not a version: %r has nothing after the colon" % text)
    dash = data.rfind(b"-")
    if dash >= 0:
        upstream, revision = data[:dash], data[dash + 1:]
        if not revision:
            raise VersionError("not a version: %r has an empty revision" % text)
    else:
        upstream, revision = data, b""
    if not upstream:
        raise VersionError("not a version: %r has an empty upstream version" % text)
    return epoch, upstream, revision


def dpkg_compare(left, right):
    """Compare two Debian package versions exactly as ``dpkg --compare-versions``.

    Returns -1, 0 or 1; raises :class:`VersionError` for a string dpkg
    rejects.  ``dpkg_compare("5.5.0-1", "5.5.0+dfsg-2") == -1``.
    """
    a, b = _dpkg_parse(left), _dpkg_parse(right)
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    return _verrevcmp(a[1], b[1]) or _verrevcmp(a[2], b[2])


# ---- rpm ------------------------------------------------------------------
# Source: rpm rpmio/rpmvercmp.c (rpmvercmp) and rpmio/rpmver.c (parseEVR,
# rpmverCmp), which back the Lua ``rpm.vercmp`` of rpm 4.16+.
def _rpmvercmp(a, b):
    """rpm's rpmvercmp on two byte strings; returns -1, 0 or 1."""
    if a == b:
        return 0
    i = j = 0
    len_a, len_b = len(a), len(b)
    while i < len_a or j < len_b:
        while i < len_a and a[i] not in _ALNUM and a[i] != _TILDE and a[i] != _CARET:
            i += 1
        while j < len_b and b[j] not in _ALNUM and b[j] != _TILDE and b[j] != _CARET:
            j += 1
        ca = a[i] if i < len_a else None
        cb = b[j] if j < len_b else None
        if ca == _TILDE or cb == _TILDE:
            if ca != _TILDE:
                return 1
            if cb != _TILDE:
                return -1
            i += 1
            j += 1
            continue
        if ca == _CARET or cb == _CARET:
            if ca is None:
                return -1
            if cb is None:
                return 1
            if ca != _CARET:
                return 1
            if cb != _CARET:
                return -1
            i += 1
            j += 1
            continue
        if ca is None or cb is None:
            break
        start_a, start_b = i, j
        if ca in _DIGITS:
            while i < len_a and a[i] in _DIGITS:
                i += 1
            while j < len_b and b[j] in _DIGITS:
                j += 1
            numeric = True
        else:
            while i < len_a and a[i] in _ALPHA:
                i += 1
            while j < len_b and b[j] in _ALPHA:
                j += 1
            numeric = False
        if start_b == j:
            return 1 if numeric else -1
        seg_a, seg_b = a[start_a:i], b[start_b:j]
        if numeric:
            seg_a = seg_a.lstrip(b"0")
            seg_b = seg_b.lstrip(b"0")
            if len(seg_a) != len(seg_b):
                return 1 if len(seg_a) > len(seg_b) else -1
        if seg_a != seg_b:
            return -1 if seg_a < seg_b else 1
    if i >= len_a and j >= len_b:
        return 0
    return -1 if i >= len_a else 1


def _rpm_parse(text):
    """``(epoch, version, release or None)`` as rpm's parseEVR splits them (bytes)."""
    if not isinstance(text, str):
        raise VersionError("not a version: %r" % (text,))
    data = _bytes(text.strip())
    if not data:
        raise VersionError("not a version: empty")
    if len(data) > MAX_VERSION_LENGTH:
        raise VersionError("not a version: longer than %d characters" % MAX_VERSION_LENGTH)
    end = 0
    while end < len(data) and data[end] in _DIGITS:
        end += 1
    dash = data.rfind(b"-", end)
    if end < len(data) and data[end] == 0x3A:  # ':'
        epoch = data[:end] or b"0"
        version_start = end + 1
    else:
        epoch = None
        version_start = 0
    if dash >= 0:
        return epoch, data[version_start:dash], data[dash + 1:]
    return epoch, data[version_start:], None


def rpm_compare(left, right):
    """Compare two EVR strings exactly as rpm's ``rpm.vercmp`` (``rpmverCmp``).

    Returns -1, 0 or 1.  ``rpm_compare("1.0~rc1", "1.0") == -1``,
    ``rpm_compare("1.0^git1", "1.0") == 1``, ``rpm_compare("1.0", "1.0-5") == -1``
    (a missing release sorts first).
    """
    a, b = _rpm_parse(left), _rpm_parse(right)
    result = _rpmvercmp(a[0] if a[0] is not None else b"0", b[0] if b[0] is not None else b"0")
    if result:
        return result
    result = _rpmvercmp(a[1], b[1])
    if result:
        return result
    return _rpm_release_cmp(a[2], b[2])


def _rpm_release_cmp(left, right):
    # rpmverCmp's compare_values: a missing release sorts before any release.
    if left is None or right is None:
        return 0 if left is right else (-1 if left is None else 1)
    return _rpmvercmp(left, right)


# ---- the Version object -----------------------------------------------------
def _tokens(text):
    """Split into digit runs (as ints) and other runs (as text)."""
    return [int(tok) if tok.isdigit() else tok for tok in re.findall(r"[0-9]+|[^0-9]+", text)]


class Version:
    """A parsed version, compared with the rule of its ``scheme``.

    Attributes: ``original`` (as given), ``scheme`` (``tool``, ``dpkg`` or
    ``rpm``), ``epoch`` (int or None when absent), ``upstream``,
    ``revision`` (dpkg revision or rpm release; ``""`` when absent) and,
    for ``tool``, ``flavour`` (kernel flavour set aside, e.g. ``-generic``).
    Instances compare with ``< <= == != >= >`` (the left operand's scheme
    decides; text on the right is parsed with it) and hash consistently.
    """

    __slots__ = ("original", "scheme", "epoch", "upstream", "revision", "flavour", "_has_revision")

    def __init__(self, text, scheme="tool"):
        _check_scheme(scheme)
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise VersionError("not a version: %r" % (text,))
        original = str(text).strip()
        self.original = original
        self.scheme = scheme
        self.flavour = ""
        if scheme == "dpkg":
            epoch, upstream, revision = _dpkg_parse(original)
            self.epoch = epoch if ":" in original else None
            self.upstream = upstream.decode("utf-8", "surrogateescape")
            self.revision = revision.decode("utf-8", "surrogateescape")
            self._has_revision = bool(revision)
            return
        if scheme == "rpm":
            epoch, version, release = _rpm_parse(original)
            self.epoch = int(epoch) if epoch is not None else None
            self.upstream = version.decode("utf-8", "surrogateescape")
            self.revision = release.decode("utf-8", "surrogateescape") if release is not None else ""
            self._has_revision = release is not None
            return
        self._parse_tool(original)

    def _parse_tool(self, original):
        if len(original) > MAX_VERSION_LENGTH:
            raise VersionError("not a version: longer than %d characters" % MAX_VERSION_LENGTH)
        body = original
        if body[:1] in ("v", "V") and body[1:2].isdigit():
            body = body[1:]
        match = _VERSION_RE.match(body)
        if not match:
            raise VersionError(
                "not a version: %r (a version starts with a digit, optionally after 'v' or 'EPOCH:')" % original)
        epoch, body = match.group(1), match.group(2)
        flavour_match = _FLAVOUR_RE.search(body)
        if flavour_match and flavour_match.start() > 0:
            pre = _SEMVER_PRE_RE.match(body)
            if not pre:
                self.flavour = flavour_match.group(0)
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
        self.epoch = int(epoch) if epoch is not None else None
        self.upstream = upstream
        self.revision = revision
        self._has_revision = bool(revision)

    @property
    def normalized(self):
        """The compared form, e.g. ``5.15.0-105`` for ``5.15.0-105-generic`` (tool)."""
        text = self._body()
        return ("%d:%s" % (self.epoch, text)) if self.epoch is not None else text

    def compare(self, other):
        """Return -1, 0 or 1 comparing ``self`` with ``other`` (Version or text), by ``self.scheme``."""
        other = self._same_scheme(other)
        if self.scheme == "rpm":
            result = _rpmvercmp(_bytes(str(self.epoch or 0)), _bytes(str(other.epoch or 0)))
        else:
            left_epoch, right_epoch = self.epoch or 0, other.epoch or 0
            result = 0 if left_epoch == right_epoch else (-1 if left_epoch < right_epoch else 1)
        return result or self._compare_body(other)

    def _same_scheme(self, other):
        if isinstance(other, Version) and other.scheme == self.scheme:
            return other
        return Version(other.original if isinstance(other, Version) else other, self.scheme)

    def _compare_body(self, other):
        """Compare without the epoch."""
        if self.scheme == "rpm":
            return (_rpmvercmp(_bytes(self.upstream), _bytes(other.upstream)) or
                    _rpm_release_cmp(_bytes(self.revision) if self._has_revision else None,
                                     _bytes(other.revision) if other._has_revision else None))
        return (_verrevcmp(_bytes(self.upstream), _bytes(other.upstream)) or
                _verrevcmp(_bytes(self.revision), _bytes(other.revision)))

    def _body(self):
        return self.upstream + ("-" + self.revision if self._has_revision else "")

    def in_series(self, series):
        """True when ``self`` equals ``series`` or lies in it (``1.33.2`` in ``1.33``).

        The epoch must match only when ``series`` names one, so the package
        version ``1:550.127.08-1`` lies in the series ``550.127.08``.
        """
        series = self._same_scheme(series)
        if series.epoch is not None and (self.epoch or 0) != series.epoch:
            return False
        if self._compare_body(series) == 0:
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
        if self.scheme != "tool":
            # dpkg and rpm call many spellings equal ("1.0" = "1.0-0" = "1.00"
            # for dpkg, "1.0" = "1_0" for rpm): hash coarsely.
            return hash((self.scheme, self.epoch or 0))
        # Equal versions ("08" vs "8") must hash alike: hash the token form.
        return hash((self.epoch or 0, tuple(_tokens(self.upstream)), tuple(_tokens(self.revision))))

    def __repr__(self):
        if self.scheme == "tool":
            return "Version(%r)" % self.original
        return "Version(%r, scheme=%r)" % (self.original, self.scheme)

    def __str__(self):
        return self.original


def parse_version(text, scheme="tool"):
    """Parse ``text`` into a :class:`Version` of ``scheme``; raises :class:`VersionError`."""
    return Version(text, scheme)


def is_version(text, scheme="tool"):
    """True when ``text`` reads as a version of ``scheme`` (``tool``: starts with a digit, or ``v`` + digit)."""
    try:
        Version(text, scheme)
    except VersionError:
        return False
    return True


def compare_versions(left, right, scheme="tool"):
    """Compare two versions given as text; returns -1, 0 or 1.

    Without ``scheme`` this uses the ``tool`` rule: dpkg's order after
    dropping a leading ``v``, setting aside a kernel flavour and reading
    SemVer pre-releases as ``~`` and ignoring SemVer build metadata.  That
    rule is wrong for package versions: pass ``scheme="dpkg"`` or
    ``scheme="rpm"`` for versions read from those databases.

    >>> compare_versions("5.15.0-105-generic", "5.15.0-100")
    1
    >>> compare_versions("535.261.03", "535.261.3")
    0
    >>> compare_versions("3.9.1+dfsg-1", "3.9.1-6", scheme="dpkg")
    1
    """
    if scheme == "dpkg":
        return dpkg_compare(left, right)
    if scheme == "rpm":
        return rpm_compare(left, right)
    return Version(left, scheme).compare(Version(right, scheme))


def _normalize_text(value):
    return " ".join(str(value).split())


class Constraint:
    """A parsed constraint; call :meth:`matches` with an actual value.

    ``kind`` is ``exact``, ``comparisons`` or ``regex``; ``text`` is the
    constraint as written (booleans and numbers rendered as text);
    ``comparisons`` is a list of ``(operator, Version)`` for that kind (the
    operand parsed with the ``tool`` rule; :meth:`matches` re-reads it with
    the rule it is given).
    """

    __slots__ = ("text", "kind", "value", "comparisons", "pattern")

    def __init__(self, text, kind, value=None, comparisons=None, pattern=None):
        self.text = text
        self.kind = kind
        self.value = value
        self.comparisons = comparisons or []
        self.pattern = pattern

    def matches(self, actual, scheme="tool"):
        """True when ``actual`` satisfies the constraint; ``None`` never does.

        ``scheme`` is the comparison rule of the fact ``actual`` was read
        from (``dpkg`` or ``rpm`` for package versions, ``tool`` otherwise).
        Raises nothing: an actual that is not a version never satisfies a
        comparison.
        """
        _check_scheme(scheme)
        if actual is None:
            return False
        if self.kind == "regex":
            return self.pattern.search(_actual_text(actual)[:MAX_MATCHED_TEXT]) is not None
        if self.kind == "comparisons":
            try:
                version = Version(actual, scheme)
            except VersionError:
                return False
            for operator, wanted in self.comparisons:
                try:
                    result = version.compare(wanted)
                except VersionError:
                    return False
                if not _OPERATOR_TESTS[operator](result):
                    return False
            return True
        return _exact_matches(self.value, actual, scheme)

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


def _exact_matches(wanted, actual, scheme="tool"):
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return isinstance(wanted, bool) and isinstance(actual, bool) and wanted == actual
    if isinstance(wanted, (int, float)) and isinstance(actual, (int, float)):
        return wanted == actual
    wanted_text = _normalize_text(wanted)
    actual_text = _normalize_text(actual)
    if wanted_text == actual_text:
        return True
    if is_version(wanted_text) and is_version(actual_text, scheme):
        try:
            return Version(actual_text, scheme).in_series(Version(wanted_text, scheme))
        except VersionError:
            return False
    return False


def _looks_like_comparison(part):
    return part.lstrip()[:1] in ("<", ">", "=", "!", "~", "^")


_REPEATS = None


def _repeat_opcodes():
    global _REPEATS  # pylint: disable=global-statement
    if _REPEATS is None:
        _REPEATS = tuple(getattr(_sre_parse, name) for name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
                         if hasattr(_sre_parse, name))
    return _REPEATS


class _TooDeep(FleetError):
    pass


def _repeats(op, arg):
    """True for a quantifier that can repeat more than once (``+``, ``*``, ``{2,}``)."""
    return op in _repeat_opcodes() and arg[1] > 1


def _nested_repeat(parsed, inside=False, depth=0):
    """True when a repetition contains another one (``(a+)+``, ``(a*b*)*``)."""
    if depth > MAX_REGEX_DEPTH:
        raise _TooDeep()
    for op, arg in parsed:
        subs = [arg[2]] if op in _repeat_opcodes() else _subpatterns(arg)
        if _repeats(op, arg):
            if inside:
                return True
            if any(_nested_repeat(sub, True, depth + 1) for sub in subs):
                return True
        elif any(_nested_repeat(sub, inside, depth + 1) for sub in subs):
            return True
    return False


def _subpatterns(arg):
    if isinstance(arg, _sre_parse.SubPattern):
        return [arg]
    if isinstance(arg, (list, tuple)):
        found = []
        for item in arg:
            found.extend(_subpatterns(item))
        return found
    return []


def _compile_regex(value, text, path):
    if len(text) > MAX_REGEX_LENGTH + 2:
        raise ConstraintError(value, "regular expression longer than %d characters" % MAX_REGEX_LENGTH, path)
    try:
        pattern = re.compile(text[1:-1])
        parsed = _sre_parse.parse(text[1:-1])
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        raise ConstraintError(value, "invalid regular expression: %s" % exc, path)
    try:
        nested = _nested_repeat(parsed)
    except _TooDeep:
        raise ConstraintError(value, "regular expression nested more than %d deep" % MAX_REGEX_DEPTH, path)
    if nested:
        raise ConstraintError(value, "nested repetition such as (a+)+ can take exponential time; "
                                     "rewrite the regular expression without a repeated group that repeats", path)
    return pattern


def _check_count(value, path):
    if isinstance(value, bool):
        raise ConstraintError(value, "expected a number of items (e.g. 8, \"8\" or \">=4\"), got a boolean", path)
    if isinstance(value, float):
        raise ConstraintError(value, "expected a whole number, got %r" % value, path)
    if isinstance(value, int) and value < 0:
        raise ConstraintError(value, "expected a number >= 0", path)


def parse_constraint(value, path=None, kind="text"):
    """Parse a constraint given as text, a number or a boolean.

    ``kind`` says what the constraint will be compared with: ``text``
    (anything), ``version`` (an exact value must read as a version:
    ``550.*.*`` is refused) or ``count`` (a whole number >= 0, as a YAML
    integer or text such as ``"8"`` from an AWX survey, or comparisons of
    whole numbers; booleans are refused).

    Returns a :class:`Constraint`.  Raises :class:`ConstraintError` naming
    the string, ``path`` (when given) and the reason, for example::

        bad constraint '=>1.7' at profiles.h100.containerd.version:
        unknown operator '=>'; use one of >= > <= < == !=
    """
    if kind not in CONSTRAINT_KINDS:
        raise ValueError("unknown constraint kind %r" % (kind,))
    if kind == "count":
        _check_count(value, path)
    if isinstance(value, bool):
        if kind == "version":
            raise ConstraintError(value, "expected a version, got a boolean", path)
        return Constraint("true" if value else "false", "exact", value=value)
    if isinstance(value, (int, float)):
        return Constraint(str(value), "exact", value=value)
    if not isinstance(value, str):
        raise ConstraintError(value, "expected a string, number or boolean, got %s" % type(value).__name__, path)
    if len(value) > MAX_CONSTRAINT_LENGTH:
        raise ConstraintError(value, "longer than %d characters" % MAX_CONSTRAINT_LENGTH, path)
    text = value.strip()
    if not text:
        raise ConstraintError(value, "empty constraint", path)
    if text.startswith("/"):
        if len(text) < 2 or not text.endswith("/"):
            raise ConstraintError(value, "a regular expression must be written /pattern/", path)
        return Constraint(text, "regex", pattern=_compile_regex(value, text, path))
    parts = text.split(",")
    if not any(_looks_like_comparison(part) for part in parts):
        _check_exact(value, text, path, kind)
        return Constraint(text, "exact", value=text)
    if len(parts) > MAX_COMPARISONS:
        raise ConstraintError(value, "more than %d comparisons" % MAX_COMPARISONS, path)
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
        if kind == "count" and not _INTEGER_RE.match(operand):
            raise ConstraintError(value, "%r is not a whole number (a count compares with numbers such as >=4)"
                                  % operand, path)
        if "*" in operand:
            raise ConstraintError(value, "%r: wildcards are not supported; use comparisons such as >=550, <551"
                                  % operand, path)
        try:
            comparisons.append((operator, Version(operand)))
        except VersionError:
            raise ConstraintError(value, "%r is not a version (comparisons need versions such as 1.7 or 5.15.0-100)"
                                  % operand, path)
    return Constraint(text, "comparisons", comparisons=comparisons)


def _check_exact(value, text, path, kind):
    if kind == "count":
        if not _INTEGER_RE.match(text):
            raise ConstraintError(value, "expected a whole number (e.g. 8, \"8\" or \">=4\")", path)
        return
    if kind != "version":
        return
    if is_version(text):
        return
    if "*" in text:
        raise ConstraintError(value, "wildcards are not supported; a version matches its series (550 matches "
                                     "550.127.08), or use comparisons such as >=550, <551", path)
    raise ConstraintError(value, "not a version (a version starts with a digit, optionally after 'v' or "
                                 "'EPOCH:', and has only letters, digits and . + ~ ^ _ : -); use /regex/ "
                                 "for patterns", path)


def satisfies(actual, constraint, scheme="tool"):
    """True when ``actual`` satisfies ``constraint`` (text or :class:`Constraint`), compared by ``scheme``."""
    if not isinstance(constraint, Constraint):
        constraint = parse_constraint(constraint)
    return constraint.matches(actual, scheme)
