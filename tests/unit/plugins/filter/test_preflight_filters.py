# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight filters the role and the summary play call: the verdict from gate checks, the outcome, the
summary from hostvars, node_joined."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter import cordon_decision as cordon_filters
from ansible_collections.gpu_native.fleet.plugins.filter import preflight as pf

PASS = {"status": "pass", "reasons": []}


def results(hardware_checks):
    return ([{"gate": "spec", "checks": {"spec_matrix": PASS}, "duration_s": 1},
             {"gate": "hardware", "checks": hardware_checks, "duration_s": 2}]
            + [{"gate": gate, "status": "pass", "reasons": [], "duration_s": 0}
               for gate in ("kubernetes", "cuda", "serving")])


def test_the_verdict_combines_the_hardware_checks_and_chooses_the_outcome():
    good = pf.preflight_verdict(results({"gpu_health": PASS, "dcgm_diag": {"status": "skip", "reasons": ["no dcgmi"]}}),
                                node="n", timestamp=1)
    assert good["passed"] is True and good["outcome"] == "joined" and good["gates"]["hardware"] == "pass"
    assert good["results"][1]["reasons"] == ["no dcgmi"]
    assert pf.preflight_verdict(results({"gpu_health": PASS}), owned=False, timestamp=1)["outcome"] == "left_cordoned"
    bad = pf.preflight_verdict(results({"gpu_health": PASS, "gpu_bandwidth": {"status": "error", "reasons": ["t/o"]}}),
                               timestamp=1)
    assert bad["outcome"] == "cordoned" and bad["reasons"] == ["hardware: t/o"]


def test_the_summary_from_hostvars_and_hosts():
    hostvars = {"a": {"preflight_outcome": "joined", "preflight_verdict": {"gates": {"spec": "pass"}, "reasons": []}},
                "b": {}}
    summary = pf.preflight_summary(hostvars, ["a", "b"])
    assert [row["verdict"] for row in summary["rows"]] == ["joined", "no verdict (unreachable or failed)"]
    assert summary["table"].splitlines()[2].startswith("a ")
    assert len(summary["table"].splitlines()) == 4
    with pytest.raises(AnsibleFilterError):
        pf.preflight_summary(hostvars, "a")
    assert isinstance(pf.preflight_summary([]), str)  # rows in, the table out, as before


def test_node_joined():
    node = {"metadata": {"name": "n", "labels": {"gpu-native.io/preflight": "passed"}}, "spec": {}}
    assert cordon_filters.node_joined(node) is True
    with pytest.raises(AnsibleFilterError, match="node_joined"):
        cordon_filters.node_joined(None)


def test_node_joined_reads_null_keys_as_the_defaults():
    """The upgrade role passes an unset preflight_label_key / preflight_registration_taint_key as null."""
    tainted = {"metadata": {"name": "n", "labels": {"gpu-native.io/preflight": "passed"}},
               "spec": {"taints": [{"key": "gpu-native.io/unvalidated", "effect": "NoSchedule"}]}}
    assert cordon_filters.node_joined(tainted, None, None) is False  # the default taint is checked
    assert cordon_filters.node_joined(tainted, None, "") is True  # empty still checks no taint
    other = {"metadata": {"name": "n", "labels": {"example.com/preflight": "passed"}}, "spec": {}}
    assert cordon_filters.node_joined(other, None, None) is False  # the default label, not any label
    assert cordon_filters.node_joined(other, "example.com/preflight", None) is True


def _outcomes(**outcomes):
    """hostvars whose hosts have these preflight_outcome values (None: the host never set one)."""
    return dict((host, {} if how is None else {"preflight_outcome": how}) for host, how in outcomes.items())


def test_the_run_budget_counts_failed_hosts_and_leaves_the_rest_alone_once_spent():
    hostvars = _outcomes(a="joined", b="cordoned", c=None, d=None)
    hosts = ["a", "b", "c", "d"]
    within = pf.preflight_run_budget(hostvars, hosts, 30, "onboard_max_fail_percentage")
    assert within["failed"] == ["b"] and within["spent"] is False and within["end_failed"] is False
    assert within["end_message"] == ""
    spent = pf.preflight_run_budget(hostvars, hosts, 0, "onboard_max_fail_percentage")
    assert spent["spent"] is True
    assert spent["not_run_reason"] == "not run: 1 of 4 node(s) failed (b), more than onboard_max_fail_percentage 0%"


def test_the_run_ends_failed_when_a_node_has_no_verdict_or_the_budget_was_spent():
    hostvars = _outcomes(a="error", b="not_run", c="not_run", d="unreachable", e="joined")
    hosts = ["a", "b", "c", "d", "e"]
    budget = pf.preflight_run_budget(hostvars, hosts, 25, "preflight_max_fail_percentage")
    assert budget["unjudged"] == ["a", "d"] and budget["not_run"] == ["b", "c"] and budget["end_failed"] is True
    assert budget["end_message"] == (
        "2 node(s) have no verdict: a, d (see the summary). 2 of 5 node(s) failed, more than"
        " preflight_max_fail_percentage 25%: 2 node(s) not run. Fix: make the nodes reachable, or see the failed"
        " task or the reasons in their lines, and run again.")
    # a cordoned node is a verdict: within the budget the run passes, whatever the node's gates said
    assert pf.preflight_run_budget(_outcomes(a="cordoned", b="joined"), ["a", "b"], 50)["end_failed"] is False
    # no hosts (an empty pattern): nothing failed, nothing spent
    assert pf.preflight_run_budget({}, [], 0)["end_failed"] is False


def test_the_run_budget_refuses_bad_input_with_the_fix():
    with pytest.raises(AnsibleFilterError, match=r"onboard_max_fail_percentage is 101.*Fix: set onboard_max_fail_percentage to 0-100"):
        pf.preflight_run_budget({}, ["a"], 101, "onboard_max_fail_percentage")
    with pytest.raises(AnsibleFilterError, match="not a list of host names"):
        pf.preflight_run_budget({}, "a")
    with pytest.raises(AnsibleFilterError, match="not hostvars"):
        pf.preflight_run_budget(["a"], ["a"])
