# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`ansible localhost -m gpu_native.fleet.gpu_health` gives the expected verdicts (two fixture cases;
tests/tools/gpu-health-fixture-verdicts.py runs all of them)."""
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
SCRIPT = os.path.join(REPO, "tests", "tools", "gpu-health-fixture-verdicts.py")
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


@pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="the ansible CLI is not next to this Python")
@pytest.mark.parametrize("match, verdict", [("04 8x A40, GPU 4 ERR!", "gpu_ready=False"),
                                            ("03 8x H100 table + -q", "gpu_ready=True")])
def test_adhoc_verdict(match, verdict):
    proc = subprocess.run([sys.executable, SCRIPT, "--match", match, "--ansible", ANSIBLE],
                          capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok") and verdict in proc.stdout
