"""compliance_report filters: rows, summary, JUnit and HTML from registered results."""
import xml.etree.ElementTree as ET

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter import compliance_report as cr

GOOD = {"compliant": True, "checks": [
    {"check": "spec", "status": "pass", "expected": "profile p", "actual": "1 pass"},
    {"check": "readiness", "status": "skip", "expected": None, "actual": "no readiness textfile given"}]}
BAD = {"compliant": False, "checks": [
    {"check": "spec", "status": "fail", "expected": "profile p", "actual": "sysctl.x: expected 1, got 0 <&>"}]}
HOSTVARS = {
    "a": {"__compliance_node_result": GOOD, "__compliance_mig_result": {"in_sync": True, "drift": []}},
    "b": {"__compliance_node_result": BAD, "__compliance_mig_result": {
        "in_sync": False, "drift": [{"index": 0, "message": "GPU 0: MIG mode is Disabled"}]}},
    "c": {"__compliance_node_result": {"unreachable": True, "msg": "ssh: connect refused"}},
    "d": {},
}


def test_rows_and_summary():
    rows = cr.compliance_rows(HOSTVARS, ["a", "b", "c", "d"])
    status = dict(((r["host"], r["check"]), r["status"]) for r in rows)
    assert status[("a", "spec")] == "pass" and status[("a", "mig")] == "pass"
    assert status[("b", "spec")] == "fail" and status[("b", "mig")] == "fail"
    assert status[("c", "reachability")] == "unreachable" and not [r for r in rows if r["host"] == "c"][1:]
    assert status[("d", "reachability")] == "error"
    summary = cr.compliance_summary(rows)
    assert summary["hosts_compliant"] == 1
    assert summary["hosts_failed"] == ["b", "d"]
    assert summary["hosts_unreachable"] == ["c"]
    assert summary["by_check"]["mig"] == {"fail": 1, "error": 0, "unreachable": 0, "pass": 1, "skip": 0}
    assert [i["check"] for i in summary["failing"]["b"]] == ["spec", "mig"]
    assert "MIG mode is Disabled" in summary["failing"]["b"][1]["actual"]


def test_junit_and_html_escape_and_count():
    rows = cr.compliance_rows(HOSTVARS, ["a", "b", "c"])
    root = ET.fromstring(cr.compliance_junit(rows))
    assert root.get("failures") == "3" and root.get("skipped") == "1"
    failure = [c for c in root.iter("testcase") if c.get("classname") == "b" and c.get("name") == "spec"][0][0]
    assert failure.tag == "failure" and "got 0 <&>" in failure.text and "expected: profile p" in failure.text
    html = cr.compliance_html(rows)
    assert "&lt;&amp;&gt;" in html and "<&>" not in html
    assert "<svg" in html and "3 host(s): 1 compliant, 1 failed, 1 unreachable" in html


def test_bad_input_is_refused():
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        cr.compliance_rows(HOSTVARS, "a")
    with pytest.raises(AnsibleFilterError, match="compliance_summary: input must be the list from compliance_rows"):
        cr.compliance_summary({"nope": 1})
    # one malformed row or check result is that row's error, never the report's (issue 27, reproducer 8)
    assert cr.compliance_summary([{"nope": 1}])["by_status"]["error"] == 1
    rows = cr.compliance_rows({"a": {"__compliance_node_result": {"checks": [{"x": 1}]}}}, ["a"])
    bad = [row for row in rows if row["check"] == "(malformed)"]
    assert len(bad) == 1 and bad[0]["status"] == "error" and "checks[0] is malformed" in bad[0]["actual"]


