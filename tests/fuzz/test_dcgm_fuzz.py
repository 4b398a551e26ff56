# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests of the dcgmi diag parsers (module_utils/gpu/dcgm.py), hypothesis.

* any text, JSON-shaped fragments or table-shaped rows: parse_json and parse_table raise nothing but
  DcgmParseError, and summarise never passes a run without a pass or skip result;
* the real captures (tests/fixtures/dcgm/) keep their verdict whatever surrounds them.

Inputs are bounded (max_size); no test measures time.
"""
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import dcgm

#: The entry points this file fuzzes (tests/fuzz/test_fuzz_targets.py).
FUZZ_TARGETS = ("dcgm_diag",)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "dcgm")
PROFILE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON_FRAGMENTS = ['{', '}', '[', ']', ',', ':', '"DCGM Diagnostic"', '"DCGM GPU Diagnostic"', '"test_categories"',
                  '"tests"', '"results"', '"status"', '"Pass"', '"FAIL"', '"Skip"', '"warnings"', 'null', '"gpu_ids"',
                  '"0,1"', '"entity_id"', '3', '"runtime_error"', '"version"', '"name"', '"category"']
TABLE_FRAGMENTS = ["|", "+----+", "|-----  Hardware  ----|", "| Diagnostic | Result |", "Pass", "Fail - GPU: 0",
                   "GPU0: Pass", "| Warning |", "| Error |", "| DCGM Version | 4.2.3 |", "\n", "   "]


def _fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read().split("# ---- BEGIN VERBATIM ----\n", 1)[1]


def _judge(parser, text):
    try:
        parsed = parser(text)
    except dcgm.DcgmParseError:
        return None
    summary = dcgm.summarise(parsed)
    statuses = [r["status"] for t in parsed["tests"] for r in t["results"]]
    if summary["passed"]:
        assert statuses and all(s in (dcgm.PASS, dcgm.SKIP, dcgm.WARN, dcgm.NOT_RUN) for s in statuses)
        assert not parsed.get("runtime_error")
    return summary


@PROFILE
@given(st.one_of(st.text(max_size=3000),
                 st.lists(st.sampled_from(JSON_FRAGMENTS) | st.text(max_size=8), max_size=300).map("".join)))
def test_json_parser_raises_only_its_own_error(text):
    _judge(dcgm.parse_json, text)


@PROFILE
@given(st.one_of(st.text(max_size=3000),
                 st.lists(st.sampled_from(TABLE_FRAGMENTS) | st.text(max_size=8), max_size=300).map("".join)))
def test_table_parser_raises_only_its_own_error(text):
    _judge(dcgm.parse_table, text)


@PROFILE
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(
                        st.sampled_from(["status", "gpu_ids", "gpu_id", "warnings", "tests", "results", "name",
                                         "category", "test_categories", "entity_id", "x"]), children, max_size=5),
                    max_leaves=40))
def test_any_json_document_under_the_diagnostic_key(body):
    _judge(dcgm.parse_json, json.dumps({"DCGM Diagnostic": body}))


@PROFILE
@given(st.text(max_size=200), st.text(max_size=200))
def test_real_captures_keep_their_verdict_whatever_surrounds_them(before, after):
    before = before.replace("{", "")
    summary = dcgm.summarise(dcgm.parse_json(before + _fixture("json_nvvs13_mixed.json") + "\n" + after))
    assert summary["passed"] is False
    assert sorted(f["gpu"] for f in summary["failures"]) == [0, 1, 2, 3]
