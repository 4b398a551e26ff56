# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""The NVIDIA device plugin configs the collection publishes, decided once.

roles/device_plugin_config renders every config from these functions (the
``device_plugin_configs`` filter) and the preflight's counting rule
(plugin_utils/preflight.py) reads the config of one node from the same
functions, so the config a node is counted by is the config it was given.

Settings are roles/device_plugin_config's variables without their prefix:
``mig_strategy``, ``allocation_policy``, ``device_list_strategy``,
``fail_on_init_error``, ``time_slicing_resources``,
``time_slicing_rename_by_default``; a node class overrides any of them.  The
config format is the plugin's api ``v1`` (NVIDIA/k8s-device-plugin
``api/config/v1``: ``flags.migStrategy``, ``flags.failOnInitError``,
``flags.plugin.{sharedDevicesAllocationPolicy, deviceListStrategy}``,
``sharing.timeSlicing.{renameByDefault, resources: [{name, rename, devices,
replicas}]}``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import label_value_problem

#: Keys a node class in device_plugin_config_classes may set.
CLASS_KEYS = ("mig_strategy", "allocation_policy", "device_list_strategy", "fail_on_init_error",
              "time_slicing_resources", "time_slicing_rename_by_default")
#: flags.migStrategy (api/config/v1/flags.go: MigStrategyNone, Single, Mixed).
MIG_STRATEGIES = ("none", "single", "mixed")
#: flags.plugin.sharedDevicesAllocationPolicy (v0.20.0 and newer; the plugin refuses to start on another value).
ALLOCATION_POLICIES = ("packed", "distributed")
#: flags.plugin.deviceListStrategy (api/config/v1/consts.go).
DEVICE_LIST_STRATEGIES = ("volume-mounts", "envvar", "cdi-cri", "cdi-annotations")
#: Keys of one sharing.timeSlicing.resources entry (api/config/v1/replicas.go: ReplicatedResource).
RESOURCE_KEYS = ("name", "rename", "devices", "replicas")
#: The label the plugin's config-manager selects a node's config by (the Helm chart's default).
NODE_LABEL = "nvidia.com/device-plugin.config"
#: Bounds on what one run renders: the configs share one ConfigMap (1 MiB), and a class list is typed by people.
MAX_CONFIGS = 256
MAX_RESOURCES = 64
MAX_REPLICAS = 1024

_RESOURCE_NAME = re.compile(r"^[a-z0-9.-]+/[a-z0-9.-]+$")
_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


class DevicePluginConfigError(FleetError, ValueError):
    """Settings from which no valid device plugin config can be rendered; the text names the setting and the fix."""


def _show(value):
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def _bool(value):
    """True/False for a boolean or its text (AWX surveys pass strings); None when it is neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return _BOOL_WORDS.get(str(value).strip().lower())
    return None


def _replicas(value):
    """The replica count as an int, or None when it is not a whole number from 1 to MAX_REPLICAS."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.match(r"^\s*[0-9]{1,6}\s*$", value):
        number = int(value)
    else:
        return None
    return number if 1 <= number <= MAX_REPLICAS else None


def _devices(value):
    """``devices`` of a replicated resource: "all", a count, or a list of GPU indexes, UUIDs or MIG UUIDs."""
    if value == "all":
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, list) and 0 < len(value) <= 1024 and all(
            (isinstance(item, int) and not isinstance(item, bool) and item >= 0)
            or (isinstance(item, str) and 0 < len(item) <= 128 and re.match(r"^[A-Za-z0-9:.-]+$", item))
            for item in value):
        return value
    return None


def node_classes_settings(base, classes, default_name="default"):
    """``({config name: settings}, [problem])``: the default config's settings and each class's, merged over them.

    ``base`` holds the role-wide settings; ``classes`` maps a config name to the
    settings it overrides.  Unknown keys and classes that are not mappings are
    problems (named by their path); the merged settings are not validated here.
    """
    problems = []
    if not isinstance(base, dict):
        raise DevicePluginConfigError("the device plugin settings are not a mapping. Fix: give them as a mapping of %s."
                                      % ", ".join(CLASS_KEYS))
    if classes in (None, ""):
        classes = {}
    if not isinstance(classes, dict):
        raise DevicePluginConfigError("device_plugin_config_classes is %s, not a mapping. Fix: give it as {config name: "
                                      "{setting: value}}." % type(classes).__name__)
    if len(classes) >= MAX_CONFIGS:
        raise DevicePluginConfigError("device_plugin_config_classes has %d configs, more than the %d one ConfigMap "
                                      "holds here. Fix: group nodes into fewer classes." % (len(classes), MAX_CONFIGS - 1))
    name = str(default_name or "default")
    merged = {name: dict((key, base.get(key)) for key in CLASS_KEYS if key in base)}
    for class_name in sorted(classes, key=str):
        overrides = classes[class_name]
        if not isinstance(overrides, dict):
            problems.append("device_plugin_config_classes.%s: not a mapping. Fix: give the class as a mapping of %s."
                            % (class_name, ", ".join(CLASS_KEYS)))
            continue
        unknown = sorted(str(key) for key in overrides if key not in CLASS_KEYS)
        if unknown:
            problems.append("device_plugin_config_classes.%s: unknown keys %s. Fix: use only %s."
                            % (class_name, ", ".join(unknown), ", ".join(CLASS_KEYS)))
            continue
        settings = dict(merged[name])
        settings.update(overrides)
        merged[str(class_name)] = settings
    return merged, problems


