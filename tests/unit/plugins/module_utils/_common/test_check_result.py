# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_common/check_result.py: the one shape of a check module's result."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result as cr


def test_a_result_has_status_reasons_and_the_extras():
    assert cr.result(cr.PASS, None, passed=True) == {"status": "pass", "reasons": [], "passed": True}
    assert cr.result(cr.FAIL, "one line") == {"status": "fail", "reasons": ["one line"]}


def test_reasons_are_one_line_texts_without_empty_ones():
    assert cr.result(cr.FAIL, ["a\n  b", "", None, 7])["reasons"] == ["a b", "7"]


def test_a_failure_skip_or_error_without_a_reason_still_says_something():
    for status in (cr.FAIL, cr.SKIP, cr.ERROR):
        assert "without a reason" in cr.result(status, [])["reasons"][0]


def test_bounded():
    out = cr.result(cr.FAIL, ["x" * 10000] * (cr.MAX_REASONS + 5))
    assert len(out["reasons"]) == cr.MAX_REASONS and out["reasons"][-1] == "... and 6 more"
    assert len(out["reasons"][0]) == cr.MAX_REASON_CHARS


@pytest.mark.parametrize("bad,why", [
    ({"reasons": []}, "no 'status'"),
    ({"status": "pass"}, "no 'reasons'"),
    ({"status": "passed", "reasons": []}, "not one of pass, fail, skip, error"),
    ({"status": "fail", "reasons": []}, "needs at least one reason"),
    ({"status": "pass", "reasons": "text"}, "not a list of texts"),
    ({"status": "pass", "reasons": [1]}, "not a list of texts"),
    ([], "a mapping"),
])
def test_check_names_what_breaks_the_contract(bad, why):
    with pytest.raises(cr.CheckResultError, match=why):
        cr.check(bad)


def test_status_of():
    assert cr.status_of(True) == "pass" and cr.status_of(False) == "fail"
    assert cr.status_of(True, skipped=True) == "skip" and cr.status_of(True, skipped=True, error=True) == "error"
