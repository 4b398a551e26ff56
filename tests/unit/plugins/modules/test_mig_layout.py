# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_layout module: main() against the nvidia-smi stand-in (8x H100) with its MIG extension."""
import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import mig_layout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
STANDIN = os.path.join(REPO, "tests", "standins", "nvidia-smi")
CAPTURE = os.path.join(REPO, "tests", "standins", "captures", "h100x8-healthy")
MUTATING = ("-cgi", "-dci", "-dgi", "-mig", "-r")
CONFIG = {"version": "v1", "mig-configs": {
    "balanced": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
                 {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False}],
    "all-1g": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
               {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False}],
    "two-7g": [{"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 2}}],
    "bogus": [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.99gb": 1}}],
}}


class Node:
    def __init__(self, tmp_path, monkeypatch):
        self.state = tmp_path / "mig-state.json"
        monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", CAPTURE)
        monkeypatch.setenv("NVIDIA_SMI_STANDIN_MIG_STATE", str(self.state))

    def run(self, capsys, select, check=False, diff=False, **extra):
        args = dict({"config": CONFIG, "select": select, "nvidia_smi": STANDIN, "_ansible_check_mode": check,
                     "_ansible_diff": diff}, **extra)
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                mig_layout.main()
        return json.loads(capsys.readouterr().out)

    def calls(self):
        path = self.state.parent / "calls.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def mutating(self):
        return [c["argv"] for c in self.calls() if any(a in MUTATING for a in c["argv"])]

    def knobs(self, **values):
        if not self.state.exists():
            os.system("%s -i 7 -mig 0 >/dev/null" % STANDIN)  # the stand-in creates its state from the capture
            (self.state.parent / "calls.log").unlink()
        data = json.loads(self.state.read_text())
        data.update(values)
        self.state.write_text(json.dumps(data))


@pytest.fixture
def node(tmp_path, monkeypatch):
    return Node(tmp_path, monkeypatch)


def test_check_mode_reports_the_plan_and_changes_nothing(node, capsys):
    result = node.run(capsys, "balanced", check=True, diff=True)
    assert result["changed"] is True and result.get("failed") is not True, result
    assert [(p["index"], p["create"], p["mode_change"]) for p in result["plan"]] == [(0, "5:0,14:4,19:6", True),
                                                                                     (1, "5:0,14:4,19:6", True)]
    assert node.mutating() == []
    before = result["diff"]["before"].splitlines()
    after = result["diff"]["after"].splitlines()
    assert before[0] == "GPU 0 (H100-80GB): MIG disabled"
    assert after[0] == "GPU 0 (H100-80GB): MIG enabled: 4g.40gb@0, 2g.20gb@4, 1g.10gb@6"
    assert before[2:] == after[2:]  # GPUs 2-7 stay as they are


def test_apply_then_idempotent_then_relayout(node, capsys):
    result = node.run(capsys, "balanced")
    assert result["changed"] is True and result["changed_gpus"] == [0, 1], result
    assert node.mutating() == [["-i", "0", "-mig", "1"], ["-i", "1", "-mig", "1"],
                               ["mig", "-i", "0", "-cgi", "5:0,14:4,19:6", "-C"],
                               ["mig", "-i", "1", "-cgi", "5:0,14:4,19:6", "-C"]]
    again = node.run(capsys, "balanced", diff=True)
    assert again["changed"] is False and again["plan"] == [] and len(node.mutating()) == 4
    assert again["diff"]["before"] == again["diff"]["after"]
    node.run(capsys, "all-1g")
    assert node.mutating()[4:] == [
        ["mig", "-i", "0", "-dci"], ["mig", "-i", "0", "-dgi"], ["mig", "-i", "1", "-dci"], ["mig", "-i", "1", "-dgi"],
        ["mig", "-i", "0", "-cgi", "19:0,19:1,19:2,19:3,19:4,19:5,19:6", "-C"],
        ["mig", "-i", "1", "-cgi", "19:0,19:1,19:2,19:3,19:4,19:5,19:6", "-C"]]


@pytest.mark.parametrize("select,message", [
    ("two-7g", "config two-7g entry 0: GPU 0 (H100-80GB, 0x233010DE): 7g.80gb: 2 requested but at most 1 fit"),
    ("bogus", "config bogus entry 0: GPU 0 (H100-80GB, 0x233010DE): profile 3g.99gb does not exist"),
])
def test_what_the_hardware_would_refuse_is_refused_before_anything_runs(node, capsys, select, message):
    result = node.run(capsys, select)
    assert result["failed"] is True and message in result["msg"] and "\n" not in result["msg"]
    assert node.mutating() == [] and result["changed"] is False


def test_a_gpu_in_use_is_refused_unless_forced(node, capsys):
    node.knobs(processes=[{"gpu": 1, "pid": 4242, "name": "python3"}])
    result = node.run(capsys, "balanced")
    assert result["failed"] is True
    assert result["msg"].startswith("GPU 1 (H100-80GB) is in use by 4242 (python3); changing it to 4g.40gb, 2g.20gb, "
                                    "1g.10gb would take the GPU from them. Fix:")
    assert node.mutating() == []
    result = node.run(capsys, "balanced", force=True)
    assert result["changed"] is True and result["changed_gpus"] == [0, 1]


def test_a_failure_half_way_names_what_changed_and_stops(node, capsys):
    assert node.run(capsys, "balanced")["changed"] is True
    node.knobs(busy=[1])
    result = node.run(capsys, "all-1g")
    assert result["failed"] is True
    assert result["msg"].startswith("nvidia-smi mig -i 1 -dci: Failed to destroy compute instances: In use by another "
                                    "client. GPUs changed before the failure: 0; not changed: 1. Fix:")
    assert result["changed_gpus"] == [0] and result["untouched_gpus"] == [1] and result["changed"] is True
    # nothing after the failing step ran: no GPU 1 -dgi and no creation anywhere
    assert node.mutating()[4:] == [["mig", "-i", "0", "-dci"], ["mig", "-i", "0", "-dgi"], ["mig", "-i", "1", "-dci"]]


def test_pending_mode_change_is_reset_or_refused(node, capsys):
    node.knobs(mode_change_needs_reset=True)
    result = node.run(capsys, "balanced", gpu_reset=False)
    assert result["failed"] is True and "pending a GPU reset and gpu_reset is false" in result["msg"]
    assert ["mig", "-i", "0", "-cgi", "5:0,14:4,19:6", "-C"] not in node.mutating()
    result = node.run(capsys, "balanced")
    assert result["changed"] is True and result["reboot_required"] is False, result
    argv = node.mutating()
    assert argv.index(["-i", "0,1", "-r"]) < argv.index(["mig", "-i", "0", "-cgi", "5:0,14:4,19:6", "-C"])


def test_mode_still_pending_after_the_reset_asks_for_a_reboot(node, capsys):
    node.knobs(busy=[0])
    result = node.run(capsys, "balanced", force=True)
    assert result.get("failed") is not True, result
    assert result["reboot_required"] is True and result["pending_gpus"] == [0]
    assert ["mig", "-i", "1", "-cgi", "5:0,14:4,19:6", "-C"] in node.mutating()
    assert not any(a[:3] == ["mig", "-i", "0"] and "-cgi" in a for a in node.mutating())


def test_mig_parted_gets_the_whole_config(node, capsys, tmp_path):
    log = tmp_path / "mig-parted.log"
    fake = tmp_path / "nvidia-mig-parted"
    fake.write_text("#!/bin/sh\necho \"$@\" >> %s\nexec %s -i 0 -mig 1\n" % (log, STANDIN))
    fake.chmod(0o755)
    path = tmp_path / "etc" / "config.yaml"
    result = node.run(capsys, "balanced", tool="mig-parted", mig_parted=str(fake), mig_parted_config_path=str(path))
    # the fake only enables MIG on GPU 0, so the module's own check after applying must fail
    assert result["failed"] is True and result["msg"].startswith("after applying, the node still drifts")
    assert log.read_text().split() == ["apply", "-f", str(path), "-c", "balanced"]
    assert json.loads(path.read_text()) == CONFIG


def test_captured_source_only_plans(node, capsys):
    result = node.run(capsys, "balanced", source="captured", captured={"nvidia_smi_xml": "<x/>"})
    assert result["failed"] is True and result["msg"].startswith("source=captured only plans")


class _Spending(object):
    """A deadline whose time runs out after ``calls`` tool calls (a tool that takes its whole timeout, faked)."""

    def __init__(self, calls):
        self.calls = calls

    def __call__(self, _seconds):
        return self

    def left(self):
        self.calls -= 1
        return 1000.0 if self.calls >= 0 else 0.0


def test_the_runs_deadline_stops_the_per_gpu_commands(node, capsys, monkeypatch):
    """Issue 27: a module that runs a tool per GPU keeps an overall deadline (timeout), not GPUs x command_timeout."""
    monkeypatch.setattr(mig_layout, "Deadline", _Spending(calls=3))
    result = node.run(capsys, "balanced", timeout=60)
    assert result["failed"] is True and "not run: the task's overall deadline passed" in result["msg"], result["msg"]
    assert "GPUs changed before the failure" in result["msg"] and "Fix:" in result["msg"]
    assert len(node.calls()) <= 3


def test_timeout_is_bounded(node, capsys):
    result = node.run(capsys, "balanced", timeout=0)
    assert result["failed"] is True and result["msg"].startswith("timeout is 0. Fix:")
    assert node.calls() == []
