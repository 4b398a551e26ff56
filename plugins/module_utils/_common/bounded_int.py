# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""The one parser of whole numbers in text that a tool printed or a user passed.

``str.isdigit()`` accepts digits that ``int()`` refuses (``"²"``), ``int()``
accepts digits from every script (``"١٢"``) and, since Python 3.11, refuses
more than 4,300 digits with a ValueError deep inside a parser. Every parser of
the collection turns text into an ``int`` here instead: ASCII digits only, at
most ``max_digits`` of them, an optional range, and one error class
(:class:`IntegerParseError`, a :class:`FleetError` and a ``ValueError``) whose
message names what was read.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

#: No count, index or Unix time the collection reads needs more digits (10**18 seconds is 3 * 10**10 years).
MAX_DIGITS = 18
_DIGITS = frozenset("0123456789")
_SPACE = " \t\r\n"


class IntegerParseError(FleetError, ValueError):
    """Text that is not a bounded whole number."""


def _shown(text):
    text = str(text)
    return repr(text if len(text) <= 40 else text[:40] + "...")


def is_ascii_int(text, max_digits=MAX_DIGITS):
    """True when ``text`` is 1 to ``max_digits`` ASCII digits (no sign, no spaces)."""
    return isinstance(text, str) and 0 < len(text) <= max_digits and all(char in _DIGITS for char in text)


def parse_int(text, what="the value", max_digits=MAX_DIGITS, low=None, high=None, signed=False):
    """``text`` (ASCII digits, surrounding whitespace allowed, a sign when ``signed``) as an ``int``.

    Raises :class:`IntegerParseError` ("<what> is '...', not a whole number ...")
    when it is not one, has more than ``max_digits`` digits, or lies outside
    ``low``..``high``. Booleans are refused; an ``int`` is range-checked as is.
    """
    if isinstance(text, bool):
        raise IntegerParseError("%s is %r, not a whole number" % (what, text))
    if isinstance(text, int):
        value = text
        if abs(value) >= 10 ** max_digits:
            raise IntegerParseError("%s has more than %d digits" % (what, max_digits))
    else:
        if not isinstance(text, str):
            raise IntegerParseError("%s is %s, not a whole number" % (what, type(text).__name__))
        digits = text.strip(_SPACE)
        negative = False
        if signed and digits[:1] in ("-", "+"):
            negative = digits[0] == "-"
            digits = digits[1:]
        if not digits or not all(char in _DIGITS for char in digits):
            raise IntegerParseError("%s is %s, not a whole number (ASCII digits %s)" % (
                what, _shown(text), "with an optional sign" if signed else "only"))
        if len(digits) > max_digits:
            raise IntegerParseError("%s has %d digits, more than %d" % (what, len(digits), max_digits))
        value = int(digits)
        if negative:
            value = -value
    if low is not None and value < low or high is not None and value > high:
        raise IntegerParseError("%s is %d, outside %s..%s" % (
            what, value, "" if low is None else low, "" if high is None else high))
    return value
