# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/gpu/nvbandwidth.py: the real outputs, the per-model thresholds, and every way an output is refused."""
import os

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvbandwidth as nvb

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "nvbandwidth")
READ = ["device_to_device_memcpy_read_ce"]


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read().split("# ---- BEGIN VERBATIM ----\n", 1)[1]


def verdict(name, testcases=None, product=None, overrides=None, required=False):
    testcases = testcases or READ
    parsed = nvb.name_waived(nvb.parse(fixture(name)), testcases)
    chosen, why = nvb.product_of(parsed, product)
    threshold, no_threshold = nvb.threshold_for(chosen, overrides) if chosen else (None, why)
    return nvb.judge(parsed, testcases, threshold, no_threshold, required=required), threshold


# ---- parsing the real outputs -------------------------------------------------------------------------------------
def test_h100_v04_text_is_read_with_its_devices_and_matrix():
    parsed = nvb.parse(fixture("h100x8_v0.4_d2d_read_ce.txt"))
    assert parsed["version"] == "v0.4" and parsed["format"] == "text"
    assert [d["name"] for d in parsed["devices"]] == ["NVIDIA H100 80GB HBM3"] * 8
    assert parsed["devices"][0]["bus_id"] is None
    case = parsed["testcases"][0]
    assert case["name"] == "device_to_device_memcpy_read_ce" and case["status"] == "ran"
    matrix = case["matrices"][0]
    assert matrix["description"] == "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"
    assert matrix["rows"][0][0] is None and matrix["rows"][2][4] == 372.96 and len(matrix["rows"]) == 8


def test_device_lines_with_bus_ids_v07():
    parsed = nvb.parse(fixture("a100x8_v0.7_verification_assert.txt"))
    assert parsed["devices"][4] == {"index": 4, "name": "NVIDIA A100-SXM4-80GB", "bus_id": "00000000:9b:00"}
    assert parsed["testcases"][0]["status"] == "error"
    assert parsed["errors"][0].startswith("ASSERT in expression h_errorFlag == 0")


def test_waived_lines_get_the_requested_names_in_order():
    parsed = nvb.parse(fixture("gh200x1_v0.6_waived.txt"))
    assert sum(1 for t in parsed["testcases"] if t["status"] == "waived") == 17
    single = nvb.name_waived(nvb.parse("Device 0: NVIDIA H200 (00000000:18:00)\nWaived: \nWaived: \n"),
                             ["device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce"])
    assert [t["name"] for t in single["testcases"]] == ["device_to_device_memcpy_read_ce",
                                                        "device_to_device_memcpy_write_ce"]


def test_json_output_reads_like_the_text():
    text_view = nvb.parse(fixture("h100x8_v0.4_d2d_read_ce.txt"))
    json_view = nvb.parse(fixture("constructed_h100x8_v0.8_d2d_read_ce.json.txt"))
    assert json_view["format"] == "json" and json_view["version"] == "v0.8"
    assert json_view["devices"][1]["name"] == "NVIDIA H100 80GB HBM3" and json_view["devices"][1]["bus_id"]
    assert json_view["testcases"][0]["matrices"][0]["rows"] == text_view["testcases"][0]["matrices"][0]["rows"]


def test_v010_coefficient_of_variation_lines_are_skipped():
    text = ("Running device_to_device_memcpy_read_ce.\nmemcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)\n"
            "          0         1\n0       N/A    276.07\n1    276.19       N/A\n\n"
            "SUM device_to_device_memcpy_read_ce 552.26\nCOEFFICIENT_OF_VARIATION device_to_device_memcpy_read_ce 0.01\n")
    parsed = nvb.parse(text)
    assert parsed["testcases"][0]["matrices"][0]["rows"] == [[None, 276.07], [276.19, None]]


# ---- hostile and broken outputs -----------------------------------------------------------------------------------
HEAD = "Running device_to_device_memcpy_read_ce.\nmemcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n"


