# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia-smi stand-in's MIG extension answers like the real tool (compared with real captures)."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_placement as mpl
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_plan as mplan
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_tables as mt
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_smi import parse_query_xml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
STANDIN = os.path.join(REPO, "tests", "standins", "nvidia-smi")
CAPTURE = os.path.join(REPO, "tests", "standins", "captures", "h100x8-healthy")
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "module_utils", "mig"))
from mig_fixtures import mig_tables, parse_lgip  # noqa: E402


@pytest.fixture
def smi(tmp_path):
    state = tmp_path / "mig-state.json"
    env = dict(os.environ, NVIDIA_SMI_STANDIN_CAPTURE=CAPTURE, NVIDIA_SMI_STANDIN_MIG_STATE=str(state))

    def call(*args):
        proc = subprocess.run([sys.executable, STANDIN] + list(args), env=env, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout

    call.state = state
    call.log = tmp_path / "calls.log"
    return call


def _table(text):
    return [line for line in text.splitlines() if line.startswith(("|", "+"))]


def test_lgip_and_lgipp_match_the_real_h100_captures(smi):
    assert smi("-i", "0", "-mig", "1") == (0, "Enabled MIG Mode for GPU 00000000:18:00.0\nAll done.\n")
    rc, out = smi("mig", "-i", "0", "-lgip")
    assert rc == 0 and _table(out) == _table(mig_tables("H100-80GB", "-lgip"))
    rc, out = smi("mig", "-i", "0", "-lgipp")
    assert rc == 0 and out.splitlines() == mig_tables("H100-80GB", "-lgipp").strip().splitlines()


def test_seven_1g_instances_match_the_real_lgi_and_lci(smi):
    smi("-i", "0", "-mig", "1")
    rc, out = smi("mig", "-i", "0", "-cgi", "19,19,19,19,19,19,19", "-C")
    assert rc == 0
    assert out.splitlines()[:2] == mig_tables("H100-80GB", "-cgi 19,19,19,19,19,19,19 -C").strip().splitlines()
    assert len(out.splitlines()) == 14
    assert _table(smi("mig", "-i", "0", "-lgi")[1]) == _table(mig_tables("H100-80GB", "-lgi"))
    assert _table(smi("mig", "-i", "0", "-lci")[1]) == _table(mig_tables("H100-80GB", "-lci"))
    # free counts drop in -lgip
    rc, out = smi("mig", "-i", "0", "-lgip")
    assert [r["instances_free"] for r in parse_lgip(out)] == [0, 0, 0, 0, 0, 0, 0]


def test_placements_and_refusals(smi):
    rc, out = smi("mig", "-i", "0", "-cgi", "19")
    assert (rc, out) == (6, "No MIG-enabled devices found.\n")           # MIG mode off
    smi("-i", "0", "-mig", "1")
    rc, out = smi("mig", "-i", "0", "-cgi", "5:0,14:4,19:6", "-C")
    assert rc == 0 and "GPU instance ID  2 on GPU  0 using profile MIG 4g.40gb (ID  5)" in out
    gis = mt.parse_lgi(smi("mig", "-i", "0", "-lgi")[1])
    assert [(g["profile"], g["start"]) for g in gis] == [("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]
    rc, out = smi("mig", "-i", "0", "-cgi", "9:4")                    # overlaps 2g at 4
    assert rc == 255 and out.endswith("using profile 9: Insufficient Resources\nFailed to create GPU instances: Insufficient Resources\n")
    rc, out = smi("mig", "-i", "0", "-cgi", "9:2")                    # 3g may start only at 0 or 4
    assert rc == 2 and "Invalid Argument" in out
    rc, out = smi("mig", "-i", "0", "-cgi", "1g.5gb")                 # an A100-40GB profile
    assert rc == 6 and "using profile 1g.5gb: Not Found" in out
    rc, out = smi("mig", "-i", "0", "-dgi")                           # compute instances still there
    assert rc == 255 and "In use by another client" in out
    assert smi("mig", "-i", "0", "-dci")[0] == 0
    assert smi("mig", "-i", "0", "-dgi")[0] == 0
    assert smi("mig", "-i", "0", "-lgi") == (6, "No GPU instances found: Not Found\n")
    rc, out = smi("mig", "-i", "0", "-cgi", "20,20")
    assert rc == 255 and "Insufficient Resources" in out               # one +me per GPU
    rc, out = smi("mig", "-lgi", "-lci")
    assert rc == 2 and "Invalid combination" in out


def test_pending_mode_needs_a_reset_and_busy_gpus_refuse(smi):
    smi("-i", "0", "-mig", "0")                                          # creates the state file
    state = json.loads(smi.state.read_text())
    state["mode_change_needs_reset"] = True
    smi.state.write_text(json.dumps(state))
    rc, out = smi("-i", "0", "-mig", "1")
    assert rc == 0 and out.startswith("Warning: MIG mode is in pending enable state for GPU 00000000:18:00.0")
    gpu = parse_query_xml(smi("-q", "-x")[1])["gpus"][0]
    assert (gpu["mig_mode"], gpu["mig_mode_pending"]) == ("Disabled", "Enabled")
    assert smi("mig", "-i", "0", "-lgi")[0] == 6
    assert smi("-i", "0", "-r") == (0, "GPU 00000000:18:00.0 was successfully reset.\nAll done.\n")
    gpu = parse_query_xml(smi("-q", "-x")[1])["gpus"][0]
    assert (gpu["mig_mode"], gpu["mig_mode_pending"]) == ("Enabled", "Enabled")
    state = json.loads(smi.state.read_text())
    state["busy"] = [0]
    smi.state.write_text(json.dumps(state))
    rc, out = smi("mig", "-i", "0", "-cgi", "19", "-C")
    assert rc == 255 and "In use by another client" in out
    rc, out = smi("-i", "0", "-r")
    assert rc == 255 and "currently in use by another process" in out


def test_query_xml_reflects_the_state_and_mig_config_agrees(smi):
    assert parse_query_xml(smi("-q", "-x")[1])["gpus"][0]["mig_mode"] == "Disabled"  # no state yet: the capture
    smi("-i", "0", "-mig", "1")
    smi("mig", "-i", "0", "-cgi", "9:0,9:4", "-C")
    query = parse_query_xml(smi("-q", "-x")[1])
    assert len(query["gpus"]) == 8
    assert query["gpus"][0]["mig_mode"] == "Enabled" and len(query["gpus"][0]["mig_devices"]) == 2
    assert query["gpus"][1]["mig_mode"] == "Disabled"
    document = {"version": "v1", "mig-configs": {"half": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [1, 2, 3, 4, 5, 6, 7], "mig-enabled": False}]}}
    gpus, errors = mpl.resolve_gpus([{"index": g["index"], "device_id": g["pci_device_id"]} for g in query["gpus"]])
    config = mplan.evaluate(document, gpus, select="half")["configs"]["half"]
    actual = mplan.actual_state(query["gpus"], mt.parse_lgi(smi("mig", "-lgi")[1]), mt.parse_lci(smi("mig", "-lci")[1]))
    assert mplan.compare(config, actual, gpus) == ([], [])


def test_every_call_is_logged_in_order(smi):
    smi("-i", "0", "-mig", "1")
    smi("mig", "-lgi")
    smi("-L")
    lines = [json.loads(line) for line in smi.log.read_text().splitlines()]
    assert [entry["argv"] for entry in lines] == [["-i", "0", "-mig", "1"], ["mig", "-lgi"], ["-L"]]
    assert [entry["rc"] for entry in lines] == [0, 6, None]
    assert lines[0]["time"] <= lines[1]["time"] <= lines[2]["time"]