def config_problems(name, settings):
    """What is wrong with one config's merged settings, as ``["Device plugin config <name>: ...", ...]``."""
    where = "Device plugin config %s" % name
    found = []
    problem = label_value_problem(name) if isinstance(name, str) else "is not a string"
    if not name or problem:
        found.append("%s: the config name is not a label value: %s (it is the value of the %s node label). Fix: "
                     "use letters, digits, '-', '_' and '.', at most 63." % (where, problem or "it is empty", NODE_LABEL))
    value = settings.get("mig_strategy", "none")
    if value not in MIG_STRATEGIES:
        found.append("%s: migStrategy %s must be none, single or mixed. Fix: set mig_strategy to one of them." % (where, _show(value)))
    if "allocation_policy" in settings and settings["allocation_policy"] not in ALLOCATION_POLICIES:
        found.append("%s: sharedDevicesAllocationPolicy %s must be packed or distributed (the plugin refuses to start "
                     "on any other value). Fix: set allocation_policy to one of them." % (where, _show(settings["allocation_policy"])))
    if "device_list_strategy" in settings and settings["device_list_strategy"] not in DEVICE_LIST_STRATEGIES:
        found.append("%s: deviceListStrategy %s must be one of %s. Fix: set device_list_strategy to one of them."
                     % (where, _show(settings["device_list_strategy"]), ", ".join(DEVICE_LIST_STRATEGIES)))
    for key, field in (("fail_on_init_error", "failOnInitError"), ("time_slicing_rename_by_default", "renameByDefault")):
        if settings.get(key) is not None and _bool(settings[key]) is None:
            found.append("%s: %s %s must be a boolean. Fix: set %s to true or false." % (where, field, _show(settings[key]), key))
    resources = settings.get("time_slicing_resources")
    if resources in (None, ""):
        return found
    if not isinstance(resources, list):
        found.append("%s: the time-slicing resources %s are not a list. Fix: list them as [{name: nvidia.com/gpu, "
                     "replicas: 4}]." % (where, _show(resources)))
        return found
    if len(resources) > MAX_RESOURCES:
        found.append("%s: %d time-slicing resources, more than %d. Fix: list fewer." % (where, len(resources), MAX_RESOURCES))
        return found
    for position, resource in enumerate(resources):
        path = "%s: time-slicing resource %d" % (where, position)
        if not isinstance(resource, dict):
            found.append("%s is %s, not a mapping. Fix: write it as {name: nvidia.com/gpu, replicas: 4}." % (path, _show(resource)))
            continue
        unknown = sorted(str(key) for key in resource if key not in RESOURCE_KEYS)
        if unknown:
            found.append("%s: unknown keys %s. Fix: use only %s." % (path, ", ".join(unknown), ", ".join(RESOURCE_KEYS)))
        for key in ("name", "rename"):
            if key in resource and not (isinstance(resource[key], str) and _RESOURCE_NAME.match(resource[key])):
                found.append("%s: %s %s is not a resource name. Fix: each time-slicing resource needs a name such as "
                             "nvidia.com/gpu." % (path, key, _show(resource[key])))
        if "name" not in resource:
            found.append("%s has no name. Fix: each time-slicing resource needs a name such as nvidia.com/gpu." % path)
        if _replicas(resource.get("replicas")) is None:
            found.append("%s: replicas %s is not a count. Fix: each time-slicing resource needs replicas >= 1 (at most %d)."
                         % (path, _show(resource.get("replicas", "missing")), MAX_REPLICAS))
        if "devices" in resource and _devices(resource["devices"]) is None:
            found.append("%s: devices %s is not valid. Fix: give \"all\", a count, or a list of GPU indexes or UUIDs."
                         % (path, _show(resource["devices"])))
    return found


