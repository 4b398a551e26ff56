"""dcgmi diag parsing on real captures (tests/fixtures/dcgm/, from shared fixture 11) and hostile input."""
import os

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import dcgm

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "dcgm")
HEADER = ("+---------------------------+------------------------------------------------+\n"
          "| Diagnostic                | Result                                         |\n"
          "+===========================+================================================+\n")


def capture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read().split("# ---- BEGIN VERBATIM ----\n", 1)[1]


def test_nvvs_json_plural_ids_uppercase_and_null_warnings():
    parsed = dcgm.parse_json(capture("json_nvvs13_mixed.json"))
    assert parsed["dcgm_version"] == "1.3"
    names = [(t["category"], t["name"]) for t in parsed["tests"]]
    assert ("Stress", "sm_stress") in names and ("Deployment", "Blacklist") in names
    summary = dcgm.summarise(parsed)
    assert summary["passed"] is False
    assert sorted(f["gpu"] for f in summary["failures"]) == [0, 1, 2, 3]
    assert all(f["test"] == "sm_stress" for f in summary["failures"])
    memory = [t for t in parsed["tests"] if t["name"] == "memory"][0]
    assert [(r["gpu"], r["status"]) for r in memory["results"]] == [(0, "skip"), (1, "pass")]
    assert "ECC memory" in memory["results"][0]["message"]


def test_gcm_json_fail_and_warn_without_gpu_ids():
    summary = dcgm.summarise(dcgm.parse_json(capture("json_gcm_fail_warn.json")))
    assert summary["passed"] is False
    assert summary["failures"] == [{"test": "Persistence Mode", "gpu": None, "message": "failed"}]
    assert [w["test"] for w in summary["warnings"]] == ["Environment Variables"]


def test_singular_gpu_id_and_skip_but_cut_json_is_refused():
    with pytest.raises(dcgm.DcgmParseError):
        dcgm.parse_json(capture("json_dcgm3_t400_excerpt.txt"))


def test_warning_objects_with_error_id_and_dcgm4_entity_ids():
    text = ('{"DCGM Diagnostic": {"version": "4.2.3", "test_categories": [{"category": "Hardware", "tests": [{"name": '
            '"memory", "results": [{"entity_group": "GPU", "entity_id": 1, "status": "Fail", "warnings": [{"warning": '
            '"ECC off", "error_id": 55}]}, {"entity_group": "GPU", "entity_id": 0, "status": "Pass"}]}]}]}}')
    parsed = dcgm.parse_json(text)
    results = parsed["tests"][0]["results"]
    assert results[0] == {"gpu": 1, "status": "fail", "message": "ECC off", "error_ids": [55]}
    assert dcgm.summarise(parsed)["passed"] is False and parsed["dcgm_version"] == "4.2.3"


def test_runtime_error_never_passes():
    parsed = dcgm.parse_json('{"DCGM Diagnostic": {"runtime_error": "Couldn\'t find the host engine", "version": "4.4.1"}}')
    summary = dcgm.summarise(parsed)
    assert summary["passed"] is False
    assert summary["failures"][0]["message"] == "Couldn't find the host engine"


def test_all_pass_passes_and_no_results_does_not():
    ok = '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "x", "results": [{"gpu_id": "0", "status": "Pass"}]}]}]}}'
    assert dcgm.summarise(dcgm.parse_json(ok))["passed"] is True
    empty = '{"DCGM GPU Diagnostic": {"test_categories": []}}'
    assert dcgm.summarise(dcgm.parse_json(empty))["passed"] is False


def test_table_dcgm4_per_gpu_rows():
    parsed = dcgm.parse_table(capture("table_dcgm423_excerpt.txt"))
    assert parsed["dcgm_version"] == "4.2.3"
    software = parsed["tests"][0]
    assert software["name"] == "software" and software["category"] == "Deployment"
    expected = [(None, "pass"), (0, "pass"), (1, "pass"), (2, "pass"), (3, "pass")]
    assert [(r["gpu"], r["status"]) for r in software["results"]] == expected


def test_table_fail_inside_pass_row_with_wrapped_warning():
    parsed = dcgm.parse_table(HEADER + "|-----  Hardware  ----------+------------------------------------------------|\n"
                              + capture("table_memory_fail_fragment.txt"))
    summary = dcgm.summarise(parsed)
    assert summary["passed"] is False
    assert [(f["test"], f["gpu"]) for f in summary["failures"]] == [("GPU Memory", 0)]
    assert "Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for GPU 0" in \
        summary["failures"][0]["message"]


def test_table_deployment_error_row():
    summary = dcgm.summarise(dcgm.parse_table(capture("table_deployment_error.txt")))
    assert summary["passed"] is False
    assert summary["failures"][0]["gpu"] == 3
    assert summary["failures"][0]["message"] == "GPU 3 has uncorrectable memory errors and row remappings are pending"


@pytest.mark.parametrize("text", ["", "   ", "Error: Unable to connect to host engine.", "[1, 2]", '{"a": 1}',
                                  '{"DCGM Diagnostic": {"test_categories": [1]}}',
                                  '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": '
                                  '[{"status": "Maybe"}]}]}]}}',
                                  "[" * 100000, '{"a": ' * 5000])
def test_unreadable_json_is_a_parse_error(text):
    with pytest.raises(dcgm.DcgmParseError):
        dcgm.parse_json(text)


def test_unreadable_table_is_a_parse_error():
    for text in ("", "Successfully ran diagnostic for group.\n", "x" * 1000):
        with pytest.raises(dcgm.DcgmParseError):
            dcgm.parse_table(text)
