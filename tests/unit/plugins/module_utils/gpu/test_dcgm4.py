# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DCGM 4.x `dcgmi diag -j` (issue 28, item 5): the version in the top-level metadata, and each test's
test_summary.status (NVIDIA/DCGM 4.6.0 dcgmi/Diag.cpp HelperJsonAddMetadata / HelperJsonAddTestSummary;
testing/python3/dcgm_diag_schema.json requires both).  The capture is a real 4.2.3 run on a GB10
(tests/fixtures/dcgm/json_dcgm423_gb10_metadata_test_summary.json, its header names the source)."""
import testlib

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import dcgm

GB10 = testlib.fixture_text("dcgm", "json_dcgm423_gb10_metadata_test_summary.json")
ENTITY_FAIL = '"status" : "Fail",\n\t\t\t\t\t\t\t\t"warnings"'


def test_the_version_and_driver_come_from_the_top_level_metadata():
    parsed = dcgm.parse_json(GB10)
    assert parsed["dcgm_version"] == "4.2.3"
    assert parsed["driver_version"] == "580.82.09"
    assert parsed["tests"][0]["summary"]["status"] == dcgm.FAIL
    assert "SRAM Threshold" in parsed["tests"][0]["summary"]["message"]


def test_a_failure_only_at_summary_level_fails_the_run():
    # derived from the real run: the entity result says Pass, only the test's test_summary says Fail
    assert GB10.count(ENTITY_FAIL) == 1
    summary_only = GB10.replace(ENTITY_FAIL, ENTITY_FAIL.replace("Fail", "Pass"))
    summary = dcgm.summarise(dcgm.parse_json(summary_only))
    assert summary["passed"] is False
    assert summary["failures"] == [{"test": "software", "gpu": None, "message": (
        "Error getting the SRAM Threshold Count for GPU 0. Status = 0. Value = 9223372036854775794. "
        "SRAM Threshold checking was skipped.")}]
    # with both passing, the run passes; a failing entity is reported once, not again at summary level
    passing = summary_only.replace('"status" : "Fail"', '"status" : "Pass"')
    assert dcgm.summarise(dcgm.parse_json(passing))["passed"] is True
    real = dcgm.summarise(dcgm.parse_json(GB10))
    assert [(f["test"], f["gpu"]) for f in real["failures"]] == [("software", 0)]


def test_an_unknown_summary_status_is_refused():
    broken = GB10.replace('\t\t\t\t\t\t\t"status" : "Fail"\n\t\t\t\t\t\t}', '\t\t\t\t\t\t\t"status" : "Maybe"\n\t\t\t\t\t\t}')
    assert broken != GB10
    try:
        dcgm.parse_json(broken)
    except dcgm.DcgmParseError as exc:
        assert "test_summary of test 'software' has the unknown status 'Maybe'" in str(exc)
    else:
        raise AssertionError("an unknown test_summary status was read")
