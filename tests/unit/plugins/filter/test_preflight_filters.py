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