@pytest.mark.parametrize("text,message", [
    ("", "the output is empty"),
    ("   \n", "the output is empty"),
    (HEAD + "          0         1         2\n0       N/A    370.90\n", "row 0 has 2 cells, the header has 3 columns"),
    (HEAD + "          0         1\n0       N/A    fast\n", "row 0 column 1 is 'fast', not a bandwidth"),
    (HEAD + "          0         1\n0       N/A    -3.0\n", "outside 0-100000 GB/s"),
    (HEAD + "          0         1\n0       N/A    nan\n", "outside 0-100000 GB/s"),
    (HEAD + "          0         1\n1    370.9       N/A\n", "row 1 comes where row 0 should"),
    (HEAD + "0 2 5\n", "the column header (line 3) is not 0..2"),
    (HEAD + "garbage here\n", "line 3 should be the column header"),
    (HEAD, "the output ends after the matrix description"),
    ("x\x00y", "NUL bytes"),
    ("{", "the output is not JSON"),
    ('{"other": 1}', "no 'nvbandwidth' object"),
    ("{" + '"a":' * 0 + '"nvbandwidth": ' + "[" * 40 + "]" * 40 + "}", "nested deeper than 32 levels"),
    ('{"nvbandwidth": {"testcases": [{"name": "x", "status": "Passed", "bandwidth_matrix": [["1"], ["1", "2"]]}]}}',
     "row 1 has 2 cells, row 0 has 1"),
    ('{"nvbandwidth": {"GPU Device list": ["zero: GPU"]}}', "is not '<index>: <name> (<bus id>)'"),
    ('{"nvbandwidth": {"testcases": "many"}}', "'testcases' is not a list"),
])
def test_unreadable_outputs_are_refused_with_the_cause(text, message):
    with pytest.raises(nvb.NvbandwidthParseError) as raised:
        nvb.parse(text)
    assert message in str(raised.value)


def test_garbage_text_yields_no_result_and_never_passes():
    parsed = nvb.name_waived(nvb.parse("[" * 40 + "]" * 40 + "\nSegmentation fault\n"), READ)
    assert parsed["testcases"] == []
    result = nvb.judge(parsed, READ, nvb.threshold_for("NVIDIA H200")[0])
    assert result["status"] == "fail" and result["reasons"] == [
        "device_to_device_memcpy_read_ce printed no result (output cut?)"]


def test_oversized_output_is_refused_before_parsing():
    with pytest.raises(nvb.NvbandwidthParseError, match="larger than 4 MiB"):
        nvb.parse("Running x.\n" * (nvb.MAX_INPUT_CHARS // 10))


def test_too_many_gpus_is_refused():
    header = " ".join(str(i) for i in range(nvb.MAX_GPUS + 1))
    with pytest.raises(nvb.NvbandwidthParseError, match="more than 576 columns"):
        nvb.parse(HEAD + header + "\n")


# ---- thresholds ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("product,total,floor", [
    ("NVIDIA H100 80GB HBM3", 900.0, 315.0),
    ("NVIDIA H200", 900.0, 315.0),
    ("NVIDIA A100-SXM4-80GB", 600.0, 210.0),
    ("NVIDIA A100-SXM4-40GB", 600.0, 210.0),
    ("NVIDIA B200", 1800.0, 630.0),
])
def test_catalog_threshold_is_70_percent_of_the_per_direction_peak(product, total, floor):
    threshold, why = nvb.threshold_for(product)
    assert why is None
    assert threshold["total_gbps"] == total and threshold["peak_gbps_per_direction"] == total / 2
    assert threshold["min_gbps"] == floor and threshold["fraction"] == 0.7
    assert threshold["source"] and "NVIDIA" in threshold["source"]
    assert "policy, not an NVIDIA figure" in threshold["policy"] and threshold["origin"] == "catalog"


def test_unknown_model_has_no_threshold_and_says_how_to_add_one():
    threshold, why = nvb.threshold_for("NVIDIA H100 PCIe")
    assert threshold is None
    assert why.startswith("no threshold for NVIDIA H100 PCIe: the catalog covers NVIDIA A100-SXM4-40GB")
    assert "Fix: set thresholds['NVIDIA H100 PCIe']" in why


