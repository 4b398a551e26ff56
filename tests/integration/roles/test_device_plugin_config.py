# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_plugin_config role against the real Kubernetes control plane (ansible-playbook on localhost).

The control plane is the shared upstream one (tests/kube_cluster.py). Each test has a Node of its own and a device
plugin namespace of its own, prepared as docs/rbac.md tells an operator to (the namespace exists, rbac/namespaced.yml
is bound in it), and the role runs with the token of the onboarding job's ServiceAccount (rbac/onboarding.yml), not
as admin.

The stand-in let the role do anything; under the onboarding job's role one collection defect showed: the role
patched the existing device plugin namespace on every run (kubernetes.core.k8s state=present), which needs a right
to change any namespace, Pod Security labels included. It now reads the namespace and creates it only when missing.
"""
import json
import secrets

import pytest
import yaml

from testlib import run_ansible_playbook

PLAY = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gpu_native.fleet.device_plugin_config
      vars: %s
"""


class Api(object):
    """This test's view of the control plane: its node, its device plugin namespace, the job's kubeconfig."""

    def __init__(self, plane, node_name, namespace, kubeconfig):
        self.plane, self.node_name, self.namespace, self.kubeconfig = plane, node_name, namespace, kubeconfig

    def node(self):
        return self.plane.api("GET", "/api/v1/nodes/" + self.node_name)

    def configmap(self):
        """The published ConfigMap, or None when there is none."""
        status, answer = self.plane.request(
            "GET", "/api/v1/namespaces/%s/configmaps/nvidia-device-plugin-configs" % self.namespace)
        assert status in (200, 404), answer
        return answer if status == 200 else None


@pytest.fixture
def api(kube_cluster, kube_job_kubeconfig):
    """A Node of this test and its device plugin namespace, prepared as docs/rbac.md says an operator does: the
    namespace exists and rbac/namespaced.yml is bound in it; the role runs as the onboarding job."""
    node_name = "gpu-node-" + secrets.token_hex(3)
    namespace = kube_cluster.create_namespace("nvidia-device-plugin-")
    kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                               "metadata": {"name": node_name, "labels": {"team": "ml"}}})
    yield Api(kube_cluster, node_name, namespace, kube_job_kubeconfig("onboarding", namespaces=(namespace,)))
    kube_cluster.request("DELETE", "/api/v1/nodes/" + node_name)
    kube_cluster.delete_namespace(namespace)


def play(tmp_path, api, role_vars, *args):
    path = tmp_path / "play.yml"
    variables = {"device_plugin_config_namespace": api.namespace}
    variables.update(role_vars)
    variables["device_plugin_config_node_classes"] = {
        (api.node_name if name == "gpu-node-1" else name): value
        for name, value in (role_vars.get("device_plugin_config_node_classes") or {}).items()}
    path.write_text(PLAY % json.dumps(variables))
    return run_ansible_playbook(str(path), api.kubeconfig, args)


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
    data = api.configmap()["data"]
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
    assert api.node()["metadata"]["labels"] == {"team": "ml", "nvidia.com/device-plugin.config": "h100-mig"}
    version = api.configmap()["metadata"]["resourceVersion"]
    second = play(tmp_path, api, role_vars)
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout
    assert api.configmap()["metadata"]["resourceVersion"] == version


def test_check_mode_writes_nothing(tmp_path, api, kube_cluster):
    result = play(tmp_path, api, {}, "--check")
    assert result.returncode == 0, result.stdout
    assert api.configmap() is None
    # a namespace that does not exist yet: the dry-run create says it would be created, the ConfigMap waits for it
    missing = "nvidia-device-plugin-" + secrets.token_hex(3)
    result = play(tmp_path, api, {"device_plugin_config_namespace": missing}, "--check")
    assert result.returncode == 0, result.stdout
    assert "changed=1" in result.stdout, result.stdout
    assert kube_cluster.request("GET", "/api/v1/namespaces/" + missing)[0] == 404


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
    assert api.configmap() is None
    assert "nvidia.com/device-plugin.config" not in api.node()["metadata"]["labels"]


def test_warns_when_packed_meets_an_old_plugin(tmp_path, api):
    old = play(tmp_path, api, {"device_plugin_config_plugin_version": "v0.17.1"})
    assert old.returncode == 0
    assert "WARNING: default asks for sharedDevicesAllocationPolicy packed, but the device plugin is v0.17.1" in old.stdout
    new = play(tmp_path, api, {"device_plugin_config_plugin_version": "v0.20.0"})
    assert new.returncode == 0 and "WARNING:" not in new.stdout
