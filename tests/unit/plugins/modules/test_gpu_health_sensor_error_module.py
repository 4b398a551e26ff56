# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_health module: the sensor_error option (issue 28, item 3) on a real table with a fan reading ERR!
(tests/fixtures/nvidia/table_err_fan_rtx4000ada_exporter393.txt, utkuozdemir/nvidia_gpu_exporter#393)."""
import json

import pytest
from ansible.module_utils.testing import patch_module_args

import testlib

from ansible_collections.gpu_native.fleet.plugins.modules import gpu_health

TABLE = testlib.fixture_text("nvidia", "table_err_fan_rtx4000ada_exporter393.txt")


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_health.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("policy, ready", [(None, False), ("fail", False), ("warn", True)])
def test_sensor_error_decides_what_a_fan_err_does(capsys, policy, ready):
    args = {"source": "captured", "captured": {"nvidia_smi": TABLE}, "_ansible_check_mode": True}
    if policy:
        args["sensor_error"] = policy
    result = run(capsys, args)
    assert not result.get("failed"), result.get("msg")
    assert result["gpu_ready"] is ready, result["reasons"]
    gpu14 = [g for g in result["gpus"] if g["index"] == 14][0]
    said = gpu14["notes"] if ready else gpu14["problems"]
    assert any("ERR! for fan" in line for line in said)


def test_an_unknown_sensor_error_is_refused_by_the_argument_spec(capsys):
    result = run(capsys, {"source": "captured", "captured": {"nvidia_smi": TABLE}, "sensor_error": "ignore",
                          "_ansible_check_mode": True})
    assert result["failed"] and "sensor_error" in result["msg"] and "fail, warn" in result["msg"]
