"""Effort bounds for fuzz tests, without wall-clock timing.

``effort(fn, *args)`` runs ``fn`` and counts the Python lines it executes
(``sys.settrace``), a deterministic measure of work: the same input always
costs the same, whatever the machine's load.  ``assert_effort_within``
checks that count against ``base + per_unit * size``, a generous linear
bound, so a quadratic or exponential path shows up as a failure on inputs
of a few hundred characters instead of as a hang in production.
"""
import sys


class Effort:
    __slots__ = ("lines", "result", "error")

    def __init__(self):
        self.lines = 0
        self.result = None
        self.error = None


def effort(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)``; return an :class:`Effort` (``lines``, ``result``, ``error``)."""
    measured = Effort()

    def tracer(frame, event, arg):
        if event == "line":
            measured.lines += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        measured.result = fn(*args, **kwargs)
    except Exception as exc:  # pylint: disable=broad-except
        measured.error = exc
    finally:
        sys.settrace(previous)
    return measured


def assert_effort_within(measured, size, per_unit, base, what=""):
    """Fail when ``measured.lines`` exceeds ``base + per_unit * size``."""
    bound = base + per_unit * size
    assert measured.lines <= bound, "%s: %d lines executed for input size %d (bound %d = %d + %d x size)" % (
        what or "effort", measured.lines, size, bound, base, per_unit)


def size_of(value, _depth=0):
    """Rough size of nested data: characters of text plus one per node."""
    if _depth > 50:
        return 1
    if isinstance(value, dict):
        return 1 + sum(size_of(k, _depth + 1) + size_of(v, _depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 1 + sum(size_of(v, _depth + 1) for v in value)
    if isinstance(value, str):
        return 1 + len(value)
    return 1


class PatternMeter(object):
    """Stands in for a compiled pattern and records the longest text it was handed.

    A regular expression that can backtrack (``(.+?)(optional)?\\s*$``) costs up to the square of its subject's
    length inside ``re``, where :func:`effort` sees no Python line. Its effort bound is the length of the longest
    subject: with every subject at most ``n`` characters, a match costs at most about ``n * n`` steps, whatever the
    rest of the input holds.
    """

    def __init__(self, pattern):
        self.pattern = pattern
        self.longest = 0
        self.calls = 0

    def _measure(self, method):
        def measured(subject, *args, **kwargs):
            self.calls += 1
            self.longest = max(self.longest, len(subject))
            return getattr(self.pattern, method)(subject, *args, **kwargs)
        return measured

    def __getattr__(self, name):
        if name in ("match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"):
            return self._measure(name)
        return getattr(self.pattern, name)


def meter_patterns(monkeypatch, module, *names):
    """Replace ``module.<name>`` patterns with :class:`PatternMeter` s (undone by ``monkeypatch``); returns them."""
    meters = {}
    for name in names:
        meters[name] = PatternMeter(getattr(module, name))
        monkeypatch.setattr(module, name, meters[name])
    return meters
