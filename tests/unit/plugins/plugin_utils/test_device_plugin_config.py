"""The device plugin configs, decided once: what roles/device_plugin_config publishes is what the preflight counts by."""
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter.device_plugin_config import device_plugin_configs
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import device_plugin_config as dpc
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight

# The role's defaults (roles/device_plugin_config/defaults/main.yml), without their prefix.
ROLE_BASE = {"mig_strategy": "none", "allocation_policy": "packed", "device_list_strategy": "volume-mounts",
             "fail_on_init_error": True, "time_slicing_resources": [], "time_slicing_rename_by_default": False}

# What the role's Jinja template rendered for the same settings before it was replaced (captured with
# ansible-playbook from roles/device_plugin_config/templates/config.yaml.j2): a ConfigMap an earlier release
# published must read as unchanged, or every node's plugin restarts on the upgrade.
TEMPLATE_DEFAULT = """version: v1
flags:
  migStrategy: none
  failOnInitError: true
  plugin:
    sharedDevicesAllocationPolicy: packed
    deviceListStrategy: volume-mounts
"""
TEMPLATE_SHARED = """version: v1
flags:
  migStrategy: mixed
  failOnInitError: false
  plugin:
    sharedDevicesAllocationPolicy: distributed
    deviceListStrategy: cdi-cri
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
      - name: nvidia.com/gpu
        replicas: 8
      - name: nvidia.com/mig-1g.10gb
        replicas: 2
        devices: [0, 1]
"""
SHARED = {"mig_strategy": "mixed", "allocation_policy": "distributed", "device_list_strategy": "cdi-cri",
          "fail_on_init_error": "false", "time_slicing_rename_by_default": True,
          "time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 8},
                                     {"name": "nvidia.com/mig-1g.10gb", "replicas": "2", "devices": [0, 1]}]}


def test_text_is_byte_for_byte_what_the_template_published():
    result = dpc.render_all(ROLE_BASE, {"shared": SHARED})
    assert result["problems"] == []
    assert result["configs"] == {"default": TEMPLATE_DEFAULT, "shared": TEMPLATE_SHARED}
    assert result["packed"] == ["default"]


def test_a_class_overrides_only_what_it_names():
    result = dpc.render_all(ROLE_BASE, {"h100-mig": {"mig_strategy": "single"}})
    config = yaml.safe_load(result["configs"]["h100-mig"])
    assert config["flags"] == {"migStrategy": "single", "failOnInitError": True,
                               "plugin": {"sharedDevicesAllocationPolicy": "packed", "deviceListStrategy": "volume-mounts"}}
    assert result["packed"] == ["default", "h100-mig"]


def test_rename_is_rendered_where_the_plugin_reads_it():
    resources = [{"name": "nvidia.com/gpu", "rename": "nvidia.com/gpu.half", "replicas": 2}]
    text = dpc.render_all(dict(ROLE_BASE, time_slicing_resources=resources))["configs"]["default"]
    assert yaml.safe_load(text)["sharing"]["timeSlicing"]["resources"] == resources


@pytest.mark.parametrize("classes,node_classes,fragments", [
    ({"a": {"allocation_policy": "spread"}}, {}, ["config a: sharedDevicesAllocationPolicy spread must be packed or "
                                                  "distributed", "Fix: set allocation_policy"]),
    ({"a": {"mig_strategy": "all"}}, {}, ["config a: migStrategy all must be none, single or mixed"]),
    ({"a": {"device_list_strategy": "mounts"}}, {},
     ["deviceListStrategy mounts must be one of volume-mounts, envvar, cdi-cri, cdi-annotations"]),
    ({"a": {"sharing_typo": 1}}, {}, ["device_plugin_config_classes.a: unknown keys sharing_typo. Fix: use only"]),
    ({"a": "single"}, {}, ["device_plugin_config_classes.a: not a mapping"]),
    ({"a": {"fail_on_init_error": "maybe"}}, {}, ["failOnInitError maybe must be a boolean"]),
    ({"a": {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 0}]}}, {}, ["replicas >= 1"]),
    ({"a": {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": True}]}}, {}, ["replicas >= 1"]),
    ({"a": {"time_slicing_resources": [{"name": "$invalid$", "replicas": 2}]}}, {}, ["a name such as nvidia.com/gpu"]),
    ({"a": {"time_slicing_resources": [{"replicas": 2}]}}, {}, ["has no name"]),
    ({"a": {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 2, "shares": 1}]}}, {},
     ["time-slicing resource 0: unknown keys shares"]),
    ({"a": {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 2, "devices": "some"}]}}, {},
     ["devices some is not valid"]),
    ({"a": {"time_slicing_resources": "nvidia.com/gpu"}}, {}, ["are not a list"]),
    ({"a b": {}}, {}, ["config a b: the config name is not a label value"]),
    ({}, {"gpu-node-1": "nope"}, ["device_plugin_config_node_classes.gpu-node-1: config nope does not exist "
                                  "(configs: default)"]),
])
def test_bad_settings_publish_nothing_and_say_why(classes, node_classes, fragments):
    result = dpc.render_all(ROLE_BASE, classes, "default", node_classes)
    assert result["configs"] == {} and result["packed"] == []
    text = " ".join(result["problems"])
    for fragment in fragments:
        assert fragment in text
    assert all("Fix:" in problem for problem in result["problems"])


