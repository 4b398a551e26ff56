# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""People see progress on the long waits (issue 25, item 11): dcgmi diag level 2 and up runs in the background
and prints "<node>: dcgmi diag -r N: X of Y min" per poll (preflight_progress_interval seconds, default 30);
preflight_progress_interval 0 runs it as one task; check mode still runs nothing. The hardware gate's own file
(roles/preflight/tasks/gate_hardware.yml, dcgm_diag_poll.yml) on localhost, with the dcgmi stand-in sleeping
(DCGMI_STANDIN_SLEEP): no Kubernetes API needed. The serving pod's line per poll is in
test_preflight_serving_pod.py (it needs the real control plane).
"""
import json
import os
import sys
import time

import testlib

sys.path.insert(0, os.path.dirname(__file__))
from test_preflight_role import CAPTURES, DCGM_PASS, host_vars  # noqa: E402

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: The hardware gate's checks
      ansible.builtin.include_role:
        name: gpu_native.fleet.preflight
        tasks_from: gate_hardware.yml
      vars: %s

    - name: Show the diagnostic's result
      ansible.builtin.debug:
        msg: "DCGM RESULT {{ __preflight_checks.dcgm_diag.status }} {{ __preflight_checks.dcgm_diag.reasons | default([]) }}"
"""


def run(tmp_path, check=False, sleep="2", **extra):
    values = host_vars(tmp_path, "/nonexistent/libcuda.so.1", "progress", **extra)
    values.pop("preflight_test_env")
    for key in ("ansible_connection", "ansible_python_interpreter"):
        values.pop(key)
    values.update({"__preflight_active_blocked": "", "preflight_bandwidth": False})
    (tmp_path / "dcgm.json").write_text(DCGM_PASS)
    record = tmp_path / "dcgmi-calls.txt"
    env = {"NVIDIA_SMI_STANDIN_CAPTURE": os.path.join(CAPTURES, "h100x8-healthy"),
           "DCGMI_STANDIN_OUTPUT": str(tmp_path / "dcgm.json"), "DCGMI_STANDIN_RECORD": str(record),
           "DCGMI_STANDIN_SLEEP": sleep}
    (tmp_path / "play.yml").write_text(PLAY % json.dumps(values))
    args = ["-e", "ansible_python_interpreter=" + sys.executable] + (["--check"] if check else [])
    result = testlib.run_ansible_playbook(str(tmp_path / "play.yml"), None, args, extra_env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]
    calls = record.read_text().splitlines() if record.exists() else []
    return result.stdout, calls


def progress_lines(out, level):
    return [line for line in out.splitlines() if "gpu-progress: dcgmi diag -r %d: " % level in line]


def test_a_long_diagnostic_prints_a_line_per_poll(tmp_path):
    out, calls = run(tmp_path, sleep="10", preflight_dcgm_level=3, preflight_progress_interval=1)
    lines = progress_lines(out, 3)
    # the stand-in sleeps 10 s: a poll at once, then one a second (plus the poll's own time) until it ends
    assert len(lines) >= 2, out[-4000:]
    assert "gpu-progress: dcgmi diag -r 3: 0 of 45 min" in lines[0], lines  # the level's timeout, 2700 s
    assert "DCGM RESULT pass" in out, out[-4000:]  # the job's result is the check result
    assert calls == ["diag -r 3 -j"], calls


def test_the_line_names_the_timeout_given(tmp_path):
    out, _calls = run(tmp_path, sleep="2", preflight_dcgm_level=2, preflight_progress_interval=1,
                      preflight_dcgm_timeout=600)
    assert "gpu-progress: dcgmi diag -r 2: 0 of 10 min" in out, out[-4000:]
    assert "DCGM RESULT pass" in out


def test_a_short_diagnostic_is_not_held_for_a_whole_interval(tmp_path):
    # default interval (30 s): the polls come after 1 s, then as long as the job has run, so a diagnostic of 3 s
    # is seen within seconds, not after the first 30 s wait
    started = time.monotonic()
    out, calls = run(tmp_path, sleep="3", preflight_dcgm_level=2)
    assert time.monotonic() - started < 28, out[-4000:]
    assert "DCGM RESULT pass" in out and calls == ["diag -r 2 -j"]
    assert 1 <= len(progress_lines(out, 2)) <= 4, progress_lines(out, 2)
    assert "gpu-progress: dcgmi diag -r 2: 0 of 15 min" in out


def test_interval_zero_runs_the_diagnostic_as_one_task(tmp_path):
    out, calls = run(tmp_path, sleep="2", preflight_dcgm_level=3, preflight_progress_interval=0)
    assert not progress_lines(out, 3), out[-4000:]
    assert "Read the DCGM diagnostic's job" not in out
    assert "DCGM RESULT pass" in out and calls == ["diag -r 3 -j"]


def test_check_mode_still_runs_nothing_and_waits_for_nothing(tmp_path):
    out, calls = run(tmp_path, check=True, preflight_dcgm_level=3, preflight_progress_interval=1)
    assert not progress_lines(out, 3), out[-4000:]
    assert "check mode: dcgmi diag -r 3 would run" in out, out[-4000:]
    assert calls == []
