# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_plugin_config role against the Kubernetes API stand-in (ansible-playbook on localhost)."""
import json
import os
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(__file__))
from standin_helpers import NotFound, api_get, run_ansible_playbook, start_k8s_standin  # noqa: E402

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"team": "ml"}}}

PLAY = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gpu_native.fleet.device_plugin_config
      vars: %s
"""


@pytest.fixture
def api(tmp_path):
    server, kubeconfig = start_k8s_standin(tmp_path, [NODE])
    server.kubeconfig = kubeconfig
    yield server
    server.stop()


def play(tmp_path, api, role_vars, *args):
    path = tmp_path / "play.yml"
    path.write_text(PLAY % json.dumps(role_vars))
    return run_ansible_playbook(str(path), api.kubeconfig, args)


def get(api, path):
    return api_get(api, path)


def configmap(api):
    return get(api, "/api/v1/namespaces/nvidia-device-plugin/configmaps/nvidia-device-plugin-configs")


def test_renders_packed_default_and_classes_then_is_idempotent(tmp_path, api):
    role_vars = {
        "device_plugin_config_classes": {
            "h100-mig": {"mig_strategy": "single", "device_list_strategy": "cdi-cri"},
            "t4-shared": {"allocation_policy": "distributed",
                          "time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 8}]},
        },
        "device_plugin_config_node_classes": {"gpu-node-1": "h100-mig"},
    }
    first = play(tmp_path, api, role_vars)
    assert first.returncode == 0, first.stdout
    data = configmap(api)["data"]
    assert sorted(data) == ["default", "h100-mig", "t4-shared"]
    default = yaml.safe_load(data["default"])
    # deviceListStrategy volume-mounts by default, to match container_toolkit's isolation settings (issue 26)
    assert default == {"version": "v1", "flags": {"migStrategy": "none", "failOnInitError": True,
                                                  "plugin": {"sharedDevicesAllocationPolicy": "packed",
                                                             "deviceListStrategy": "volume-mounts"}}}
    assert yaml.safe_load(data["h100-mig"])["flags"]["migStrategy"] == "single"
    assert yaml.safe_load(data["h100-mig"])["flags"]["plugin"]["deviceListStrategy"] == "cdi-cri"
    shared = yaml.safe_load(data["t4-shared"])
    assert shared["flags"]["plugin"]["sharedDevicesAllocationPolicy"] == "distributed"
    assert shared["sharing"] == {"timeSlicing": {"renameByDefault": False,
                                                 "resources": [{"name": "nvidia.com/gpu", "replicas": 8}]}}
    node = get(api, "/api/v1/nodes/gpu-node-1")
    assert node["metadata"]["labels"] == {"team": "ml", "nvidia.com/device-plugin.config": "h100-mig"}
    version = configmap(api)["metadata"]["resourceVersion"]
    second = play(tmp_path, api, role_vars)
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout
    assert configmap(api)["metadata"]["resourceVersion"] == version


def test_check_mode_writes_nothing(tmp_path, api):
    result = play(tmp_path, api, {}, "--check")
    assert result.returncode == 0, result.stdout
    with pytest.raises(NotFound):
        configmap(api)


@pytest.mark.parametrize("role_vars,message", [
    ({"device_plugin_config_allocation_policy": "balanced"}, "value of device_plugin_config_allocation_policy must be one of: packed, distributed"),
    ({"device_plugin_config_classes": {"a": {"allocation_policy": "spread"}}}, "sharedDevicesAllocationPolicy spread must be packed or distributed"),
    ({"device_plugin_config_classes": {"a": {"mig_strategy": "all"}}}, "migStrategy all must be none, single or mixed"),
    ({"device_plugin_config_device_list_strategy": "env"},
     "value of device_plugin_config_device_list_strategy must be one of: volume-mounts, envvar, cdi-cri, cdi-annotations"),
    ({"device_plugin_config_classes": {"a": {"device_list_strategy": "mounts"}}},
     "deviceListStrategy mounts must be one of volume-mounts, envvar, cdi-cri, cdi-annotations"),
    ({"device_plugin_config_classes": {"a": {"sharing_typo": 1}}}, "device_plugin_config_classes.a: unknown keys sharing_typo"),
    ({"device_plugin_config_time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 0}]}, "replicas >= 1"),
    ({"device_plugin_config_time_slicing_resources": [{"name": "$invalid$", "replicas": 2}]}, "needs a name such as nvidia.com/gpu"),
    ({"device_plugin_config_node_classes": {"gpu-node-1": "nope"}}, "config nope does not exist"),
])
def test_bad_settings_are_rejected_before_anything_is_published(tmp_path, api, role_vars, message):
    result = play(tmp_path, api, role_vars)
    assert result.returncode != 0
    assert message in result.stdout, result.stdout
    with pytest.raises(NotFound):
        configmap(api)
    assert "nvidia.com/device-plugin.config" not in get(api, "/api/v1/nodes/gpu-node-1")["metadata"]["labels"]


def test_warns_when_packed_meets_an_old_plugin(tmp_path, api):
    old = play(tmp_path, api, {"device_plugin_config_plugin_version": "v0.17.1"})
    assert old.returncode == 0
    assert "WARNING: default asks for sharedDevicesAllocationPolicy packed, but the device plugin is v0.17.1" in old.stdout
    new = play(tmp_path, api, {"device_plugin_config_plugin_version": "v0.20.0"})
    assert new.returncode == 0 and "WARNING:" not in new.stdout