def to_config(settings):
    """The api v1 config (a dict) for one config's merged, valid settings; only the settings given appear."""
    flags = {"migStrategy": settings.get("mig_strategy") or "none"}
    if settings.get("fail_on_init_error") is not None:
        flags["failOnInitError"] = _bool(settings["fail_on_init_error"])
    plugin = {}
    if settings.get("allocation_policy") is not None:
        plugin["sharedDevicesAllocationPolicy"] = settings["allocation_policy"]
    if settings.get("device_list_strategy") is not None:
        plugin["deviceListStrategy"] = settings["device_list_strategy"]
    if plugin:
        flags["plugin"] = plugin
    config = {"version": "v1", "flags": flags}
    resources = settings.get("time_slicing_resources") or []
    if resources:
        entries = []
        for resource in resources:
            entry = {"name": resource["name"]}
            if resource.get("rename"):
                entry["rename"] = resource["rename"]
            entry["replicas"] = _replicas(resource["replicas"])
            if "devices" in resource:
                entry["devices"] = resource["devices"]
            entries.append(entry)
        config["sharing"] = {"timeSlicing": {"renameByDefault": bool(_bool(settings.get("time_slicing_rename_by_default"))),
                                             "resources": entries}}
    return config


def render(config):
    """The config as the YAML text the plugin reads (keys in the plugin's own order; every scalar is safe bare)."""
    def scalar(value):
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, dict)):
            return json.dumps(value)
        return str(value)

    flags = config["flags"]
    lines = ["version: %s" % config["version"], "flags:", "  migStrategy: %s" % flags["migStrategy"]]
    if "failOnInitError" in flags:
        lines.append("  failOnInitError: %s" % scalar(flags["failOnInitError"]))
    if flags.get("plugin"):
        lines.append("  plugin:")
        for key in ("sharedDevicesAllocationPolicy", "deviceListStrategy"):
            if key in flags["plugin"]:
                lines.append("    %s: %s" % (key, flags["plugin"][key]))
    slicing = (config.get("sharing") or {}).get("timeSlicing")
    if slicing:
        lines += ["sharing:", "  timeSlicing:", "    renameByDefault: %s" % scalar(slicing["renameByDefault"]),
                  "    resources:"]
        for resource in slicing["resources"]:
            lines.append("      - name: %s" % resource["name"])
            for key in ("rename", "replicas", "devices"):
                if key in resource:
                    lines.append("        %s: %s" % (key, scalar(resource[key])))
    return "\n".join(lines) + "\n"


def render_all(base, classes=None, default_name="default", node_classes=None):
    """``{configs: {name: YAML text}, packed: [name], problems: [...]}``: every config, or why none can be published.

    ``packed`` names the configs asking for sharedDevicesAllocationPolicy packed (which needs plugin v0.20.0).

    ``node_classes`` ({node name: config name}) must name existing configs.
    ``configs`` is empty whenever there is a problem: nothing is published from
    settings of which a part is wrong.
    """
    merged, problems = node_classes_settings(base, classes, default_name)
    for name in sorted(merged):
        problems.extend(config_problems(name, merged[name]))
    if node_classes in (None, ""):
        node_classes = {}
    if not isinstance(node_classes, dict):
        problems.append("device_plugin_config_node_classes is %s, not a mapping. Fix: give it as {node name: config "
                        "name}." % type(node_classes).__name__)
        node_classes = {}
    for node in sorted(node_classes, key=str):
        if not (isinstance(node_classes[node], str) and node_classes[node] in merged):
            problems.append("device_plugin_config_node_classes.%s: config %s does not exist (configs: %s). Fix: add it "
                            "to device_plugin_config_classes or correct the name."
                            % (node, _show(node_classes[node]), ", ".join(sorted(merged))))
    if problems:
        return {"configs": {}, "packed": [], "problems": problems}
    return {"configs": dict((name, render(to_config(merged[name]))) for name in merged),
            "packed": sorted(name for name in merged if merged[name].get("allocation_policy") == "packed"),
            "problems": []}


def node_config(base, classes=None, default_name="default", node_classes=None, node_name=None, node_labels=None,
                label=NODE_LABEL):
    """``(config, name)``: the config of one node, as the plugin's config-manager picks it.

    The config the node's ``label`` names, else ``node_classes[node_name]``,
    else the default.  Raises DevicePluginConfigError when that config does not
    exist or its settings are invalid.
    """
    merged, problems = node_classes_settings(base, classes, default_name)
    default_name = str(default_name or "default")
    node_classes = node_classes if isinstance(node_classes, dict) else {}
    node_labels = node_labels if isinstance(node_labels, dict) else {}
    label = label if isinstance(label, str) and label else NODE_LABEL
    chosen = node_labels.get(label) or (node_classes.get(node_name) if isinstance(node_name, str) else None) or default_name
    if not (isinstance(chosen, str) and chosen in merged):
        own = [text for text in problems if text.startswith("device_plugin_config_classes.%s:" % chosen)]
        if own:
            raise DevicePluginConfigError("; ".join(own))
        raise DevicePluginConfigError(
            "the node's device plugin config %s is not one of device_plugin_config_classes (%s). Fix: define that "
            "class, or label the node with one that exists." % (_show(chosen), ", ".join(sorted(classes or {})) or "none"))
    problems = config_problems(chosen, merged[chosen])
    if problems:
        raise DevicePluginConfigError("; ".join(problems))
    return to_config(merged[chosen]), chosen
