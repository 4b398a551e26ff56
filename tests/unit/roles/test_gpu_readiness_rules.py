# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_readiness PrometheusRule: every expression evaluated against a recorded metric set,
plus `promtool check rules` / `promtool test rules` when promtool is installed."""
import json
import os
import re
import shutil
import subprocess

import jinja2
import pytest
import yaml

from promql_subset import Evaluator

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(REPO, "roles", "gpu_readiness")
PROMTOOL_TESTS = os.path.join(os.path.dirname(__file__), "gpu_readiness_rules.promtool.yml")
NOW = 1_750_000_000

# Recorded metric set: what the agent's textfile and dcgm-exporter/kube-state-metrics expose for four nodes.
# node-a healthy; node-b GPU 4 ERR! after Xid 119, plugin shows 7 of 8; node-c MIG (plugin counts 7 MIG
# devices on 1 GPU, plugin_ready 1); node-d agent failing.
RECORDED = """
gpu_native_node_driver_ready{node="node-a"} 1
gpu_native_node_toolkit_ready{node="node-a"} 1
gpu_native_node_plugin_ready{node="node-a"} 1
gpu_native_node_cuda_ready{node="node-a"} 1
gpu_native_node_gpu_ready{node="node-a"} 1
gpu_native_nvidia_pci_devices_total{node="node-a"} 8
gpu_native_node_device_plugin_devices_total{node="node-a"} 8
gpu_native_gpu_healthy{node="node-a",gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"} 1
gpu_native_xid_events_total{node="node-a",gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",xid="13",action="restart_app",cleared="false",workload="python"} 3
gpu_native_node_validation_last_success_ts_seconds{node="node-a"} %(now_30)d
gpu_native_readiness_agent_error{node="node-a"} 0
gpu_native_readiness_agent_last_run_ts_seconds{node="node-a"} %(now_30)d
gpu_native_node_driver_ready{node="node-b"} 1
gpu_native_node_toolkit_ready{node="node-b"} 1
gpu_native_node_plugin_ready{node="node-b"} 0
gpu_native_node_cuda_ready{node="node-b"} 1
gpu_native_node_gpu_ready{node="node-b"} 0
gpu_native_nvidia_pci_devices_total{node="node-b"} 8
gpu_native_node_device_plugin_devices_total{node="node-b"} 7
gpu_native_gpu_healthy{node="node-b",gpu="3",pci_bus_id="0000:44:00.0",uuid="GPU-a40c0de3-0000-4000-8000-000000000003"} 1
gpu_native_gpu_healthy{node="node-b",gpu="4",pci_bus_id="0000:83:00.0",uuid="GPU-a40c0de4-0000-4000-8000-000000000004"} 0
gpu_native_xid_events_total{node="node-b",gpu="4",pci_bus_id="0000:83:00.0",uuid="GPU-a40c0de4-0000-4000-8000-000000000004",xid="119",action="reset_gpu",cleared="false",workload="nvidia-smi"} 2
gpu_native_xid_events_total{node="node-b",gpu="2",pci_bus_id="0000:43:00.0",uuid="GPU-a40c0de2-0000-4000-8000-000000000002",xid="154",action="reset_gpu",cleared="true",workload=""} 2
gpu_native_node_validation_last_success_ts_seconds{node="node-b"} %(now_3600)d
gpu_native_readiness_agent_error{node="node-b"} 0
gpu_native_readiness_agent_last_run_ts_seconds{node="node-b"} %(now_30)d
gpu_native_node_driver_ready{node="node-c"} 1
gpu_native_node_toolkit_ready{node="node-c"} 1
gpu_native_node_plugin_ready{node="node-c"} 1
gpu_native_node_cuda_ready{node="node-c"} 1
gpu_native_node_gpu_ready{node="node-c"} 1
gpu_native_nvidia_pci_devices_total{node="node-c"} 1
gpu_native_node_device_plugin_devices_total{node="node-c"} 7
gpu_native_node_validation_last_success_ts_seconds{node="node-c"} %(now_30)d
gpu_native_readiness_agent_error{node="node-c"} 0
gpu_native_readiness_agent_last_run_ts_seconds{node="node-c"} %(now_30)d
gpu_native_node_driver_ready{node="node-d"} 1
gpu_native_node_toolkit_ready{node="node-d"} 1
gpu_native_node_plugin_ready{node="node-d"} 1
gpu_native_node_cuda_ready{node="node-d"} 1
gpu_native_node_gpu_ready{node="node-d"} 1
gpu_native_node_validation_last_success_ts_seconds{node="node-d"} %(now_300)d
gpu_native_readiness_agent_error{node="node-d"} 1
gpu_native_readiness_agent_last_run_ts_seconds{node="node-d"} %(now_3600)d
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",Hostname="node-a",namespace="ns1",pod="train-0"} 79000
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",Hostname="node-a",namespace="ns1",pod="train-0"} 2000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-0c0ffee1-0000-4000-8000-000000000001",Hostname="node-a",namespace="ns1",pod="busy-0"} 40000
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-0c0ffee1-0000-4000-8000-000000000001",Hostname="node-a",namespace="ns1",pod="busy-0"} 41000
DCGM_FI_DEV_FB_USED{gpu="2",UUID="GPU-0c0ffee2-0000-4000-8000-000000000002",Hostname="node-a",namespace="",pod=""} 76000
DCGM_FI_DEV_FB_FREE{gpu="2",UUID="GPU-0c0ffee2-0000-4000-8000-000000000002",Hostname="node-a",namespace="",pod=""} 5000
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",Hostname="node-a",namespace="ns1",pod="train-0"} 87
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-0c0ffee1-0000-4000-8000-000000000001",Hostname="node-a",namespace="ns1",pod="busy-0"} 70
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",Hostname="node-a",namespace="ns1",pod="train-0"} 3
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-0c0ffee1-0000-4000-8000-000000000001",Hostname="node-a",namespace="ns1",pod="busy-0"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-0c0ffee2-0000-4000-8000-000000000002",Hostname="node-a",namespace="",pod=""} 0
DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-0c0ffee3-0000-4000-8000-000000000003",Hostname="node-a",namespace="ns1",pod="done-0"} 1
kube_pod_status_phase{namespace="ns1",pod="train-0",phase="Running"} 1
kube_pod_status_phase{namespace="ns1",pod="busy-0",phase="Running"} 1
kube_pod_status_phase{namespace="ns1",pod="done-0",phase="Running"} 0
kube_pod_status_phase{namespace="ns1",pod="done-0",phase="Succeeded"} 1
""" % {"now_30": NOW - 30, "now_300": NOW - 300, "now_3600": NOW - 3600}

# alert -> (label names identifying a firing series, expected identities)
EXPECTED = {
    "GpuNativeNodeGpuNotReady": (("node",), {("node-b",)}),
    "GpuNativeExecutionPathNotReady": (("__name__", "node"), {("gpu_native_node_plugin_ready", "node-b")}),
    "GpuNativeGpuUnhealthy": (("node", "gpu", "pci_bus_id"), {("node-b", "4", "0000:83:00.0")}),
    "GpuNativePciDevicePluginCountMismatch": (("node",), {("node-b",)}),
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
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        variables = yaml.safe_load(handle)
    variables.update(overrides)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    with open(os.path.join(ROLE, "templates", "prometheusrule.yaml.j2")) as handle:
        return yaml.safe_load(env.from_string(handle.read()).render(**variables))


@pytest.fixture(scope="module")
def rules():
    document = render_rule()
    assert document["apiVersion"] == "monitoring.coreos.com/v1" and document["kind"] == "PrometheusRule"
    return dict((rule["alert"], rule) for group in document["spec"]["groups"] for rule in group["rules"])


def test_every_rule_has_an_expectation(rules):
    assert set(rules) == set(EXPECTED)


@pytest.mark.parametrize("alert", sorted(EXPECTED))
def test_expression_on_recorded_metrics(rules, alert):
    keys, expected = EXPECTED[alert]
    result = Evaluator(parse_samples(RECORDED), NOW).evaluate(rules[alert]["expr"])
    assert isinstance(result, list)
    assert set(tuple(labels.get(k, "") for k in keys) for labels, _value in result) == expected


def test_vram_is_used_over_used_plus_free(rules):
    expr = rules["GpuNativeVramAlmostFull"]["expr"]
    assert expr.replace(" ", "") == "DCGM_FI_DEV_FB_USED/(DCGM_FI_DEV_FB_USED+DCGM_FI_DEV_FB_FREE)>0.95"
    # the ratio the alert compares per GPU (not the published USED / FREE > 19 mistake)
    samples = parse_samples(RECORDED)
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
    check = subprocess.run([PROMTOOL, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr
