# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_readiness PrometheusRule: every expression evaluated against a recorded metric set,
plus `promtool check rules` / `promtool test rules` when promtool is installed."""
import os
import re
import shutil
import subprocess

import pytest
import yaml

from promql_subset import Evaluator, PromQLSubsetError
from testlib import render_role_template

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROMTOOL_TESTS = os.path.join(os.path.dirname(__file__), "gpu_readiness_rules.promtool.yml")
NOW = 1_750_000_000

RECORDED_PATH = os.path.join(REPO, "tests", "fixtures", "gpu_readiness", "recorded_metrics.prom")


def recorded():
    """The recorded metric set with {now-N} placeholders filled in."""
    with open(RECORDED_PATH) as handle:
        text = "".join(line for line in handle if not line.startswith("#"))
    return re.sub(r"\{now-(\d+)\}", lambda m: str(NOW - int(m.group(1))), text)


# alert -> (label names identifying a firing series, expected identities)
EXPECTED = {
    "GpuNativeNodeGpuNotReady": (("node",), {("node-b",)}),
    "GpuNativeExecutionPathNotReady": (("__name__", "node"), {("gpu_native_node_plugin_ready", "node-b")}),
    "GpuNativeGpuUnhealthy": (("node", "gpu", "pci_bus_id"), {("node-b", "4", "0000:83:00.0")}),
    # node-b: 7 of 8 nvidia.com/gpu; node-e (time-sliced, as expected) stays quiet; node-f: 28 of 32 gpu.shared
    "GpuNativePciDevicePluginCountMismatch": (("node", "resource"), {("node-b", ""), ("node-f", "nvidia.com/gpu.shared")}),
    "GpuNativeValidationStale": (("node",), {("node-b",)}),
    "GpuNativeReadinessAgentStale": (("node",), {("node-d",)}),
    "GpuNativeFatalXid": (("node", "gpu", "xid", "uuid"),
                          {("node-b", "4", "119", "GPU-a40c0de4-0000-4000-8000-000000000004")}),
    "GpuNativeVramAlmostFull": (("Hostname", "gpu", "pod"), {("node-a", "0", "train-0")}),
    "GpuNativeGpuTooHot": (("Hostname", "gpu"), {("node-a", "0")}),
    "GpuNativeGpuIdleWithPod": (("namespace", "pod", "gpu"), {("ns1", "train-0", "0")}),
}

_SAMPLE_RE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>.*)\}\s+(?P<value>\S+)$')
_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text):
    samples = []
    for line in text.strip().splitlines():
        match = _SAMPLE_RE.match(line)
        assert match, line
        labels = dict(_LABEL_RE.findall(match.group("labels")))
        labels["__name__"] = match.group("name")
        samples.append((labels, float(match.group("value"))))
    return samples


def render_rule(**overrides):
    return render_role_template("gpu_readiness", "prometheusrule.yaml.j2", **overrides)


@pytest.fixture(scope="module")
def rules():
    document = render_rule()
    assert document["apiVersion"] == "monitoring.coreos.com/v1" and document["kind"] == "PrometheusRule"
    return dict((rule["alert"], rule) for group in document["spec"]["groups"] for rule in group["rules"])


def test_every_rule_has_an_expectation(rules):
    assert set(rules) == set(EXPECTED)


# Expressions outside the subset evaluator (group_left, topk, count by, label_replace): promtool's own engine tests
# them (gpu_readiness_rules.promtool.yml, with and without dcgm-exporter's pod mapping).
PROMTOOL_ONLY = {"GpuNativeFatalXid"}


@pytest.mark.parametrize("alert", sorted(EXPECTED))
def test_expression_on_recorded_metrics(rules, alert):
    keys, expected = EXPECTED[alert]
    if alert in PROMTOOL_ONLY:
        with pytest.raises(PromQLSubsetError):
            Evaluator(parse_samples(recorded()), NOW).evaluate(rules[alert]["expr"])
        with open(PROMTOOL_TESTS) as handle:
            assert "alertname: %s" % alert in handle.read()
        return
    result = Evaluator(parse_samples(recorded()), NOW).evaluate(rules[alert]["expr"])
    assert isinstance(result, list)
    assert set(tuple(labels.get(k, "") for k in keys) for labels, _value in result) == expected


def test_vram_is_used_over_used_plus_free(rules):
    expr = rules["GpuNativeVramAlmostFull"]["expr"]
    assert expr.replace(" ", "") == "DCGM_FI_DEV_FB_USED/(DCGM_FI_DEV_FB_USED+DCGM_FI_DEV_FB_FREE)>0.95"
    # the ratio the alert compares per GPU (not the published USED / FREE > 19 mistake)
    samples = parse_samples(recorded())
    value = Evaluator(samples, NOW).evaluate("DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)")
    ratios = dict((labels["gpu"], round(v, 3)) for labels, v in value)
    assert ratios == {"0": 0.975, "1": 0.494, "2": 0.938}


def test_durations_and_labels(rules):
    assert rules["GpuNativeNodeGpuNotReady"]["for"] == "5m"
    assert rules["GpuNativeGpuTooHot"]["for"] == "10m" and "> 85" in rules["GpuNativeGpuTooHot"]["expr"]
    assert rules["GpuNativeGpuIdleWithPod"]["for"] == "30m"
    assert "> 600" in rules["GpuNativeValidationStale"]["expr"]
    for alert in ("GpuNativeFatalXid", "GpuNativeGpuUnhealthy"):
        description = rules[alert]["annotations"]["description"]
        assert "{{ $labels.pci_bus_id }}" in description and "{{ $labels.uuid }}" in description
    assert "{{ $labels.workload }}" in rules["GpuNativeFatalXid"]["annotations"]["description"]
    assert "{{ $labels.pod }}" in rules["GpuNativeFatalXid"]["annotations"]["description"]
    assert "{{ $labels.pod }}" in rules["GpuNativeVramAlmostFull"]["annotations"]["description"]


def test_thresholds_and_selector_labels_are_configurable():
    document = render_rule(gpu_readiness_alert_vram_ratio=0.9, gpu_readiness_prometheus_rule_labels={"release": "kps"})
    assert document["metadata"]["labels"]["release"] == "kps"
    vram = [r for r in document["spec"]["groups"][0]["rules"] if r["alert"] == "GpuNativeVramAlmostFull"][0]
    assert vram["expr"].endswith("> 0.9")


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package 'prometheus'); "
                                             "the recorded-metric checks above still ran")
def test_promtool_check_and_test_rules(tmp_path):
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(render_rule()["spec"]))
    shutil.copy(PROMTOOL_TESTS, tmp_path / "tests.yml")
    check = subprocess.run([PROMTOOL, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert test.returncode == 0, test.stdout + test.stderr


def test_fatal_xid_joins_the_configured_dcgm_series_by_node_and_uuid():
    document = render_rule(gpu_readiness_alert_xid_pod_metric="DCGM_FI_DEV_GPU_UTIL")
    expr = [r for r in document["spec"]["groups"][0]["rules"] if r["alert"] == "GpuNativeFatalXid"][0]["expr"]
    assert 'DCGM_FI_DEV_GPU_UTIL{pod!=""}' in expr and "DCGM_FI_DEV_XID_ERRORS" not in expr
    assert "on(node, uuid) group_left(namespace, pod, container)" in expr
    # both spellings of dcgm-exporter's host label (Hostname in releases, hostname after commit d5e5f51)
    assert '"Hostname"' in expr and '"hostname"' in expr
    # the fallback without dcgm-exporter
    assert expr.endswith('or ignoring(namespace, pod, container) '
                         '(gpu_native_xid_events_in_window{action=~"reset_gpu|reboot_node",cleared="false"} > 0)')
