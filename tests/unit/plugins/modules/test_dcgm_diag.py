"""dcgm_diag module: captured and live (through the dcgmi stand-in), every way a run can fail to pass."""
import json
import os
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import dcgm_diag

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
STANDIN = os.path.join(REPO, "tests", "standins", "dcgmi")
FIXTURES = os.path.join(REPO, "tests", "fixtures", "dcgm")
PASSING = ('{"DCGM Diagnostic": {"version": "4.2.3", "test_categories": [{"category": "Deployment", "tests": '
           '[{"name": "software", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"}]}]}]}}')


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            dcgm_diag.main()
    return json.loads(capsys.readouterr().out)


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read().split("# ---- BEGIN VERBATIM ----\n", 1)[1]


def test_captured_pass(capsys):
    result = run(capsys, {"source": "captured", "captured": {"json": PASSING}})
    assert result["passed"] is True and not result.get("failed")
    assert result["dcgm_version"] == "4.2.3" and result["command"]["source"] == "captured"


def test_captured_failure_fails_the_task_with_the_gpu_and_test(capsys):
    result = run(capsys, {"source": "captured", "captured": {"json": fixture("json_nvvs13_mixed.json")}})
    assert result["failed"] is True
    assert result["msg"].startswith("dcgmi diag failed: sm_stress on GPU 0: Max stress level of 2128.7")
    assert len(result["failures"]) == 4


def test_fail_on_failure_false_returns_the_verdict(capsys):
    result = run(capsys, {"source": "captured", "captured": {"text": fixture("table_deployment_error.txt")},
                          "fail_on_failure": False})
    assert not result.get("failed") and result["passed"] is False
    assert result["failures"][0]["gpu"] == 3


def test_live_pass_through_the_standin(capsys, monkeypatch, tmp_path):
    out = tmp_path / "diag.json"
    out.write_text("# ---- BEGIN VERBATIM ----\n" + PASSING)
    monkeypatch.setenv("DCGMI_STANDIN_OUTPUT", str(out))
    result = run(capsys, {"dcgmi": STANDIN, "level": 1})
    assert result["passed"] is True
    assert result["command"]["command"] == STANDIN + " diag -r 1 -j"


def test_live_hard_error_without_json(capsys, monkeypatch):
    monkeypatch.setenv("DCGMI_STANDIN_MODE", "no-hostengine")
    result = run(capsys, {"dcgmi": STANDIN})
    assert result["failed"] is True and result["passed"] is False
    assert result["msg"].startswith("dcgmi exited with rc=255: Error: unable to establish a connection")


def test_live_timeout_is_a_failure_not_a_hang(capsys, monkeypatch):
    monkeypatch.setenv("DCGMI_STANDIN_SLEEP", "30")
    started = time.time()
    result = run(capsys, {"dcgmi": STANDIN, "timeout": 1})
    assert time.time() - started < 15
    assert result["failed"] is True and result["msg"] == "dcgmi did not answer within 1 s."


def test_live_prints_nothing(capsys, monkeypatch):
    monkeypatch.delenv("DCGMI_STANDIN_OUTPUT", raising=False)
    result = run(capsys, {"dcgmi": STANDIN, "fail_on_failure": False})
    assert result["passed"] is False
    assert result["reasons"] == ["dcgmi output cannot be read (dcgmi printed nothing). Fix: run dcgmi diag -j on the "
                                 "node, or pass its unmodified output"]


def test_missing_dcgmi(capsys, tmp_path):
    result = run(capsys, {"dcgmi": str(tmp_path / "dcgmi")})
    assert result["failed"] is True and "dcgmi was not found" in result["msg"]


def test_non_zero_exit_with_clean_report_is_not_a_pass(capsys, monkeypatch, tmp_path):
    out = tmp_path / "diag.json"
    out.write_text("# ---- BEGIN VERBATIM ----\n" + PASSING)
    monkeypatch.setenv("DCGMI_STANDIN_OUTPUT", str(out))
    monkeypatch.setenv("DCGMI_STANDIN_RC", "226")
    result = run(capsys, {"dcgmi": STANDIN, "fail_on_failure": False})
    assert result["passed"] is False and "rc=226" in result["reasons"][-1]


@pytest.mark.parametrize("args,message", [
    ({"source": "captured"}, "source=captured needs captured.json or captured.text"),
    ({"captured": {"json": "{}"}}, "captured is only read with source=captured"),
    ({"timeout": 0}, "timeout is 0"),
    ({"level": 5}, "value of level must be one of"),
])
def test_bad_options(capsys, args, message):
    result = run(capsys, args)
    assert result["failed"] is True and message in result["msg"]


def test_check_mode_runs_nothing_unless_told_to(capsys, monkeypatch, tmp_path):
    record = tmp_path / "invocations"
    out = tmp_path / "diag.json"
    out.write_text("# ---- BEGIN VERBATIM ----\n" + PASSING)
    monkeypatch.setenv("DCGMI_STANDIN_OUTPUT", str(out))
    monkeypatch.setenv("DCGMI_STANDIN_RECORD", str(record))
    result = run(capsys, {"dcgmi": STANDIN, "level": 3, "_ansible_check_mode": True})
    assert result["skipped"] is True and result["passed"] is False and result["changed"] is False
    assert result["reasons"] == ["check mode: dcgmi diag -r 3 would run; nothing was run (run_in_check_mode=true "
                                 "runs it)"]
    assert result["command"] == {} and not record.exists()
    result = run(capsys, {"dcgmi": STANDIN, "level": 1, "_ansible_check_mode": True, "run_in_check_mode": True})
    assert result["passed"] is True and not result.get("skipped")
    assert record.read_text() == "diag -r 1 -j\n"


def test_check_mode_still_judges_a_captured_output(capsys):
    result = run(capsys, {"source": "captured", "captured": {"json": PASSING}, "_ansible_check_mode": True})
    assert result["passed"] is True and not result.get("skipped")
