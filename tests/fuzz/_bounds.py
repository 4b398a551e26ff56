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
