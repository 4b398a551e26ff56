"""preflight_report_html (plugins/filter/preflight_report.py): the preflight / onboarding page.

Rows as playbooks/preflight_summary.yml collects them, built from the real preflight_verdict filter for the demo
fleet's four nodes (tests/tools/demo.sh): every node, every gate, the failed reasons, durations, verdicts and labels
on the page; hostile values escaped; no script; the Content-Security-Policy's style hash matches the style block.
"""
import base64
import hashlib
import html.parser
import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter import preflight as pf
from ansible_collections.gpu_native.fleet.plugins.filter import preflight_report as pr

SKIP_REASON = "skipped on purpose: simulated GPUs (preflight_skip_gates)"


def _row(node, results, outcome):
    verdict = pf.preflight_verdict(results, node=node, timestamp=1_750_000_000)
    return {"node": node, "gates": verdict["gates"], "verdict": outcome, "reasons": verdict["reasons"],
            "results": verdict["results"], "label_key": "gpu-native.io/preflight"}


def _results(**failed):
    durations = {"spec": 0.8, "hardware": 14.2, "kubernetes": 3.4}
    out = []
    for gate in ("spec", "hardware", "kubernetes"):
        reasons = failed.get(gate)
        out.append({"gate": gate, "status": "fail" if reasons else "pass", "reasons": reasons or [],
                    "duration_s": durations[gate]})
    out += [{"gate": gate, "status": "skip", "reasons": [SKIP_REASON], "duration_s": 0} for gate in ("cuda", "serving")]
    return out


def demo_rows():
    """The demo fleet (tests/tools/demo.sh) as the onboarding run reports it."""
    return [
        _row("gpu-h100-01", _results(), "joined"),
        _row("gpu-a40-07", _results(hardware=["GPU 4 (0000:83:00.0): ERR! in the fan field after Xid 119"]),
             "cordoned"),
        _row("gpu-h100-02", _results(spec=["driver 565.57.01 is not the fleet standard 550.127.08"]), "cordoned"),
        _row("gpu-a100-mig-01", _results(), "joined"),
        {"node": "gpu-lost-09", "gates": {}, "verdict": "no verdict (unreachable or failed)", "reasons": []},
    ]


class _Page(html.parser.HTMLParser):
    def __init__(self):
        html.parser.HTMLParser.__init__(self)
        self.tags, self.text, self.style = [], [], ""
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.style += data
        else:
            self.text.append(data)


def parse(page):
    parser = _Page()
    parser.feed(page)
    return parser


def test_demo_fleet_page_has_every_node_gate_reason_duration_and_label():
    page = pr.preflight_report_html(demo_rows(), title="GPU onboarding", generated="Written 2026-12-02 06:00:00 UTC")
    text = " ".join(parse(page).text)
    for node in ("gpu-h100-01", "gpu-a40-07", "gpu-h100-02", "gpu-a100-mig-01", "gpu-lost-09"):
        assert node in text
    for gate in pr.GATES:
        assert "<th>%s</th>" % gate in page
    assert "hardware: GPU 4 (0000:83:00.0): ERR! in the fan field after Xid 119" in text
    assert "spec: driver 565.57.01 is not the fleet standard 550.127.08" in text
    assert "cuda: " + SKIP_REASON in text
    assert "14.2 s" in text and "18.4 s" in text  # a gate's duration and a node's total
    assert "passed: labelled gpu-native.io/preflight=passed, registration taint removed, uncordoned" in text
    assert "failed: labelled gpu-native.io/preflight=failed, kept cordoned with the reasons annotation" in text
    assert "5 node(s)" in text and "2 passed" in text and "2 failed" in text and "1 without a verdict" in text
    # the matrix: one row per node, each gate's cell classed by its status
    rows = re.findall(r"<tr><td>([^<]*)</td>((?:<td class=\"g s-[a-z]+\">.*?</td>){5})", page)
    assert [node for node, _cells in rows] == ["gpu-h100-01", "gpu-a40-07", "gpu-h100-02", "gpu-a100-mig-01",
                                               "gpu-lost-09"]
    a40 = dict(rows)["gpu-a40-07"]
    assert re.findall(r's-([a-z]+)">', a40) == ["pass", "fail", "pass", "skip", "skip"]
    assert re.findall(r's-([a-z]+)">', dict(rows)["gpu-lost-09"]) == ["none"] * 5


def test_no_script_and_a_csp_whose_hash_is_the_style_block():
    parsed = parse(pr.preflight_report_html(demo_rows()))
    assert not [tag for tag, _attrs in parsed.tags if tag in ("script", "img", "iframe", "object", "link", "a")]
    csp = [attrs["content"] for tag, attrs in parsed.tags
           if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy"][0]
    digest = base64.b64encode(hashlib.sha256(parsed.style.encode("utf-8")).digest()).decode()
    assert "style-src 'sha256-%s'" % digest in csp
    assert "default-src 'none'" in csp and "script-src 'none'" in csp


INJECTED = '<script>alert(1)</script><img src=x onerror=alert(2)>" onmouseover="alert(3)'


def test_hostile_values_are_escaped_everywhere():
    rows = [{"node": INJECTED, "gates": {"spec": "fail"}, "verdict": INJECTED, "label_key": INJECTED,
             "results": [{"gate": "spec", "status": "fail", "reasons": [INJECTED, "\x1b[31mred\x00"],
                          "duration_s": 1}]}]
    page = pr.preflight_report_html(rows, title=INJECTED, generated=INJECTED)
    parsed = parse(page)
    assert [tag for tag, _a in parsed.tags if tag in ("script", "img")] == []
    assert all("onmouseover" not in attrs and "onerror" not in attrs for _tag, attrs in parsed.tags)
    assert "\x1b" not in page and "\x00" not in page and "\\x1b[31mred\\x00" in page
    assert "&lt;script&gt;" in page


def test_bounds(monkeypatch):
    monkeypatch.setattr(pr, "MAX_ROWS", 40)  # the logic, not the 5000 rows' time
    long_reason = "x" * 2000
    rows = [{"node": "n%d" % i, "gates": {"spec": "fail"},
             "results": [{"gate": "spec", "status": "fail", "reasons": [long_reason] * (pr.MAX_REASONS + 5), "duration_s": 1}]}
            for i in range(pr.MAX_ROWS + 3)]
    page = pr.preflight_report_html(rows)
    assert page.count("<tr><td>n") == 2 * pr.MAX_ROWS  # matrix row + reasons row per shown node
    assert "3 more node(s) not shown" in page
    assert "x" * 301 not in page
    assert page.count("<li>") == pr.MAX_ROWS * pr.MAX_REASONS


def test_bad_rows_are_error_rows_and_a_non_list_is_refused():
    page = pr.preflight_report_html([1, None, "x", {"node": "ok", "gates": {"spec": "weird"}}])
    assert page.count('class="v-error"') == 3 and "(row 0)" in page and 's-error">error' in page
    with pytest.raises(AnsibleFilterError, match="expects the list of node rows"):
        pr.preflight_report_html({"node": "a"})


def test_durations_are_read_only_from_finite_numbers():
    rows = [{"node": "a", "results": [{"gate": "spec", "status": "pass", "duration_s": float("nan")},
                                      {"gate": "hardware", "status": "pass", "duration_s": True},
                                      {"gate": "kubernetes", "status": "pass", "duration_s": 125}]}]
    page = pr.preflight_report_html(rows)
    assert "2m05s" in page and "nan" not in page.lower().replace("nanosecond", "")