def test_every_problem_is_reported_at_once():
    result = dpc.render_all(dict(ROLE_BASE, mig_strategy="both"), {"a": {"allocation_policy": "spread"}},
                            node_classes={"n": "gone"})
    assert len(result["problems"]) == 4  # default and a inherit migStrategy both; a's policy; the missing class


@pytest.mark.parametrize("settings", [None, [], "mixed"])
def test_settings_that_are_no_mapping_are_refused(settings):
    with pytest.raises(dpc.DevicePluginConfigError, match="not a mapping"):
        dpc.render_all(settings)
    with pytest.raises(AnsibleFilterError, match="device_plugin_configs: .*Fix:"):
        device_plugin_configs(settings)


def test_too_many_classes_are_refused_before_any_work():
    classes = dict(("c%d" % number, {}) for number in range(dpc.MAX_CONFIGS))
    with pytest.raises(dpc.DevicePluginConfigError, match="Fix: group nodes into fewer classes"):
        dpc.render_all(ROLE_BASE, classes)


@pytest.mark.parametrize("labels,node_classes,expected", [
    ({"nvidia.com/device-plugin.config": "shared"}, {"gpu-1": "h100-mig"}, "shared"),  # the label wins
    ({}, {"gpu-1": "h100-mig"}, "h100-mig"),
    ({}, {}, "default"),
])
def test_node_config_picks_as_the_config_manager_does(labels, node_classes, expected):
    config, name = dpc.node_config(ROLE_BASE, {"shared": SHARED, "h100-mig": {"mig_strategy": "single"}}, "default",
                                   node_classes, "gpu-1", labels)
    assert name == expected
    text = dpc.render_all(ROLE_BASE, {"shared": SHARED, "h100-mig": {"mig_strategy": "single"}})["configs"][expected]
    assert config == yaml.safe_load(text)


def test_the_preflight_counts_by_the_config_the_role_published():
    classes = {"t4-shared": {"time_slicing_resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
                             "time_slicing_rename_by_default": True}}
    published = yaml.safe_load(dpc.render_all(ROLE_BASE, classes)["configs"]["t4-shared"])
    settings = {"mig_strategy": "none", "classes": classes, "node_classes": {"gpu-1": "t4-shared"}}
    config, name = preflight.device_plugin_config(settings, "gpu-1", {})
    assert name == "t4-shared"
    assert config["flags"]["migStrategy"] == published["flags"]["migStrategy"]
    assert config["sharing"] == published["sharing"]
    gpus = [{"index": number, "mig_enabled": False} for number in range(2)]
    assert preflight.expected_allocatable(gpus, 2, settings, None, "gpu-1", {})["expected"] == {"nvidia.com/gpu.shared": 8}


def test_the_preflight_refuses_a_class_the_role_would_refuse():
    settings = {"mig_strategy": "none", "classes": {"a": {"allocation_policy": "spread"}}, "node_classes": {"gpu-1": "a"}}
    with pytest.raises(preflight.PreflightError, match="sharedDevicesAllocationPolicy spread must be packed"):
        preflight.device_plugin_config(settings, "gpu-1", {})
    with pytest.raises(preflight.PreflightError, match="unknown keys typo"):
        preflight.device_plugin_config(dict(settings, classes={"a": {"typo": 1}}), "gpu-1", {})
