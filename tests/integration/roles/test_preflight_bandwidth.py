# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""preflight role, hardware gate, bandwidth part: the nvbandwidth stand-in replays real (and one derived) outputs.

One ansible-playbook run over five simulated nodes (the fixtures and stand-ins of test_preflight_role.py, the real
control plane):
bandwidth passes; one pair is low (the gate fails naming the pair); nvbandwidth is missing (a skip whose reason
stays in the gate's reasons); missing while required (a failure); a threshold override with an unknown key
(refused, naming its path).
"""
import json
import os
import sys

import pytest
import testlib

sys.path.insert(0, os.path.dirname(__file__))
from test_preflight_role import PLUGIN_POD, STANDINS, run_fleet  # noqa: E402

NVBANDWIDTH = os.path.join(STANDINS, "nvbandwidth")
FIXTURES = os.path.join(testlib.REPO_ROOT, "tests", "fixtures", "nvbandwidth")
PLAY = """
- hosts: all:!localhost
  gather_facts: false
  environment: "{{ preflight_test_env }}"
  roles:
    - role: gpu_native.fleet.preflight
  post_tasks:
    - name: Keep the verdict for the test
      ansible.builtin.copy:
        content: "{{ preflight_verdict | to_json }}"
        dest: "{{ verdict_file }}"
        mode: "0644"
"""


def bandwidth_case(output=None, **extra):
    env = {"NVBANDWIDTH_STANDIN_OUTPUT": os.path.join(FIXTURES, output)} if output else {}
    values = {"preflight_nvbandwidth": NVBANDWIDTH}
    values.update(extra)
    return env, values


CASES = {
    "bw_pass": bandwidth_case("h100x8_v0.4_d2d_read_ce.txt"),
    "bw_low": bandwidth_case("derived_h100x8_gpu1_to_gpu0_low.txt"),
    "bw_missing": bandwidth_case(preflight_nvbandwidth="/nonexistent/nvbandwidth"),
    "bw_missing_required": bandwidth_case(preflight_nvbandwidth="/nonexistent/nvbandwidth",
                                          preflight_require_bandwidth=True),
    "bw_bad_override": bandwidth_case("h100x8_v0.4_d2d_read_ce.txt", preflight_bandwidth_thresholds={
        "NVIDIA H100 80GB HBM3": {"fracton": 0.8}}),
}


@pytest.fixture(scope="module")
def fleet(kube_cluster, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bandwidth")
    libcuda = testlib.build_fake_libcuda(tmp_path_factory.mktemp("libcuda"))
    cases = {}
    for case, (env, values) in CASES.items():
        cases[case] = dict(values, env=env, verdict_file=str(folder / case / "verdict.json"))
    result, nodes = run_fleet(kube_cluster, folder, libcuda, cases, play=PLAY, runtime_class=None)
    yield result, nodes, folder
    nodes.close()


def hardware(fleet, case):
    _result, _nodes, folder = fleet
    verdict = json.loads((folder / case / "verdict.json").read_text())
    return [gate for gate in verdict["results"] if gate["gate"] == "hardware"][0], verdict


def node(fleet, case):
    return fleet[1].node(case)


def test_the_play_runs_every_node(fleet):
    assert fleet[0].returncode == 0, fleet[0].stdout[-4000:]
    assert PLUGIN_POD["spec"]["nodeName"] == "gpu-node-1"  # the shared pod template is untouched


def test_bandwidth_pass_joins_the_node(fleet):
    gate, verdict = hardware(fleet, "bw_pass")
    assert gate["status"] == "pass" and gate["reasons"] == []
    assert verdict["passed"] is True
    assert node(fleet, "bw_pass")["metadata"]["labels"]["gpu-native.io/preflight"] == "passed"


def test_low_bandwidth_fails_the_gate_naming_the_pair(fleet):
    gate, verdict = hardware(fleet, "bw_low")
    assert gate["status"] == "fail"
    assert gate["reasons"] == ["device_to_device_memcpy_read_ce GPU 1 -> GPU 0: 162.45 GB/s, below 315.00 GB/s "
                               "(70% of 450 GB/s per direction, NVIDIA H100 80GB HBM3)"]
    low = node(fleet, "bw_low")
    assert low["spec"]["unschedulable"] is True
    assert low["metadata"]["labels"]["gpu-native.io/preflight"] == "failed"
    assert "hardware: device_to_device_memcpy_read_ce GPU 1 -> GPU 0: 162.45 GB/s" in \
        low["metadata"]["annotations"]["gpu-native.io/preflight-reasons"]


def test_missing_nvbandwidth_is_a_skip_with_its_reason(fleet):
    gate, verdict = hardware(fleet, "bw_missing")
    assert gate["status"] == "pass" and verdict["passed"] is True
    assert len(gate["reasons"]) == 1
    assert gate["reasons"][0].startswith("bandwidth check skipped: nvbandwidth was not found (/nonexistent/nvbandwidth)")
    assert node(fleet, "bw_missing")["metadata"]["labels"]["gpu-native.io/preflight"] == "passed"


def test_missing_nvbandwidth_fails_when_required(fleet):
    gate, verdict = hardware(fleet, "bw_missing_required")
    assert gate["status"] == "fail" and verdict["passed"] is False
    assert gate["reasons"][0].startswith("nvbandwidth was not found (/nonexistent/nvbandwidth)")
    assert gate["reasons"][0].endswith("(the bandwidth check is required)")
    assert node(fleet, "bw_missing_required")["spec"]["unschedulable"] is True


def test_unknown_threshold_key_is_refused_naming_its_path(fleet):
    gate, _verdict = hardware(fleet, "bw_bad_override")
    assert gate["status"] == "fail"
    assert gate["reasons"] == ["thresholds['NVIDIA H100 80GB HBM3'].fracton is not a known setting. Fix: use only "
                               "min_gbps, fraction, total_gbps, source."]
    assert node(fleet, "bw_bad_override")["metadata"]["labels"]["gpu-native.io/preflight"] == "failed"
