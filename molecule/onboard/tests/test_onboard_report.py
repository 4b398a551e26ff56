"""The onboarding run's report page (playbooks/preflight_summary.yml -> preflight_report_dir, set to .cache/demo in
molecule.yml): every node of the demo fleet, every gate, the failed reasons and the labels; rendered in Debian's
headless Chromium when installed, with a screenshot kept in tests/output/preflight-report/demo-onboarding.png."""
import html
import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PAGE = os.path.join(REPO, ".cache", "demo", "onboarding.html")
OUTPUT = os.path.join(REPO, "tests", "output", "preflight-report")
NODES = ("gpu-h100-01", "gpu-a40-07", "gpu-h100-02", "gpu-a100-mig-01")
GATES = ("spec", "hardware", "kubernetes", "cuda", "serving")


@pytest.fixture(scope="module")
def page():
    assert os.path.exists(PAGE), "converge wrote no report page at %s" % PAGE
    with open(PAGE, encoding="utf-8") as handle:
        return handle.read()


def matrix(text):
    """{node: [status class of each gate cell]} of the page's node x gate table."""
    rows = re.findall(r"<tr><td>([^<]*)</td>((?:<td class=\"g s-[a-z]+\">.*?</td>){5})", text)
    return dict((html.unescape(node), re.findall(r's-([a-z]+)">', cells)) for node, cells in rows)


def test_the_page_has_the_demo_fleet(page):
    assert "script-src 'none'" in page and "<script" not in page
    assert re.findall(r"<th>([a-z]+)</th>", page)[1:6] == list(GATES)
    cells = matrix(page)
    assert sorted(cells) == sorted(NODES)
    # The page is the last run's (the idempotence or side-effect rerun): a node the first run joined is
    # already_joined there and runs no gate; otherwise cuda and serving are skipped on purpose (preflight_skip_gates).
    for node in ("gpu-h100-01", "gpu-a100-mig-01"):
        assert cells[node] in (["pass", "pass", "pass", "skip", "skip"], ["none"] * 5), (node, cells[node])
        if cells[node] == ["none"] * 5:
            assert re.search(r"<td>%s</td>.*?already joined: nothing labelled" % re.escape(node), page, re.S), node
    assert cells["gpu-a40-07"][1] == "fail"
    assert cells["gpu-h100-02"][0] == "fail" and cells["gpu-h100-02"][1] == "pass"
    text = html.unescape(page)
    assert re.search(r"<li>hardware: [^<]*0000:83:00\.0", text)
    assert re.search(r"<li>spec: spec drift against profile h100-demo[^<]*550\.127\.08", text)
    assert "labelled gpu-native.io/preflight=failed" in text
    assert "4 node(s)" in text and "2 failed" in text


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (tests/tools/setup-host.sh)")
def test_the_page_renders_in_chromium(tmp_path):
    os.makedirs(OUTPUT, exist_ok=True)
    shot = os.path.join(OUTPUT, "demo-onboarding.png")
    base = [shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--user-data-dir=%s" % (tmp_path / "profile")]
    dom = subprocess.run(base + ["--dump-dom", "file://" + PAGE], capture_output=True, text=True, timeout=90,
                         check=True).stdout
    assert sorted(matrix(dom)) == sorted(NODES)
    subprocess.run(base + ["--window-size=1280,900", "--hide-scrollbars", "--screenshot=%s" % shot, "file://" + PAGE],
                   capture_output=True, text=True, timeout=90, check=True)
    with open(shot, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
