"""compliance_report filters against hostile node results (issue 26, item 5): a report must not turn on its reader."""
import html.parser
import xml.etree.ElementTree as ET

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter import compliance_report as cr

INJECTED = 'fail" onmouseover="alert(1)'


def _node(status, actual="x"):
    return {"__compliance_node_result": {"checks": [{"check": "spec", "status": status, "expected": "e", "actual": actual}]}}


class _Tags(html.parser.HTMLParser):
    """Every start tag with its attributes, as a browser's tokenizer sees them."""

    def __init__(self):
        html.parser.HTMLParser.__init__(self)
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(page):
    parser = _Tags()
    parser.feed(page)
    return parser.tags


@pytest.mark.parametrize("status", [INJECTED, "compliant", "PASS", "", None, 1, ["pass"]])
def test_unknown_status_is_an_error_row_never_compliant(status):
    rows = cr.compliance_rows({"a": _node(status)}, ["a"])
    spec = [row for row in rows if row["check"] == "spec"][0]
    assert spec["status"] == "error"
    if isinstance(status, str):
        assert "unknown status" in spec["actual"] and "reported: x" in spec["actual"]
    else:  # not text at all: the row is malformed (tests/unit/plugins/modules/test_hostile_inputs.py, reproducer 8)
        assert "is malformed: status is" in spec["actual"]
    summary = cr.compliance_summary(rows)
    assert summary["hosts_compliant"] == 0 and summary["hosts_failed"] == ["a"]
    assert set(summary["by_status"]) == set(cr.STATUS_ORDER)


def test_rows_given_directly_are_whitelisted_too():
    rows = [{"host": "a", "check": "spec", "status": "compliant", "expected": None, "actual": "ok"}]
    assert cr.compliance_summary(rows)["hosts_compliant"] == 0
    assert cr.host_status(rows) == {"a": "fail"}
    junit = ET.fromstring(cr.compliance_junit(rows))
    assert junit.get("errors") == "1"


def test_html_attributes_cannot_be_broken_out_of():
    rows = [{"host": 'h"><script>alert(1)</script>', "check": "spec", "status": INJECTED,
             "expected": None, "actual": '" onclick="x'}]
    page = cr.compliance_html(rows)
    tags = _tags(page)
    assert not [tag for tag, attrs in tags if tag == "script"]
    assert not [attrs for tag, attrs in tags if any(name.startswith("on") for name in attrs)]
    classes = [attrs.get("class") for tag, attrs in tags if tag == "tr" and "class" in attrs]
    assert classes == ["error"]


def test_html_has_a_restrictive_content_security_policy_and_no_script():
    rows = cr.compliance_rows({"a": _node("pass")}, ["a"])
    page = cr.compliance_html(rows)
    metas = [attrs for tag, attrs in _tags(page) if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy"]
    assert len(metas) == 1
    policy = dict((part.split()[0], part.split()[1:]) for part in metas[0]["content"].split(";") if part.strip())
    assert policy["default-src"] == ["'none'"] and policy["script-src"] == ["'none'"]
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert len(policy["style-src"]) == 1 and policy["style-src"][0].startswith("'sha256-")
    assert "unsafe" not in metas[0]["content"]
    assert "<script" not in page.lower()
    # the hash is that of the page's own <style> block, so the page keeps its colours
    style = page.split("<style>", 1)[1].split("</style>", 1)[0]
    assert cr.content_security_policy(style) == metas[0]["content"]


@pytest.mark.parametrize("bad", ["\x1b[31m", "\x07", "\x00", "\x0b\x0c", "\ud800", "\ufffe"])
def test_junit_replaces_characters_xml_does_not_allow(bad):
    rows = cr.compliance_rows({"node" + bad: _node("fail", "value " + bad)}, ["node" + bad])
    text = cr.compliance_junit(rows, suite="suite" + bad)
    root = ET.fromstring(text.encode("utf-8"))  # raised "not well-formed (invalid token)" before
    suite = root.find("testsuite")
    assert "\\x" in suite.get("name") or "\\u" in suite.get("name")
    failure = suite.find("testcase/failure")
    assert failure is not None and failure.get("message").startswith("value \\")
    page = cr.compliance_html(rows)
    assert bad not in page


def test_junit_keeps_what_xml_allows():
    rows = cr.compliance_rows({"n\u00e9ud\U0001F600": _node("fail", "tab\there\nline")}, ["n\u00e9ud\U0001F600"])
    root = ET.fromstring(cr.compliance_junit(rows).encode("utf-8"))
    assert root.find("testsuite").get("name") == "n\u00e9ud\U0001F600"
    assert root.find("testsuite/testcase/failure").get("message") == "tab\there\nline"


@pytest.mark.parametrize("name", ["compliance", "nightly-2026.12.01", "a_b"])
def test_plain_report_names_pass(name):
    assert cr.compliance_report_name(name) == name


@pytest.mark.parametrize("name", ["../escaped", "/etc/passwd", "a/b", "..", ".hidden", "", "-rf", "x" * 201,
                                  "a\x00b", "a b", None, 5])
def test_report_names_that_are_not_plain_file_names_are_refused(name):
    with pytest.raises(AnsibleFilterError) as error:
        cr.compliance_report_name(name)
    assert "is not a plain file name" in str(error.value) and "Nothing was written" in str(error.value)


def test_a_report_name_error_names_the_callers_own_variables():
    # The preflight report page uses this filter too: its fix must name preflight_report_name, not compliance's.
    with pytest.raises(AnsibleFilterError) as error:
        cr.compliance_report_name("../x", "preflight_report_name", "preflight_report_dir")
    message = str(error.value)
    assert message.startswith("preflight_report_name='../x' is not a plain file name")
    assert "set preflight_report_dir for the folder" in message and "compliance_report" not in message


def test_a_report_name_error_never_echoes_a_hostile_variable_name():
    with pytest.raises(AnsibleFilterError) as error:
        cr.compliance_report_name("../x", "<script>", None)
    assert str(error.value).startswith("compliance_report_name='../x'") and "compliance_report_dir" in str(error.value)
