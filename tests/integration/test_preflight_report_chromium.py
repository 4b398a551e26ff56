# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight report page (plugins/filter/preflight_report.py) in a real browser: Debian's headless Chromium
(tests/tools/setup-host.sh installs it).

- The demo fleet's page (the rows of tests/unit/plugins/filter/test_preflight_report.py: every node, every gate,
  the failed reasons) as Chromium's DOM has it, and a screenshot kept in tests/output/preflight-report/.
- The page's Content-Security-Policy as Chromium enforces it: its own style block applies (the screenshot has the
  red of a failed gate, so the style hash is right), and a script put into a page under the same policy does not run.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

import pytest

from testlib import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "unit", "plugins", "filter"))
from test_preflight_report import demo_rows  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.gpu_native.fleet.plugins.filter import preflight_report as pr  # noqa: E402

CHROMIUM = shutil.which("chromium")
OUTPUT = os.path.join(REPO_ROOT, "tests", "output", "preflight-report")
FAIL_RED = (0xc6, 0x28, 0x28)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (tests/tools/setup-host.sh installs Debian's chromium)")


def chromium(tmp_path, *args):
    # --no-sandbox: the test runs as root in a container, where Chromium's sandbox cannot start
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
           "--user-data-dir=%s" % (tmp_path / "profile")] + list(args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, header = 8, b"", None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    width, height, depth, color, _c, _f, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 3 if color == 2 else 4
    raw, stride, rows, previous = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, corner = previous[x], previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xff
            elif kind == 2:
                line[x] = (line[x] + up) & 0xff
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xff
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xff
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, channels)])
        previous = line
    return width, height, rows


def test_demo_fleet_page_in_chromium(tmp_path):
    page = tmp_path / "onboarding.html"
    page.write_text(pr.preflight_report_html(demo_rows(), title="GPU onboarding",
                                             generated="Written by tests/integration/test_preflight_report_chromium.py"))
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    for node in ("gpu-h100-01", "gpu-a40-07", "gpu-h100-02", "gpu-a100-mig-01", "gpu-lost-09"):
        assert "<td>%s</td>" % node in dom
    assert re.findall(r"<th>([a-z]+)</th>", dom)[1:6] == list(pr.GATES)
    assert "hardware: GPU 4 (0000:83:00.0): ERR! in the fan field after Xid 119" in dom
    assert "spec: driver 565.57.01 is not the fleet standard 550.127.08" in dom

    os.makedirs(OUTPUT, exist_ok=True)
    shot = os.path.join(OUTPUT, "onboarding.png")
    if os.path.exists(shot):
        os.remove(shot)
    chromium(tmp_path, "--window-size=1280,900", "--hide-scrollbars", "--screenshot=%s" % shot, page.as_uri())
    shutil.copy(str(page), os.path.join(OUTPUT, "onboarding.html"))
    width, height, rows = png_pixels(shot)
    assert (width, height) == (1280, 900)
    # the FAIL cells are red: Chromium applied the page's style block, so its CSP hash is the right one
    reddish = sum(1 for row in rows for (r, g, b) in row
                  if abs(r - FAIL_RED[0]) < 40 and abs(g - FAIL_RED[1]) < 40 and abs(b - FAIL_RED[2]) < 40)
    assert reddish > 30, "no red text in %s: the style did not apply" % shot


def test_the_pages_policy_stops_a_script_in_chromium(tmp_path):
    page = pr.preflight_report_html(demo_rows())
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="[^"]*">', page).group(0)
    probe = ("<!DOCTYPE html><html><head>%s</head><body><p id=\"p\">before</p>"
             "<script>document.getElementById('p').textContent = 'SCRIPT RAN';</script></body></html>")
    blocked = tmp_path / "blocked.html"
    blocked.write_text(probe % csp)
    assert '<p id="p">before</p>' in chromium(tmp_path, "--dump-dom", blocked.as_uri())
    # the control: without the policy, the same script runs (so the probe can tell)
    control = tmp_path / "control.html"
    control.write_text(probe % "")
    assert '<p id="p">SCRIPT RAN</p>' in chromium(tmp_path, "--dump-dom", control.as_uri())
