# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for issue 27's entry points: node_compliance's readiness textfile, nvidia_driver_info's
``nvidia-smi -L`` reader, the shared integer parser and the compliance and preflight report filters.

* any text: the readiness reader gives a Unix time in whole seconds, None or its own error; the nvidia-smi -L
  reader and the integer parser raise nothing but their own errors;
* any rows (mappings, scalars, lists, nulls in any field): the report filters never raise, every input row gives
  one output row, and a malformed row is an ``error`` for that row only;
* any gate results: preflight_verdict gives a verdict or its own AnsibleFilterError, never another exception;
* any hostvars, hosts and percentage: preflight_run_budget counts only the hosts given, fails the run's end exactly
  when a host has no verdict or the budget is spent, or raises its own AnsibleFilterError.

Inputs are bounded (max_size); no test measures time.
"""
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.filter import compliance_report as cr
from ansible_collections.gpu_native.fleet.plugins.filter import preflight as pf
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import IntegerParseError, parse_int
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvidia_driver
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import fleet_compliance as fc

FUZZ_TARGETS = ("node_compliance", "nvidia_driver_info", "compliance_rows", "compliance_summary", "compliance_junit",
                "compliance_html", "preflight_verdict", "preflight_kubernetes_gate", "preflight_summary",
                "preflight_run_budget", "compliance_device_plugin_count")

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["pass", "fail", "error", "skip", "unreachable", "spec"]))
VALUES = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)
ROW = st.one_of(VALUES, st.fixed_dictionaries({}, optional={
    "host": VALUES, "check": VALUES, "status": VALUES, "expected": VALUES, "actual": VALUES}))
METRIC = "gpu_native_node_validation_last_success_ts_seconds"
NUMBERISH = st.one_of(st.text(alphabet="0123456789+-.eEinfINFaN\u00b2\u0661 ", max_size=30),
                      st.integers(min_value=0, max_value=10 ** 40).map(str))


@given(st.lists(st.one_of(NUMBERISH.map(lambda v: "%s %s" % (METRIC, v)), st.text(max_size=40)), max_size=6))
def test_readiness_textfile_values(lines):
    try:
        value = fc.parse_last_success("\n".join(lines))
    except fc.ReadinessTextfileError as exc:
        assert "is not a Unix time" in str(exc)
        return
    assert value is None or (isinstance(value, int) and 0 <= value < 10 ** 12)


@given(NUMBERISH, st.integers(min_value=1, max_value=20))
def test_parse_int_raises_only_its_own_error(text, digits):
    try:
        value = parse_int(text, "x", max_digits=digits)
    except IntegerParseError:
        return
    assert isinstance(value, int) and 0 <= value < 10 ** digits and text.strip().isdigit()


@given(st.lists(st.one_of(st.text(max_size=80), NUMBERISH.map(
    lambda i: "GPU %s: NVIDIA H100 (UUID: GPU-0123-abcd)" % i)), max_size=8))
def test_nvidia_smi_list(lines):
    for gpu in nvidia_driver.parse_nvidia_smi_list("\n".join(lines)):
        assert isinstance(gpu["index"], int) and 0 <= gpu["index"] < 10000


@given(st.lists(ROW, max_size=6))
def test_report_filters_never_raise_and_keep_every_row(rows):
    summary = cr.compliance_summary(rows)
    assert sum(summary["by_status"].values()) == len(rows)
    cr.compliance_junit(rows)
    cr.compliance_html(rows)
    good = [r for r in rows if isinstance(r, dict) and isinstance(r.get("check"), str) and r.get("check")
            and r.get("status") in cr.STATUS_ORDER and isinstance(r.get("host"), str) and r.get("host")]
    assert summary["by_status"]["error"] >= len(rows) - len(good)


@given(st.dictionaries(st.sampled_from(["a", "b"]), st.fixed_dictionaries({}, optional={
    cr.NODE_VAR: st.one_of(VALUES, st.fixed_dictionaries({"checks": st.lists(ROW, max_size=4)}))}), max_size=2))
def test_compliance_rows_never_raise(hostvars):
    rows = cr.compliance_rows(hostvars, ["a", "b"])
    assert all(row["status"] in cr.STATUS_ORDER for row in rows)
    cr.compliance_summary(rows)


@given(st.one_of(VALUES, st.fixed_dictionaries({}, optional={
    "skipped": VALUES, "failed": VALUES,
    "resources": st.one_of(VALUES, st.lists(st.one_of(VALUES, st.fixed_dictionaries({}, optional={
        "status": st.one_of(VALUES, st.fixed_dictionaries({}, optional={
            "allocatable": st.one_of(VALUES, st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu"]), VALUES,
                                                             max_size=2))}))})), max_size=2))})))
def test_the_device_plugin_count_is_a_whole_count_or_none(k8s_node):
    count = cr.compliance_device_plugin_count(k8s_node)
    assert count is None or (type(count) is int and count >= 0)  # pylint: disable=unidiomatic-typecheck


GATE_RESULT = st.fixed_dictionaries({"gate": st.sampled_from(["spec", "gpu_health", "bogus"]),
                                     "status": st.sampled_from(["pass", "fail", "skip", "nope"])},
                                    optional={"reasons": VALUES, "duration_s": VALUES, "details": VALUES})


@given(st.lists(st.one_of(GATE_RESULT, VALUES), max_size=4), st.one_of(st.none(), VALUES))
def test_preflight_verdict_gives_a_verdict_or_its_own_error(results, timestamp):
    try:
        decision = pf.preflight_verdict(results, required=["spec"], node="n", timestamp=timestamp)
    except AnsibleFilterError:
        return
    assert isinstance(decision["passed"], bool) and decision["metrics"].endswith("\n")
    for result in decision["results"]:
        assert all(isinstance(reason, str) for reason in result["reasons"])


@given(VALUES, st.lists(VALUES, max_size=3))
def test_preflight_gate_and_summary(pods, rows):
    try:
        gate = pf.preflight_kubernetes_gate({"metadata": {"name": "n"}, "status": {}}, pods=pods)
        assert gate["status"] in ("pass", "fail")
    except AnsibleFilterError:
        pass
    assert len(pf.preflight_summary(rows).splitlines()) == len(rows) + 2


@given(st.dictionaries(st.text(max_size=4), VALUES, max_size=4), st.lists(st.text(max_size=4), max_size=4))
def test_preflight_summary_from_any_hostvars(hostvars, hosts):
    summary = pf.preflight_summary(hostvars, hosts)
    assert len(summary["rows"]) == len(hosts) and len(summary["table"].splitlines()) == len(hosts) + 2


OUTCOME_VALUES = st.one_of(VALUES, st.sampled_from(["joined", "cordoned", "error", "unreachable", "not_run"]))


@given(st.dictionaries(st.text(max_size=4), st.one_of(VALUES, st.fixed_dictionaries({"preflight_outcome": OUTCOME_VALUES})),
                       max_size=4),
       st.one_of(st.lists(st.text(max_size=4), max_size=4), VALUES), st.one_of(VALUES, st.integers(-5, 105)))
def test_preflight_run_budget_from_any_hostvars(hostvars, hosts, percent):
    try:
        budget = pf.preflight_run_budget(hostvars, hosts, percent, "onboard_max_fail_percentage")
    except AnsibleFilterError as exc:
        assert "Fix:" in str(exc)
        return
    assert set(budget["failed"]) <= set(str(host) for host in hosts)
    assert set(budget["unjudged"]) <= set(budget["failed"])
    assert budget["end_failed"] == (bool(budget["unjudged"]) or budget["spent"])
    assert (budget["end_message"] != "") == budget["end_failed"]


@given(st.dictionaries(st.sampled_from(["gpu_health", "dcgm_diag", "gpu_bandwidth"]), VALUES, max_size=3))
def test_preflight_verdict_from_any_checks(checks):
    try:
        decision = pf.preflight_verdict([{"gate": "hardware", "checks": checks, "duration_s": 1}], required=["hardware"],
                                        timestamp=1)
    except AnsibleFilterError:
        return
    assert decision["gates"]["hardware"] in ("pass", "fail", "skip")
    assert decision["outcome"] in ("joined", "cordoned", "left_cordoned")
