# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_health module: per-resource device-plugin counts and the Xid bucket in the result (issue #12)."""
import json
import os
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import gpu_health

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "module_utils", "gpu"))
from gpu_fixtures import text  # noqa: E402

H100_XML = "constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt"
SLICED = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_health.main()
    return json.loads(capsys.readouterr().out)


def test_time_sliced_node_is_ready(capsys):
    result = run(capsys, {"source": "captured", "_ansible_check_mode": True,
                          "captured": {"nvidia_smi_xml": text(H100_XML), "device_plugin_resources": {"nvidia.com/gpu": 32},
                                       "kernel_log": "NVRM: Xid (PCI:0000:18:00): 160, Channel Retirement Event\n"},
                          "device_plugin_config": SLICED})
    assert result["gpu_ready"] is True, result["reasons"]
    assert result["device_plugin_resources"] == [
        {"resource": "nvidia.com/gpu", "expected": 32, "actual": 32, "matches": True}]
    assert [(e["xid"], e["action"], e["bucket"]) for e in result["xid_events"]] == [(160, "ignore", "IGNORE")]


def test_bad_device_plugin_config_fails_with_its_path(capsys):
    result = run(capsys, {"source": "captured", "captured": {"nvidia_smi_xml": text(H100_XML)},
                          "device_plugin_config": {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu"}]}}}})
    assert result["failed"] is True
    assert "device_plugin_config.sharing.timeSlicing.resources[0].replicas is missing" in result["msg"]
    assert "Fix:" in result["msg"]
