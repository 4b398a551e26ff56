# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one bounded integer parser (module_utils/_common/bounded_int.py): ASCII digits, a digit limit, its own error."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import (
    MAX_DIGITS, IntegerParseError, is_ascii_int, parse_int)
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError


@pytest.mark.parametrize("text,value", [("0", 0), ("42", 42), (" 7\n", 7), ("9" * MAX_DIGITS, int("9" * MAX_DIGITS)),
                                        (5, 5)])
def test_whole_numbers(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize("text,message", [
    ("\u00b2", "is '\u00b2', not a whole number (ASCII digits only)"),  # isdigit() says yes, int() says no
    ("\u0661\u0662", "not a whole number"),  # int() would read 12
    ("9" * 5000, "has 5000 digits, more than 18"),  # int() raises its own ValueError past 4,300 digits
    ("+Inf", "not a whole number"), ("NaN", "not a whole number"), ("1e9", "not a whole number"),
    ("-3", "not a whole number"), ("", "not a whole number"), ("1 2", "not a whole number"),
    (True, "is True, not a whole number"), (None, "is NoneType"), (1.5, "is float"), (10 ** 30, "more than 18 digits"),
])
def test_everything_else_is_its_own_error(text, message):
    with pytest.raises(IntegerParseError) as info:
        parse_int(text, "the count")
    assert str(info.value).startswith("the count ") and message in str(info.value)
    assert isinstance(info.value, FleetError) and isinstance(info.value, ValueError)


def test_limits_sign_and_range():
    assert parse_int("-3", signed=True) == -3 and parse_int("+3", signed=True) == 3
    assert parse_int("123", max_digits=3) == 123
    with pytest.raises(IntegerParseError, match="more than 2"):
        parse_int("123", max_digits=2)
    with pytest.raises(IntegerParseError, match="is 9, outside 0..8"):
        parse_int("9", low=0, high=8)


def test_the_predicate_agrees():
    assert is_ascii_int("12") and not is_ascii_int("\u00b2") and not is_ascii_int("") and not is_ascii_int(" 1")
    assert not is_ascii_int("12345", max_digits=4) and not is_ascii_int(12)