def test_overrides_change_the_floor_or_add_a_model():
    overrides = nvb.validate_overrides({"NVIDIA H100 80GB HBM3": {"fraction": 0.8},
                                        "NVIDIA H800": {"total_gbps": 400, "source": "datasheet"},
                                        "NVIDIA L40S": {"min_gbps": "20"}})
    h100, _why = nvb.threshold_for("NVIDIA H100 80GB HBM3", overrides)
    assert h100["min_gbps"] == 360.0 and h100["origin"] == "catalog+override"
    h800, _why = nvb.threshold_for("NVIDIA H800", overrides)
    assert h800["min_gbps"] == 140.0 and h800["source"] == "datasheet" and h800["origin"] == "override"
    l40s, _why = nvb.threshold_for("NVIDIA L40S", overrides)
    assert l40s["min_gbps"] == 20.0 and l40s["fraction"] is None and "20.0 GB/s" in l40s["policy"]


@pytest.mark.parametrize("overrides,message", [
    ({"NVIDIA H200": {"fracton": 0.8}}, "thresholds['NVIDIA H200'].fracton is not a known setting"),
    ({"NVIDIA H200": {"fraction": 1.5}}, "thresholds['NVIDIA H200'].fraction is 1.5"),
    ({"NVIDIA H200": {"fraction": 0}}, "thresholds['NVIDIA H200'].fraction is 0.0"),
    ({"NVIDIA H200": {"min_gbps": True}}, "thresholds['NVIDIA H200'].min_gbps is True, not a number"),
    ({"NVIDIA H200": {"min_gbps": "fast"}}, "min_gbps is 'fast', not a number"),
    ({"NVIDIA H200": {"min_gbps": 300, "fraction": 0.5}}, "sets both min_gbps and fraction"),
    ({"NVIDIA H200": {"source": "x"}}, "sets none of min_gbps, fraction, total_gbps"),
    ({"NVIDIA H800": {"fraction": 0.5}}, "NVIDIA H800 is not in the catalog. Fix: add total_gbps"),
    ({"NVIDIA H200": 300}, "thresholds['NVIDIA H200'] must be a mapping"),
    (["NVIDIA H200"], "thresholds must map GPU product names to settings, not list"),
])
def test_bad_overrides_are_refused_naming_their_path(overrides, message):
    with pytest.raises(nvb.ThresholdError) as raised:
        nvb.validate_overrides(overrides)
    assert message in str(raised.value)


# ---- verdicts -----------------------------------------------------------------------------------------------------
def test_healthy_h100_passes_with_its_slowest_pair():
    result, threshold = verdict("h100x8_v0.4_d2d_read_ce.txt")
    assert result["status"] == "pass" and result["passed"] is True and result["reasons"] == []
    assert threshold["min_gbps"] == 315.0 and len(result["pairs"]) == 56
    assert result["worst"] == {"testcase": READ[0], "from_gpu": 0, "to_gpu": 6, "gbps": 370.26}
    assert result["testcases"][0]["min_gbps"] == 370.26 and result["testcases"][0]["failed_pairs"] == 0


def test_low_pair_fails_naming_the_pair_and_the_threshold():
    result, _why = verdict("derived_h100x8_gpu1_to_gpu0_low.txt")
    assert result["status"] == "fail"
    assert result["reasons"] == ["device_to_device_memcpy_read_ce GPU 1 -> GPU 0: 162.45 GB/s, below 315.00 GB/s "
                                 "(70% of 450 GB/s per direction, NVIDIA H100 80GB HBM3)"]
    assert result["worst"]["gbps"] == 162.45


