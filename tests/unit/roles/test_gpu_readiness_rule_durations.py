# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every `for:` of the gpu_readiness rules is a role variable (the Molecule scenario shortens them), its default is
the documented one, and the plain rules-file options are declared with the defaults the role uses."""
import os

import yaml

from test_gpu_readiness_rules import render_rule
from testlib import REPO_ROOT

ROLE = os.path.join(REPO_ROOT, "roles", "gpu_readiness")

# alert -> (role variable, default)
FOR_VARIABLES = {
    "GpuNativeNodeGpuNotReady": ("gpu_readiness_alert_not_ready_for", "5m"),
    "GpuNativeExecutionPathNotReady": ("gpu_readiness_alert_not_ready_for", "5m"),
    "GpuNativeGpuUnhealthy": ("gpu_readiness_alert_gpu_unhealthy_for", "1m"),
    "GpuNativePciDevicePluginCountMismatch": ("gpu_readiness_alert_count_mismatch_for", "5m"),
    "GpuNativeReadinessAgentStale": ("gpu_readiness_alert_agent_stale_for", "5m"),
    "GpuNativeVramAlmostFull": ("gpu_readiness_alert_vram_for", "5m"),
    "GpuNativeGpuTooHot": ("gpu_readiness_alert_temperature_for", "10m"),
    "GpuNativeGpuIdleWithPod": ("gpu_readiness_alert_idle_for", "30m"),
}


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def alerts(document):
    return dict((rule["alert"], rule) for group in document["spec"]["groups"] for rule in group["rules"])


def test_defaults_keep_the_documented_durations():
    rules = alerts(render_rule())
    assert dict((name, rule.get("for")) for name, rule in rules.items() if "for" in rule) == \
        dict((name, default) for name, (_var, default) in FOR_VARIABLES.items())


def test_every_for_follows_its_role_variable():
    variables = sorted(set(var for var, _default in FOR_VARIABLES.values()))
    overrides = dict((var, "%ds" % (index + 2)) for index, var in enumerate(variables))
    rules = alerts(render_rule(**overrides))
    for name, (var, _default) in FOR_VARIABLES.items():
        assert rules[name]["for"] == overrides[var], name


def test_new_variables_are_declared_with_the_defaults():
    defaults = load("defaults", "main.yml")
    options = load("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    names = [var for var, _default in FOR_VARIABLES.values()] + [
        "gpu_readiness_prometheus_rules_file", "gpu_readiness_prometheus_rules_host",
        "gpu_readiness_promtool", "gpu_readiness_prometheus_service"]
    for name in names:
        assert options[name]["default"] == defaults[name], name
    assert defaults["gpu_readiness_prometheus_rules_file"] == ""  # off unless asked for
