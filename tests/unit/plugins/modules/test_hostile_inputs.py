# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 27's reproducers, one test each (numbered as in the issue): hostile input gives a clean one-line error
(cause, then the fix) or the right verdict, within its bound, and changes nothing.

Each test failed on the code before the fix (a traceback, a hang bounded here by an alarm, or the wrong verdict).
"""
import json
import os
import signal
import sys
import time

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.filter import compliance_report as cr
from ansible_collections.gpu_native.fleet.plugins.filter import preflight as preflight_filters
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health as gh
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvbandwidth as nvb
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvidia_driver
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeTools
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import fleet_compliance
from ansible_collections.gpu_native.fleet.plugins.modules import cuda_smoke as cuda_smoke_module
from ansible_collections.gpu_native.fleet.plugins.modules import dcgm_diag
from ansible_collections.gpu_native.fleet.plugins.modules import gpu_bandwidth
from ansible_collections.gpu_native.fleet.plugins.modules import gpu_health as gpu_health_module
from ansible_collections.gpu_native.fleet.plugins.modules import mig_config
from ansible_collections.gpu_native.fleet.plugins.modules import mig_layout
from ansible_collections.gpu_native.fleet.plugins.modules import node_compliance
from ansible_collections.gpu_native.fleet.plugins.modules import nvidia_driver_info

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "module_utils", "gpu"))
import gpu_fixtures  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fuzz"))
from _bounds import assert_effort_within, effort, meter_patterns  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
NVIDIA_SMI_STANDIN = os.path.join(REPO, "tests", "standins", "nvidia-smi")
CAPTURE = os.path.join(REPO, "tests", "standins", "captures", "h100x8-healthy")
DIGITS = "9" * 5000


def run_module(module, capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def assert_clean_failure(result, *parts):
    """A failed task with one line naming the cause and the fix, and no traceback."""
    assert result.get("failed") is True, result
    assert "exception" not in result and "Traceback" not in result["msg"]
    assert "\n" not in result["msg"] and "Fix:" in result["msg"], result["msg"]
    for part in parts:
        assert part in result["msg"], result["msg"]


@pytest.fixture
def alarm():
    """Bound a test that used to hang: SIGALRM after the given seconds fails it instead."""
    def expire(_signum, _frame):
        raise AssertionError("still blocked after the alarm (a hang)")
    previous = signal.signal(signal.SIGALRM, expire)
    yield signal.alarm
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# ---- 1, 13: dcgm_diag ------------------------------------------------------------------------------------------
def diag(result=None, tests=None):
    tests = [{"name": "memory", "results": [result]}] if tests is None else tests
    return json.dumps({"DCGM GPU Diagnostic": {"test_categories": [{"category": "H", "tests": tests}]}})


@pytest.mark.parametrize("text,cause", [
    (diag(tests=5), "category 'H': tests is int, not a list"),
    (diag(tests=True), "category 'H': tests is bool, not a list"),
    (diag(tests=[{"name": "memory", "results": 7}]), "test 'memory': results is int, not a list"),
    (diag({"gpu_id": "\u00b2", "status": "PASS"}), "gpu_id is '\u00b2', not a whole number"),
    (diag({"entity_id": "\u00b2", "status": "PASS"}), "entity_id is '\u00b2', not a whole number"),
    (diag({"gpu_id": DIGITS, "status": "PASS"}), "gpu_id has 5000 digits, more than 6"),
    (diag({"entity_id": DIGITS, "entity_group": "GPU", "status": "PASS"}), "entity_id has 5000 digits"),
    ("|-----  Hardware  ----|\n| Diagnostic | Result |\n| memory | GPU%s: Pass |\n" % DIGITS, "has 5000 digits"),
], ids=["tests-int", "tests-bool", "results-int", "gpu_id-superscript", "entity_id-superscript", "gpu_id-5000",
        "entity_id-5000", "table-5000"])
def test_01_dcgm_diag_malformed_output_is_a_clean_failure(capsys, text, cause):
    key = "text" if text.startswith("|") else "json"
    result = run_module(dcgm_diag, capsys, {"source": "captured", "captured": {key: text}})
    assert_clean_failure(result, "dcgmi output cannot be read", cause)
    assert result["passed"] is False and result["changed"] is False


def test_13_dcgm_gpu_ids_cannot_amplify_the_results(capsys):
    text = diag({"gpu_ids": ",".join(["0"] * 50000), "status": "PASS"})
    result = run_module(dcgm_diag, capsys, {"source": "captured", "captured": {"json": text}})
    assert_clean_failure(result, "gpu_ids names more than 1024 GPUs")
    # the effort bound is the refusal itself: no row is built (it used to return 50,000; 500,000 ids took 143 s)
    assert result["passed"] is False and result["tests"] == []


def test_13_each_gpu_a_result_names_counts_against_the_result_limit(capsys):
    ids = ",".join(str(i) for i in range(1000))
    tests = [{"name": "t%d" % n, "results": [{"gpu_ids": ids, "status": "Pass"}]} for n in range(25)]
    result = run_module(dcgm_diag, capsys, {"source": "captured", "captured": {"json": diag(tests=tests)}})
    assert_clean_failure(result, "more than 20000 results")


# ---- 2, 12, 18: gpu_bandwidth ----------------------------------------------------------------------------------
MATRIX = ("Running device_to_device_memcpy_read_ce.\n"
          "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n"
          "           %s         1\n"
          " %s       N/A    300.00\n"
          " 1    300.00       N/A\n")


@pytest.mark.parametrize("header,row,cause", [
    ("0", DIGITS, "the row index (line 4) has 5000 digits"),
    (DIGITS, "0", "the column header (line 3) has 5000 digits"),
], ids=["row-index", "column-header"])
def test_02_gpu_bandwidth_huge_matrix_indices_are_a_clean_failure(capsys, header, row, cause):
    result = run_module(gpu_bandwidth, capsys, {"source": "captured", "captured": {"nvbandwidth": MATRIX % (header, row)},
                                                "product": "NVIDIA H100 80GB HBM3"})
    assert_clean_failure(result, "nvbandwidth output cannot be read", cause)
    assert result["passed"] is False


def test_12_a_long_device_line_is_not_a_device_and_its_pattern_sees_bounded_text(monkeypatch):
    """An effort bound, not a timing: the backtracking device pattern is handed at most MAX_DEVICE_LINE characters
    (so at most about 512 x 512 steps), whatever the line's length; it was handed the whole 80,000-space line (85 s)."""
    meters = meter_patterns(monkeypatch, nvb, "_DEVICE_RE")
    hostile = "Device 0: NVIDIA" + " " * 16000 + "H100\n"
    assert nvb.parse_text(hostile)["devices"] == []
    assert meters["_DEVICE_RE"].longest <= nvb.MAX_DEVICE_LINE
    measured = effort(nvb.parse_text, hostile * 4)
    assert measured.error is None
    assert_effort_within(measured, 4, 200, 400, "4 hostile device lines")  # lines of Python per input line
    assert nvb.parse_text("Device 0: NVIDIA H100 (00000000:01:00)\n")["devices"][0]["name"] == "NVIDIA H100"
    assert meters["_DEVICE_RE"].calls >= 1  # the meter sees the parser's calls