def test_the_write_matrix_arrow_points_from_column_to_row():
    result, _why = verdict("readme_v0.8_d2d_write_ce_8gpu.txt", testcases=["device_to_device_memcpy_write_ce"],
                           product="NVIDIA A100-SXM4-80GB")
    assert result["status"] == "pass"
    # row 6, column 0 (274.89) of "GPU(row) <- GPU(column)" is GPU 0 -> GPU 6; the 0.00 diagonal is ignored.
    assert result["worst"] == {"testcase": "device_to_device_memcpy_write_ce", "from_gpu": 0, "to_gpu": 6,
                               "gbps": 274.89}
    strict, _why = verdict("readme_v0.8_d2d_write_ce_8gpu.txt", testcases=["device_to_device_memcpy_write_ce"],
                           product="NVIDIA A100-SXM4-80GB",
                           overrides={"NVIDIA A100-SXM4-80GB": {"min_gbps": 275.0}})
    assert strict["status"] == "fail"
    assert strict["reasons"][0] == ("device_to_device_memcpy_write_ce GPU 0 -> GPU 6: 274.89 GB/s, below 275.00 GB/s "
                                    "(92% of 300 GB/s per direction, NVIDIA A100-SXM4-80GB)")


def test_a_pair_without_peer_access_fails():
    result, _why = verdict("derived_h100x8_gpu3_gpu5_no_peer.txt")
    assert result["status"] == "fail"
    assert result["reasons"] == ["device_to_device_memcpy_read_ce GPU 3 -> GPU 5: not measured (N/A: no peer access "
                                 "between them)"]
    assert result["worst"] == {"testcase": READ[0], "from_gpu": 3, "to_gpu": 5, "gbps": None}


def test_many_low_pairs_are_counted_not_all_listed():
    text = fixture("h100x8_v0.4_d2d_read_ce.txt").replace("370.90", "100.00")
    parsed = nvb.name_waived(nvb.parse(text), READ)
    threshold, _why = nvb.threshold_for("NVIDIA H100 80GB HBM3")
    result = nvb.judge(parsed, READ, threshold)
    assert len(result["reasons"]) == nvb.MAX_PAIR_REASONS + 1
    assert result["reasons"][-1].endswith("more pairs below the threshold or not measured")


def test_unknown_model_skips_or_fails_when_required():
    # The reporter cut the "Running ..." line: the matrix belongs to no testcase (judged with a known model).
    result, threshold = verdict("a6000x6_v0.8_d2d_read_ce.txt", product="NVIDIA H200")
    assert result["status"] == "fail" and result["reasons"][0] == ("device_to_device_memcpy_read_ce printed no "
                                                                   "result (output cut?)")
    text = HEAD + fixture("a6000x6_v0.8_d2d_read_ce.txt").split("...\n\n", 1)[1].split("\n", 1)[1]
    parsed = nvb.name_waived(nvb.parse(text), READ)
    why = nvb.threshold_for("NVIDIA RTX A6000")[1]
    skipped = nvb.judge(parsed, READ, None, why)
    assert skipped["status"] == "skip" and skipped["reasons"] == [why]
    assert skipped["worst"]["gbps"] == 21.8 and all(pair["passed"] is None for pair in skipped["pairs"])
    required = nvb.judge(parsed, READ, None, why, required=True)
    assert required["status"] == "fail" and required["reasons"] == [why + " (the bandwidth check is required)"]


def test_mixed_models_or_no_device_list_give_no_product():
    parsed = nvb.parse("Device 0: NVIDIA H200\nDevice 1: NVIDIA H100 80GB HBM3\n")
    assert nvb.product_of(parsed) == (None, "the GPUs are of different models (NVIDIA H100 80GB HBM3, NVIDIA H200)")
    assert nvb.product_of(nvb.parse("nvbandwidth Version: v0.8\n")) == (
        None, "the output lists no GPUs and no product was given")
    assert nvb.product_of(parsed, "NVIDIA H200") == ("NVIDIA H200", None)