K8S_NODE = {"resources": [{"metadata": {"name": "gpu-a"}, "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "8"}}}]}


@pytest.mark.parametrize("k8s, status, actual", [
    (K8S_NODE, "pass", "allocatable nvidia.com/gpu=8"),
    ({"skipped": True, "changed": False}, "skip", "not read: neither compliance_kubeconfig nor gpu_native_kubeconfig is set, nor K8S_AUTH_HOST"),
    # k8s_info against an API that is down: failed (ignore_errors keeps the flag), no resources
    ({"failed": True, "msg": "Failed to get client due to HTTPSConnectionPool(host='10.0.0.1', port=6443)"}, "error",
     "the Kubernetes API could not be read: Failed to get client due to HTTPSConnectionPool"),
    # failed_when: false clears the flag; no resources is still an error, never a pass
    ({"failed": False, "msg": "Forbidden: nodes \"gpu-a\" is forbidden"}, "error", "Forbidden"),
    ({"resources": []}, "fail", "the API has no node gpu-a"),
    ({"resources": [{"status": {"allocatable": {"cpu": "96"}}}]}, "fail", "advertises no nvidia.com/ resource"),
], ids=["pass", "not-set", "unreachable", "refused", "no-node", "no-gpu-resource"])
def test_the_kubernetes_row_never_fails_open(k8s, status, actual):
    hostvars = {"a": {"__compliance_node_result": GOOD, "__compliance_k8s_node": k8s, "compliance_node_name": "gpu-a"}}
    rows = cr.compliance_rows(hostvars, ["a"])
    row = [r for r in rows if r["check"] == "kubernetes"]
    assert len(row) == 1 and row[0]["status"] == status and actual in row[0]["actual"], row
    verdict = cr.compliance_summary(rows)
    assert verdict["hosts_compliant"] == (1 if status in ("pass", "skip") else 0)
    if status in ("error", "fail"):
        assert [item["check"] for item in verdict["failing"]["a"]] == ["kubernetes"]


def test_a_status_the_report_does_not_know_is_not_compliant():
    rows = cr.compliance_rows({"a": {"__compliance_node_result": {"checks": [
        {"check": "spec", "status": "passed", "expected": "e", "actual": "a"}]}}}, ["a"])
    spec = [r for r in rows if r["check"] == "spec"][0]
    assert spec["status"] == "error" and "unknown status 'passed'" in spec["actual"]
    assert cr.compliance_summary(rows)["hosts_failed"] == ["a"]


def _read(allocatable):
    return {"resources": [{"metadata": {"name": "gpu-1"}, "status": {"allocatable": allocatable}}]}


@pytest.mark.parametrize("k8s_node, count", [
    (_read({"cpu": "64", "nvidia.com/gpu": "8"}), 8),
    (_read({"nvidia.com/gpu": "0"}), 0),  # a node whose device plugin found nothing: compared, and it fails
    (_read({"nvidia.com/gpu": 4}), 4),
])
def test_the_device_plugin_count_is_the_nodes_gpu_allocatable(k8s_node, count):
    assert cr.compliance_device_plugin_count(k8s_node) == count


@pytest.mark.parametrize("k8s_node", [
    {"skipped": True, "changed": False},  # no kubeconfig: the kubernetes row says so
    {"failed": True, "msg": "Connection refused"},
    {"resources": []},  # the API has no such node
    _read({"cpu": "64", "nvidia.com/mig-1g.10gb": "7"}),  # mixed MIG strategy: no nvidia.com/gpu at all
    _read({"nvidia.com/gpu": "8.5"}), _read({"nvidia.com/gpu": "1e3"}), _read({"nvidia.com/gpu": "-1"}),
    _read({"nvidia.com/gpu": "9" * 5000}), _read({"nvidia.com/gpu": "\u0668"}), _read({"nvidia.com/gpu": True}),
    _read("8"), {"resources": ["node"]}, None, "text",
])
def test_a_device_plugin_count_that_cannot_be_compared_is_absent(k8s_node):
    assert cr.compliance_device_plugin_count(k8s_node) is None
    # the role passes omit: before ansible-core 2.19 a None reached the module's int option as text
    placeholder = "__omit_place_holder__0123"
    assert cr.compliance_device_plugin_count(k8s_node, placeholder) == placeholder