def test_12_a_long_json_device_entry_is_refused_and_its_pattern_sees_bounded_text(monkeypatch):
    meters = meter_patterns(monkeypatch, nvb, "_JSON_DEVICE_RE")
    hostile = json.dumps({"nvbandwidth": {"GPU Device list": ["0: NVIDIA" + " " * 16000 + "H100"], "testcases": []}})
    with pytest.raises(nvb.NvbandwidthParseError, match="is not '<index>: <name> \\(<bus id>\\)'"):
        nvb.parse_json(hostile)
    assert meters["_JSON_DEVICE_RE"].longest <= nvb.MAX_DEVICE_LINE


NO_THRESHOLD_PRODUCT = "NVIDIA Unlisted GPU"
CUT = "Running device_to_device_memcpy_read_ce.\n"
NOT_FOUND = "ERROR: Testcase device_to_device_memcpy_read_ce not found!\n"
WAIVED = "Device 0: NVIDIA Unlisted GPU (00000000:01:00)\nDevice 1: NVIDIA Unlisted GPU (00000000:02:00)\nWaived:\n"
EMPTY_JSON = json.dumps({"nvbandwidth": {"version": "v0.8", "testcases": [
    {"name": "device_to_device_memcpy_read_ce", "status": "Passed", "bandwidth_matrix": [],
     "bandwidth_description": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"}]}})


@pytest.mark.parametrize("text,cause", [
    (CUT, "did not finish"), (NOT_FOUND, "no such testcase"), (WAIVED, "was waived"), (EMPTY_JSON, "the matrix is empty"),
], ids=["cut", "not-found", "waived", "empty-json-matrix"])
def test_18_a_failed_run_fails_without_a_threshold_for_the_model(capsys, text, cause):
    result = run_module(gpu_bandwidth, capsys, {"source": "captured", "captured": {"nvbandwidth": text},
                                                "product": NO_THRESHOLD_PRODUCT,
                                                "testcases": ["device_to_device_memcpy_read_ce"]})
    assert result["status"] == "fail" and result["passed"] is False and result["failed"] is True
    assert cause in result["msg"]


# ---- 4, 14, 19: node_compliance --------------------------------------------------------------------------------
def readiness(capsys, path, **extra):
    result = run_module(node_compliance, capsys, dict({"checks": ["readiness"], "readiness_textfile": str(path)}, **extra))
    return result, [c for c in result["checks"] if c["check"] == "readiness"][0]


@pytest.mark.parametrize("value", ["+Inf", "NaN", "-Inf", DIGITS, "1e9", "\u0661\u0662"],
                         ids=["+Inf", "NaN", "-Inf", "5000-digits", "1e9", "arabic-indic-digits"])
def test_04_a_readiness_value_that_is_not_a_unix_time_is_an_error(capsys, tmp_path, value):
    path = tmp_path / "readiness.prom"
    path.write_text("gpu_native_node_validation_last_success_ts_seconds %s\n" % value)
    result, check = readiness(capsys, path)
    assert not result.get("failed") and result["compliant"] is False
    assert check["status"] == "error" and "is not a Unix time in seconds" in check["actual"]
    assert "Fix:" in check["actual"] and "\n" not in check["actual"]
    assert path.read_text().endswith("%s\n" % value)  # read, never rewritten


def test_14_a_fifo_as_readiness_textfile_fails_at_once(capsys, tmp_path, alarm):
    fifo = tmp_path / "readiness.prom"
    os.mkfifo(str(fifo))
    alarm(10)
    result, check = readiness(capsys, fifo)
    assert check["status"] == "fail" and "FIFO, not a regular file" in check["actual"]
    assert result["compliant"] is False


def test_14_a_fifo_as_kernel_log_fails_at_once(tmp_path, alarm):
    fifo = tmp_path / "kern.log"
    os.mkfifo(str(fifo))
    alarm(10)
    tools = NodeTools(paths={"nvidia-smi": str(tmp_path / "none"), "lspci": str(tmp_path / "none")})
    with pytest.raises(gh.GpuHealthError, match="kernel_log .* cannot be read: it is a FIFO, not a regular file. Fix:"):
        gh.collect(tools, kernel_log=str(fifo), sysfs_root=str(tmp_path))


def test_14_a_directory_as_kernel_log_is_named(tmp_path):
    tools = NodeTools(paths={"nvidia-smi": str(tmp_path / "none"), "lspci": str(tmp_path / "none")})
    with pytest.raises(gh.GpuHealthError, match="it is a directory, not a regular file"):
        gh.collect(tools, kernel_log=str(tmp_path), sysfs_root=str(tmp_path))


def test_19_a_last_success_in_the_future_fails(capsys, tmp_path):
    path = tmp_path / "readiness.prom"
    path.write_text("gpu_native_node_validation_last_success_ts_seconds %d\n" % (time.time() + 10 * 365 * 86400))
    _result, check = readiness(capsys, path)
    assert check["status"] == "fail" and "in the future" in check["actual"]


def test_19_readiness_max_age_zero_is_zero(capsys, tmp_path):
    path = tmp_path / "readiness.prom"
    path.write_text("gpu_native_node_validation_last_success_ts_seconds %d\n" % (time.time() - 30))
    _result, check = readiness(capsys, path, readiness_max_age=0)
    assert check["status"] == "fail" and "at most 0s old" in check["expected"]


def test_19_a_fresh_success_still_passes(tmp_path):
    path = tmp_path / "readiness.prom"
    path.write_text('gpu_native_node_validation_last_success_ts_seconds{node="n"} 1000\n')
    assert fleet_compliance.check_readiness(str(path), 600, now=1500)["status"] == "pass"
    assert fleet_compliance.check_readiness(str(path), 600, now=990)["status"] == "pass"  # within the clock slack


# ---- 5, 6: NUL bytes, nvidia_driver_info, cuda_smoke ----------------------------------------------------------
def test_05_nvidia_driver_info_refuses_a_nul_byte_and_runs_nothing(capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(nvidia_driver_info.node_tools, "run_process", lambda argv, *a, **k: calls.append(argv))
    result = run_module(nvidia_driver_info, capsys, {"kernel": "6.1\u0000x"})
    assert_clean_failure(result, "kernel holds a NUL byte", "Nothing was run")
    assert calls == []


def test_05_cuda_smoke_refuses_a_nul_byte_in_the_library(capsys):
    result = run_module(cuda_smoke_module, capsys, {"library": "libcuda.so.1\u0000x"})
    assert_clean_failure(result, "library holds a NUL byte")


def test_05_a_nul_byte_reaching_the_runner_is_a_missing_tool_not_a_traceback():
    result = NodeTools().run("sh", ["-c", "true\u0000x"])
    assert result.status == "missing" and "null byte" in result.message


def test_06_nvidia_smi_list_with_a_5000_digit_index_is_not_a_gpu_line():
    text = "GPU %s: NVIDIA H100 80GB HBM3 (UUID: GPU-2b6d0f8a-0000-0000-0000-000000000000)\n" % DIGITS
    assert nvidia_driver.parse_nvidia_smi_list(text) == []
    assert nvidia_driver.parse_nvidia_smi_list(text.replace(DIGITS, "3"))[0]["index"] == 3


def test_06_nvidia_driver_info_with_a_5000_digit_gpu_index(capsys, monkeypatch):
    line = "GPU %s: NVIDIA H100 80GB HBM3 (UUID: GPU-2b6d0f8a-0000-0000-0000-000000000000)\n" % DIGITS

    def runner(argv, timeout, env_update=None, max_bytes=None):
        return (0, line.encode(), b"", False, False, 0.01) if argv[-1] == "-L" else (127, b"", b"", False, False, 0.0)
    monkeypatch.setattr(nvidia_driver_info.node_tools, "run_process", runner)
    monkeypatch.setattr(nvidia_driver_info.node_tools, "find_tool", lambda name, path_dirs=None: "/usr/bin/" + name)
    result = run_module(nvidia_driver_info, capsys, {})
    assert not result.get("failed"), result.get("msg")
    assert result["nvidia_smi"]["gpus"] == [] and result["nvidia_smi"]["message"].startswith("GPU 999")


# ---- 7, 20: mig_layout -----------------------------------------------------------------------------------------
MIG_CONFIG = {"version": "v1", "mig-configs": {
    "balanced": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
                 {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False}]}}


@pytest.fixture
def mig_node(tmp_path, monkeypatch):
    state = tmp_path / "mig-state.json"
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", CAPTURE)
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_MIG_STATE", str(state))
    return tmp_path / "calls.log"


def _mutating(calls_log):
    if not calls_log.exists():
        return []
    calls = [json.loads(line)["argv"] for line in calls_log.read_text().splitlines()]
    return [argv for argv in calls if any(a in ("-cgi", "-dci", "-dgi", "-mig", "-r") for a in argv)]


def test_07_mig_layout_config_path_that_is_a_directory_fails_before_anything_changes(capsys, tmp_path, mig_node):
    folder = tmp_path / "config-dir"
    folder.mkdir()
    result = run_module(mig_layout, capsys, {"config": MIG_CONFIG, "select": "balanced", "nvidia_smi": NVIDIA_SMI_STANDIN,
                                             "tool": "mig-parted", "mig_parted": "/bin/true",
                                             "mig_parted_config_path": str(folder)})
    assert_clean_failure(result, "mig_parted_config_path %s is a directory" % folder, "Nothing was changed")
    assert result["changed"] is False and _mutating(mig_node) == [] and os.listdir(str(folder)) == []


def test_20_mig_layout_captured_without_source_captured_is_refused(capsys, tmp_path, mig_node):
    result = run_module(mig_layout, capsys, {"config": MIG_CONFIG, "select": "balanced", "nvidia_smi": NVIDIA_SMI_STANDIN,
                                             "captured": {"nvidia_smi_xml": "<nvidia_smi_log/>"}})
    assert_clean_failure(result, "captured is only read with source=captured")
    assert not mig_node.exists()  # nvidia-smi never ran


class _Module:
    @staticmethod
    def atomic_move(source, target):
        os.rename(source, target)


def test_20_a_symlinked_mig_parted_config_stays_a_symlink(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    link = tmp_path / "gpu-native-config.yaml"
    link.symlink_to(real)
    assert mig_layout._write_config(_Module, mig_layout._config_target(str(link)), MIG_CONFIG) is True
    assert link.is_symlink() and json.loads(real.read_text()) == MIG_CONFIG
    assert mig_layout._write_config(_Module, mig_layout._config_target(str(link)), MIG_CONFIG) is False


def test_20_a_symlink_to_a_fifo_is_refused_without_blocking(tmp_path, alarm):
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    link = tmp_path / "config.yaml"
    link.symlink_to(fifo)
    alarm(10)
    with pytest.raises(mig_layout.MigNodeError, match="is a FIFO. Nothing was changed. Fix:"):
        mig_layout._config_target(str(link))


# ---- 21: mig_config --------------------------------------------------------------------------------------------
def test_21_mig_config_refuses_more_gpus_than_a_node_holds(capsys):
    gpus = [{"index": i, "device_id": "0x2330"} for i in range(65)]
    document = {"version": "v1", "mig-configs": {"off": [{"devices": "all", "mig-enabled": False}]}}
    result = run_module(mig_config, capsys, {"config": document, "gpus": gpus})
    assert_clean_failure(result, "gpus lists 65 GPUs, more than the 64 a node holds")


# ---- 17: gpu_health --------------------------------------------------------------------------------------------
def test_17_an_unreadable_lspci_capture_is_never_ready(capsys):
    case = [c for c in gpu_fixtures.verdict_cases() if c["name"].startswith("10 [b] one A10")][0]
    captured = gpu_fixtures.captured_inputs(case)
    clean = run_module(gpu_health_module, capsys, {"source": "captured", "captured": captured})
    assert clean["gpu_ready"] is False
    captured["lspci"] += "\x00"
    result = run_module(gpu_health_module, capsys, {"source": "captured", "captured": captured})
    assert result["gpu_ready"] is False and result["pci_gpu_count"] is None
    assert any("lspci output is unreadable" in r and "Fix:" in r for r in result["reasons"]), result["reasons"]


# ---- 8, 16: filters --------------------------------------------------------------------------------------------
GOOD = {"host": "a", "check": "spec", "status": "pass", "expected": "e", "actual": "x"}


@pytest.mark.parametrize("bad", [
    {"host": "b", "status": "fail"},
    {"host": "b", "check": None, "status": "fail"},
    {"host": "b", "check": "spec", "status": ["fail"]},
    {"host": ["b"], "check": "spec", "status": "fail"},
    "not a row",
], ids=["no-check", "check-null", "status-list", "host-list", "not-a-mapping"])
def test_08_one_bad_compliance_row_is_that_rows_error(bad):
    rows = [GOOD, bad]
    summary = cr.compliance_summary(rows)
    assert summary["hosts_compliant"] == 1 and summary["by_status"]["error"] == 1
    junit = cr.compliance_junit(rows)
    assert 'errors="1"' in junit and "is malformed" in junit or "is not a mapping" in junit
    html = cr.compliance_html(rows)
    assert "1 compliant, 1 failed" in html


def test_08_one_node_returning_check_null_does_not_stop_the_fleets_report():
    hostvars = {"a": {cr.NODE_VAR: {"checks": [{"check": "spec", "status": "pass"}]}},
                "b": {cr.NODE_VAR: {"checks": [{"check": None, "status": "pass"}, {"check": "readiness", "status": 5}]}}}
    rows = cr.compliance_rows(hostvars, ["a", "b"])
    assert [r["status"] for r in rows if r["host"] == "b" and r["check"] != "mig"] == ["error", "error"]
    assert cr.host_status(rows) == {"a": "pass", "b": "fail"}
    assert "<testsuite name=\"b\"" in cr.compliance_junit(rows) and "2 host(s)" in cr.compliance_html(rows)


def test_08_junit_with_a_numeric_host():
    junit = cr.compliance_junit([dict(GOOD, host=5)])
    assert '<testsuite name="5"' in junit


@pytest.mark.parametrize("result,extra,cause", [
    ({"gate": "spec", "status": "pass", "duration_s": "abc"}, {}, "duration_s is 'abc', not a number of seconds"),
    ({"gate": "spec", "status": "pass", "duration_s": float("nan")}, {}, "not a number of seconds"),
    ({"gate": "spec", "status": "pass"}, {"timestamp": "nan"}, "timestamp is 'nan', not a Unix time"),
    ({"gate": "spec", "status": "pass"}, {"timestamp": "abc"}, "timestamp is 'abc', not a Unix time"),
], ids=["duration-abc", "duration-nan", "timestamp-nan", "timestamp-abc"])
def test_08_preflight_verdict_bad_numbers_are_its_own_error(result, extra, cause):
    with pytest.raises(AnsibleFilterError, match="preflight_verdict: .*%s.*Fix:" % cause):
        preflight_filters.preflight_verdict([result], required=["spec"], node="n", **extra)


def test_08_preflight_kubernetes_gate_with_pods_as_text():
    with pytest.raises(AnsibleFilterError, match="pods must be a list of pod objects .* got str. Fix:"):
        preflight_filters.preflight_kubernetes_gate({"metadata": {"name": "n"}}, pods="abc")
    with pytest.raises(AnsibleFilterError, match="a list holding int"):
        preflight_filters.preflight_kubernetes_gate({"metadata": {"name": "n"}}, pods=[1])


def test_08_preflight_summary_with_bad_rows():
    good = {"node": "n1", "gates": {"spec": "pass"}, "verdict": "passed", "reasons": "fine"}
    table = preflight_filters.preflight_summary([1, "x", None, good])
    lines = table.splitlines()
    assert len(lines) == 6 and lines[2].startswith("(row 0)") and "error" in lines[4]
    assert lines[5].startswith("n1") and lines[5].endswith("fine")


def test_16_reasons_given_as_one_text_are_one_reason():
    decision = preflight_filters.preflight_verdict([{"gate": "spec", "status": "fail", "reasons": "disk full"}],
                                                   required=["spec"], node="n", timestamp=1)
    assert decision["reasons"] == ["spec: disk full"] and decision["annotation"].count("spec:") == 1


# ---- 15: cuda_smoke --------------------------------------------------------------------------------------------
class _Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def test_15_cuda_smoke_stops_at_the_runs_deadline(capsys, monkeypatch):
    clock = _Clock()
    tested = []

    def smoke_device(visible_device=None, library=None, timeout=60, **_kwargs):
        tested.append((visible_device, timeout))
        clock.now += 1.0  # each device takes a second
        return {"passed": True, "name": "Fake GPU", "duration_ms": 1000}
    monkeypatch.setattr(cuda_smoke_module, "time", clock)
    monkeypatch.setattr(cuda_smoke_module.cuda_smoke, "check_library", lambda library: None)
    monkeypatch.setattr(cuda_smoke_module.cuda_smoke, "smoke_device", smoke_device)
    devices = ["GPU-%04d" % i for i in range(100)]
    result = run_module(cuda_smoke_module, capsys, {"devices": devices, "timeout": 10, "device_timeout": 120})
    assert len(tested) == 10 and max(t for _d, t in tested) <= 10
    assert result["failed"] is True and result["passed"] is False and len(result["devices"]) == 10
    assert "90 device(s) not tested" in result["msg"] and "timeout of 10 s was reached. Fix:" in result["msg"]


def test_15_cuda_smoke_timeout_is_bounded(capsys):
    result = run_module(cuda_smoke_module, capsys, {"timeout": 0})
    assert_clean_failure(result, "timeout is 0")


# ---- 3: llm_smoke (the tracebacks; 10 and 11 against tests/hostile_http.py: test_*_hostile_http.py) ----------
class _Canned:
    """An HTTP server on 127.0.0.1 answering each path with a canned JSON body or SSE stream; stops itself."""

    def __init__(self, answers):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                body, content_type = answers.get(self.path.split("?")[0], (b"{}", "application/json"))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(min(length, 65536))
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *_args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()
        self.base_url = "http://127.0.0.1:%d/v1" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _llm(capsys, answers, **args):
    from ansible_collections.gpu_native.fleet.plugins.modules import llm_smoke
    server = _Canned(answers)
    try:
        return run_module(llm_smoke, capsys, dict({"base_url": server.base_url, "timeout": 10}, **args))
    finally:
        server.close()


NO_USAGE = json.dumps({"choices": [{"text": "GPUs are fast."}]}).encode()


@pytest.mark.parametrize("answers,args,reason", [
    ({"/v1/models": (b'{"data": 5}', "application/json")}, {}, "lists no model; pass model"),
    ({"/v1/completions": (b"[" * 200000, "application/json")}, {"model": "m"}, "nested deeper than 64 levels"),
    ({"/v1/completions": (NO_USAGE, "application/json")}, {"model": "m", "min_tokens": 1}, None),
], ids=["models-data-int", "deep-body", "stream-choices-int"])
def test_03_llm_smoke_malformed_answers_are_reasons(capsys, monkeypatch, answers, args, reason):
    stream = b'data: {"choices": 5}\n\ndata: [DONE]\n\n'
    if reason is None:  # no usage: the stream is asked for, and its one event has choices: 5
        from ansible_collections.gpu_native.fleet.plugins.module_utils.serving import llm_probe
        real = llm_probe.Client.post_stream

        def post_stream(self, path, body):
            return real(self, path + "-stream", body)
        monkeypatch.setattr(llm_probe.Client, "post_stream", post_stream)
        answers = dict(answers, **{"/v1/completions-stream": (stream, "text/event-stream")})
        reason = "fewer than min_tokens 1"
    result = _llm(capsys, answers, **args)
    assert result["failed"] is True and "exception" not in result
    assert reason in result["msg"], result["msg"]


def test_03_llm_smoke_base_url_that_is_not_a_url(capsys):
    from ansible_collections.gpu_native.fleet.plugins.modules import llm_smoke
    result = run_module(llm_smoke, capsys, {"base_url": "http://[::1/v1"})
    assert_clean_failure(result, "base_url 'http://[::1/v1' is not a URL")
