# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Module-level regular expressions compiled on first use.

``re.compile`` costs 20-400 us per pattern, and a parser module holds dozens
of patterns of which one call uses a few (the readiness agent, run every
minute, used 19 of the 45 patterns its parsers compiled at import).
:func:`lazy_compile` takes the same arguments and returns an object with the
methods of a compiled pattern; the pattern is compiled by ``re`` the first
time one of them is called, so a pattern that is never used costs nothing,
and a wrong pattern still fails on first use the way ``re.compile`` does.
Patterns stay literal in the module that uses them (one place, as before).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


class LazyPattern(object):
    """``re.compile(pattern, flags)``, done on the first call of a pattern method.

    The first call of a method also stores the compiled pattern's own (C) method on the instance, where it shadows
    the class's: every later call goes straight to ``re``, with no Python frame of this class in between (the
    readiness agent makes a few thousand matches a run)."""

    __slots__ = ("_source", "_flags", "_compiled", "match", "fullmatch", "search", "finditer", "findall", "sub",
                 "subn", "split")

    def __init__(self, pattern, flags=0):
        self._source = pattern
        self._flags = flags
        self._compiled = None

    def compiled(self):
        """The compiled ``re.Pattern`` (compiled now if it was not yet)."""
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        return self._compiled

    def _bound(self, name):
        """The compiled pattern's method ``name``, kept on this instance from now on."""
        method = getattr(self.compiled(), name)
        setattr(self, name, method)
        return method

    def __getattr__(self, name):
        # only for an attribute not found the usual way: a pattern method not called yet
        if name in _METHODS:
            return _FirstCall(self, name)
        raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))

    @property
    def pattern(self):
        return self._source

    @property
    def flags(self):
        return self.compiled().flags

    @property
    def groups(self):
        return self.compiled().groups

    @property
    def groupindex(self):
        return self.compiled().groupindex

    def __repr__(self):
        return "lazy_compile(%r%s)" % (self._source, ", %r" % self._flags if self._flags else "")


_METHODS = frozenset(("match", "fullmatch", "search", "finditer", "findall", "sub", "subn", "split"))


class _FirstCall(object):
    """``pattern.method`` before the pattern is compiled: calling it compiles the pattern (a wrong one raises
    ``re.error`` here, as ``re.compile`` would) and calls the compiled method."""

    __slots__ = ("_lazy", "_name")

    def __init__(self, lazy, name):
        self._lazy = lazy
        self._name = name

    def __call__(self, *args, **kwargs):
        return self._lazy._bound(self._name)(*args, **kwargs)  # pylint: disable=protected-access


def lazy_compile(pattern, flags=0):
    """Like ``re.compile(pattern, flags)``, compiled on first use."""
    return LazyPattern(pattern, flags)
