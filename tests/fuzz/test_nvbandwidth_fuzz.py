# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests of the nvbandwidth parsers and verdict (module_utils/gpu/nvbandwidth.py), hypothesis.

* any text, matrix-shaped lines or JSON under the ``nvbandwidth`` key: parse raises nothing but
  NvbandwidthParseError, and judge never passes a testcase without a full matrix whose every pair reaches the floor;
* cutting a real output anywhere never turns it into a pass with fewer pairs;
* the parser's effort stays linear in the input size (lines executed, not time).
"""
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _bounds import assert_effort_within, effort
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvbandwidth as nvb

#: The entry points this file fuzzes (tests/fuzz/test_fuzz_targets.py).
FUZZ_TARGETS = ("gpu_bandwidth",)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "nvbandwidth")
PROFILE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
READ = ["device_to_device_memcpy_read_ce"]
THRESHOLD = nvb.threshold_for("NVIDIA H100 80GB HBM3")[0]
LINES = ["Running device_to_device_memcpy_read_ce.", "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
         "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", "          0         1", "0       N/A    370.90",
         "1    370.90       N/A", "1    100.00       N/A", "Waived: ", "Device 0: NVIDIA H100 80GB HBM3",
         "Device 1: NVIDIA H100 80GB HBM3", "ERROR: Testcase x not found!", "Error: oops", "SUM x 1.0", "",
         "nvbandwidth Version: v0.8", "ASSERT in expression", "0 1 2", "2    1.0    2.0    3.0"]


def _fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read().split("# ---- BEGIN VERBATIM ----\n", 1)[1]


def _check(text):
    try:
        parsed = nvb.name_waived(nvb.parse(text), READ)
    except nvb.NvbandwidthParseError:
        return None
    result = nvb.judge(parsed, READ, THRESHOLD)
    if result["passed"]:
        pairs = [pair for pair in result["pairs"] if pair["testcase"] == READ[0]]
        count = result["testcases"][0]["pairs"]
        assert count >= 2 and len(pairs) == count
        assert all(pair["gbps"] is not None and pair["gbps"] >= THRESHOLD["min_gbps"] for pair in pairs)
    return result


@PROFILE
@given(st.one_of(st.text(max_size=3000),
                 st.lists(st.sampled_from(LINES) | st.text(max_size=12), max_size=200).map("\n".join)))
def test_text_parser_raises_only_its_own_error_and_never_passes_wrongly(text):
    _check(text)


@PROFILE
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=10),
                    lambda children: st.lists(children, max_size=5) | st.dictionaries(
                        st.sampled_from(["testcases", "name", "status", "bandwidth_matrix", "bandwidth_description",
                                         "GPU Device list", "version", "error", "x"]), children, max_size=5),
                    max_leaves=60))
def test_any_json_document_under_the_nvbandwidth_key(body):
    _check(json.dumps({"nvbandwidth": body}))


@PROFILE
@given(st.integers(min_value=0, max_value=2000))
def test_a_cut_output_never_passes_with_fewer_pairs(cut):
    text = _fixture("h100x8_v0.4_d2d_read_ce.txt")
    result = _check(text[:cut])
    if result is not None and result["passed"]:
        assert result["testcases"][0]["pairs"] == 56


@PROFILE
@given(st.lists(st.sampled_from(LINES), min_size=1, max_size=400))
def test_effort_is_linear_in_the_input(lines):
    text = "\n".join(lines)
    measured = effort(nvb.parse, text)
    assert_effort_within(measured, len(text), per_unit=12, base=400, what="nvbandwidth.parse")