def test_waived_on_one_gpu_is_a_skip_on_many_a_failure():
    one = nvb.name_waived(nvb.parse("Device 0: NVIDIA H200 (00000000:18:00)\nWaived: \n"), READ)
    threshold, _why = nvb.threshold_for("NVIDIA H200")
    result = nvb.judge(one, READ, threshold)
    assert result["status"] == "skip"
    assert result["reasons"] == ["device_to_device_memcpy_read_ce was waived: the node has one GPU, no pair to measure"]
    two = nvb.name_waived(nvb.parse("Device 0: NVIDIA H200\nDevice 1: NVIDIA H200\nWaived: \n"), READ)
    result = nvb.judge(two, READ, threshold)
    assert result["status"] == "fail"
    assert "no GPU pair has peer access (P2P/NVLink unavailable)" in result["reasons"][0]


def test_unknown_testcase_and_errors_never_pass():
    threshold, _why = nvb.threshold_for("NVIDIA H200")
    parsed = nvb.name_waived(nvb.parse("ERROR: Testcase device_to_device_memcpy_read_ce not found!\n"), READ)
    result = nvb.judge(parsed, READ, threshold)
    assert result["status"] == "fail" and "this nvbandwidth has no such testcase" in result["reasons"][0]
    parsed = nvb.parse(fixture("a100x8_v0.7_verification_assert.txt"))
    result = nvb.judge(parsed, READ, nvb.threshold_for("NVIDIA A100-SXM4-80GB")[0])
    assert result["status"] == "fail" and "did not finish: ASSERT in expression h_errorFlag == 0" in result["reasons"][0]


def test_matrix_size_must_match_the_devices():
    text = "Device 0: NVIDIA H200\nDevice 1: NVIDIA H200\nDevice 2: NVIDIA H200\n" + HEAD + \
        "          0         1\n0       N/A    400.0\n1    400.0       N/A\n"
    parsed = nvb.name_waived(nvb.parse(text), READ)
    result = nvb.judge(parsed, READ, nvb.threshold_for("NVIDIA H200")[0])
    assert result["status"] == "fail" and "the matrix covers 2 GPUs, the output lists 3" in result["reasons"][0]


def test_missing_rows_are_a_cut_matrix():
    text = HEAD + "          0         1         2\n0       N/A    400.0    400.0\n"
    parsed = nvb.name_waived(nvb.parse(text), READ)
    result = nvb.judge(parsed, READ, nvb.threshold_for("NVIDIA H200")[0])
    assert result["status"] == "fail" and "the matrix has 1 rows for 3 columns (output cut?)" in result["reasons"][0]


def test_v010_real_output_has_no_device_lines_and_its_sum_and_cv_are_read():
    """Real nvbandwidth v0.10.0 output (8x H100): no Device lines, "13.2 (13020)" versions, a CV line."""
    parsed = nvb.parse(fixture("h100x8_v0.10.0_d2d_read_write_ce.txt"))
    assert parsed["version"] == "v0.10.0" and parsed["devices"] == [] and parsed["errors"] == []
    (case,) = parsed["testcases"]
    assert case["name"] == "device_to_device_memcpy_read_ce" and case["status"] == "ran"
    assert case["sum_gbps"] == 22126.64 and case["coefficient_of_variation"] == 0.0
    rows = case["matrices"][0]["rows"]
    assert len(rows) == 8 and rows[0][0] is None and rows[7][0] == 395.05
    assert nvb.product_of(parsed) == (None, "the output lists no GPUs and no product was given")
    verdict = nvb.judge(parsed, ["device_to_device_memcpy_read_ce"], nvb.threshold_for("NVIDIA H100 80GB HBM3")[0],
                        gpu_count=8)
    assert verdict["status"] == "pass" and verdict["gpu_count"] == 8


def test_a_garbage_coefficient_of_variation_is_none_never_an_error():
    text = HEAD + "          0         1\n0       N/A    276.07\n1    276.19       N/A\n" \
        "SUM device_to_device_memcpy_read_ce lots\nCOEFFICIENT_OF_VARIATION device_to_device_memcpy_read_ce nan\n"
    case = nvb.parse(text)["testcases"][0]
    assert case["sum_gbps"] is None and case["coefficient_of_variation"] is None
    assert case["matrices"][0]["rows"] == [[None, 276.07], [276.19, None]]
