# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_readiness node agent: metrics written from the nvidia-smi stand-in, atomic write, error gauge."""
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
AGENT_PATH = os.path.join(REPO, "roles", "gpu_readiness", "files", "gpu_native_readiness_agent.py")
STANDIN = os.path.join(REPO, "tests", "standins", "nvidia-smi")
CAPTURES = os.path.join(REPO, "tests", "standins", "captures")
KERNEL_LOG = os.path.join(REPO, "tests", "fixtures", "nvidia", "constructed_kernel_log_a40_gpu4_xid119.txt")


def load_agent():
    loader = importlib.machinery.SourceFileLoader("gpu_native_readiness_agent", AGENT_PATH)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


agent = load_agent()


def metrics(path):
    samples = {}
    with open(path) as handle:
        for line in handle:
            if line.startswith("#") or not line.strip():
                continue
            match = re.match(r"^(\w+)\{(.*)\} (\S+)$", line.strip())
            assert match, line
            samples.setdefault(match.group(1), []).append((dict(re.findall(r'(\w+)="([^"]*)"', match.group(2))),
                                                           float(match.group(3))))
    return samples


@pytest.fixture
def node(tmp_path, monkeypatch):
    def configure(capture, kernel_log=os.devnull, **extra):
        monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(CAPTURES, capture))
        config = {
            "node_name": "gpu-node-1",
            "textfile_dir": str(tmp_path / "textfile"),
            "file_name": "gpu_native_readiness.prom",
            "state_dir": str(tmp_path / "state"),
            "nvidia_smi": STANDIN,
            "lspci": str(tmp_path / "no-lspci"),
            "pci_sysfs_root": str(tmp_path / "no-sysfs"),
            "kernel_log": kernel_log,
            "xid_since": "24h",
            "expected_gpus": None,
            "xid_actions": {},
            "toolkit_command": [sys.executable, "-c", "pass"],
            "cuda_library": "libcuda-does-not-exist.so.1",
            "kube": {"kubectl": str(tmp_path / "no-kubectl"), "kubeconfig": str(tmp_path / "no-kubeconfig")},
        }
        config.update(extra)
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        return str(path), str(tmp_path / "textfile" / "gpu_native_readiness.prom")
    return configure


def test_healthy_node_metrics(node):
    config, output = node("h100x8-healthy")
    assert agent.main(["--config", config]) == 0
    found = metrics(output)
    assert found["gpu_native_node_gpu_ready"] == [({"node": "gpu-node-1"}, 1.0)]
    assert found["gpu_native_node_driver_ready"][0][1] == 1.0
    assert found["gpu_native_node_toolkit_ready"][0][1] == 1.0  # the configured check command exits 0
    assert found["gpu_native_node_cuda_ready"][0][1] == 0.0     # no libcuda on a test host
    assert found["gpu_native_node_plugin_ready"][0][1] == 0.0   # no node object reachable
    assert "gpu_native_node_device_plugin_gpus" not in found  # absent, not 0
    assert "gpu_native_nvidia_pci_devices" not in found          # no lspci and no sysfs here
    assert len(found["gpu_native_gpu_healthy"]) == 8 and {v for _l, v in found["gpu_native_gpu_healthy"]} == {1.0}
    assert found["gpu_native_gpu_healthy"][0][0] == {"node": "gpu-node-1", "gpu": "0", "pci_bus_id": "0000:18:00.0",
                                                     "uuid": "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"}
    assert found["gpu_native_readiness_agent_error"][0][1] == 0.0
    assert found["gpu_native_node_validation_last_success_ts_seconds"][0][1] > 1.6e9
    with open(output) as handle:
        text = handle.read()
    for name in agent.METRICS:
        if name in found:
            assert "# HELP %s " % name in text and "# TYPE %s gauge" % name in text
    assert os.listdir(os.path.dirname(output)) == ["gpu_native_readiness.prom"]  # no temp file left


def test_faulty_node_metrics(node):
    config, output = node("a40x8-gpu4-err", kernel_log=KERNEL_LOG, expected_gpus=8)
    assert agent.main(["--config", config]) == 0
    found = metrics(output)
    assert found["gpu_native_node_gpu_ready"][0][1] == 0.0
    unhealthy = [labels for labels, value in found["gpu_native_gpu_healthy"] if value == 0]
    assert unhealthy == [{"node": "gpu-node-1", "gpu": "4", "pci_bus_id": "0000:83:00.0",
                          "uuid": "GPU-a40c0de4-0000-4000-8000-000000000004"}]
    xids = dict((labels["xid"], (labels, value)) for labels, value in found["gpu_native_xid_events_in_window"])
    assert xids["119"][1] == 2.0 and xids["119"][0]["action"] == "reset_gpu" and xids["119"][0]["cleared"] == "false"
    assert xids["119"][0]["workload"] == "nvidia-smi"
    assert xids["13"][0]["action"] == "restart_app"
    assert [l["action"] for l, _v in found["gpu_native_gpu_pending_action"] if l["gpu"] == "4"] == ["reset_gpu"]
    assert "gpu_native_node_validation_last_success_ts_seconds" not in found  # never succeeded


def test_last_success_survives_a_failing_run(node, tmp_path):
    config, output = node("h100x8-healthy")
    agent.main(["--config", config])
    first = metrics(output)["gpu_native_node_validation_last_success_ts_seconds"][0][1]
    config, output = node("a40x8-gpu4-err", kernel_log=KERNEL_LOG)
    agent.main(["--config", config])
    found = metrics(output)
    assert found["gpu_native_node_gpu_ready"][0][1] == 0.0
    assert found["gpu_native_node_validation_last_success_ts_seconds"][0][1] == first


def test_no_driver(node):
    config, output = node("no-driver")
    assert agent.main(["--config", config]) == 0
    found = metrics(output)
    assert found["gpu_native_node_driver_ready"][0][1] == 0.0
    assert found["gpu_native_node_toolkit_ready"][0][1] == 0.0
    assert found["gpu_native_node_nvidia_smi_devices"][0][1] == 0.0


def test_internal_error_writes_error_gauge_and_exits_zero(node, capsys):
    config, output = node("h100x8-healthy", kernel_log="/nonexistent/kern.log")
    assert agent.main(["--config", config]) == 0
    found = metrics(output)
    assert found["gpu_native_readiness_agent_error"] == [({"node": "gpu-node-1"}, 1.0)]
    assert "gpu_native_readiness_agent_last_run_ts_seconds" in found
    assert "gpu_native_node_gpu_ready" not in found
    assert "kernel_log /nonexistent/kern.log cannot be read" in capsys.readouterr().err


def test_unreadable_config_still_writes_metrics(tmp_path, capsys):
    out = tmp_path / "out"
    assert agent.main(["--config", str(tmp_path / "missing.json"), "--output-dir", str(out)]) == 0
    found = metrics(out / "gpu_native_readiness.prom")
    assert found["gpu_native_readiness_agent_error"][0][1] == 1.0
    assert "config" in capsys.readouterr().err


def test_label_values_are_escaped():
    metric_set = agent.MetricSet('node "a"\\b')
    metric_set.add("gpu_native_node_gpu_ready", 1)
    assert 'gpu_native_node_gpu_ready{node="node \\"a\\"\\\\b"} 1' in metric_set.render()
    with pytest.raises(KeyError):
        metric_set.add("gpu_native_undocumented_metric", 1)


class _NodeHandler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server naming
        if self.path != "/api/v1/nodes/gpu-node-1" or self.headers.get("Authorization") != "Bearer s3cret":
            self.send_response(403)
            self.end_headers()
            return
        body = json.dumps({"kind": "Node", "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "7"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_device_plugin_count_from_node_object(node, tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _NodeHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        api = "http://127.0.0.1:%d" % server.server_port
        kube = {"api_url": api, "token_file": str(token), "insecure": True}
        assert agent.device_plugin_count(kube, "gpu-node-1") == 7
        token.write_text("wrong\n")
        assert agent.device_plugin_count(kube, "gpu-node-1") is None
        token.write_text("s3cret\n")
        config, output = node("h100x8-healthy", kube=kube)
        agent.main(["--config", config])
        found = metrics(output)
        assert found["gpu_native_node_device_plugin_gpus"][0][1] == 7.0
        assert found["gpu_native_node_plugin_ready"][0][1] == 0.0  # 7 of 8
        assert found["gpu_native_node_gpu_ready"][0][1] == 0.0
    finally:
        server.shutdown()


def test_sandboxed_kubectl_gets_the_client_certificate_credential(tmp_path):
    """Sandboxed, the role sets client_certificate/client_key (systemd credential copies): kubectl gets them as flags."""
    args = tmp_path / "argv"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\nprintf "%%s\\n" "$@" > %s\n'
                       'echo \'{"status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}}}\'\n' % args)
    kubectl.chmod(0o755)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    kube = {"kubectl": str(kubectl), "kubeconfig": str(kubeconfig),
            "client_certificate": "/run/credentials/gpu-native-readiness.service/kube-client-certificate",
            "client_key": "/run/credentials/gpu-native-readiness.service/kube-client-key"}
    assert agent.device_plugin_resources(kube, "gpu-node-1") == {"nvidia.com/gpu": 8}
    assert args.read_text().split() == [
        "--kubeconfig", str(kubeconfig),
        "--client-certificate", "/run/credentials/gpu-native-readiness.service/kube-client-certificate",
        "--client-key", "/run/credentials/gpu-native-readiness.service/kube-client-key",
        "get", "node", "gpu-node-1", "-o", "json"]
    # not sandboxed (empty): kubectl uses what the kubeconfig names
    assert agent.device_plugin_resources(dict(kube, client_certificate="", client_key=""), "gpu-node-1") == {
        "nvidia.com/gpu": 8}
    assert args.read_text().split() == ["--kubeconfig", str(kubeconfig), "get", "node", "gpu-node-1", "-o", "json"]


def test_hung_nvidia_smi_is_not_ready_within_the_timeout(node, monkeypatch):
    """The agent runs nvidia-smi through the shared runner: a hang is a not-ready node, not a stuck timer."""
    config, output = node("h100x8-healthy", command_timeout=1)
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_SLEEP", "60")
    assert agent.main(["--config", config]) == 0
    found = metrics(output)
    assert found["gpu_native_node_gpu_ready"][0][1] == 0.0
    assert found["gpu_native_node_driver_ready"][0][1] == 0.0
    assert found["gpu_native_readiness_agent_error"][0][1] == 0.0  # a verdict, not an internal error
    assert found["gpu_native_readiness_agent_duration_seconds"][0][1] < 40  # generous: the stand-in sleeps 60 s


def test_probe_commands_go_through_the_runner(tmp_path):
    assert agent.run_command([str(tmp_path / "missing")])[0] == 127
    assert agent.run_command(["/bin/sleep", "5"], timeout=0.5)[0] == 124
    rc, out, _err = agent.run_command(["/bin/sh", "-c", "echo $LC_ALL"])
    assert (rc, out.strip()) == (0, "C")


def test_metric_names_follow_prometheus_conventions():
    """A name ending in _total is a counter (the agent writes only gauges); units are base units (_seconds)."""
    for name, (kind, help_text) in agent.METRICS.items():
        assert re.match(r"^gpu_native_[a-z0-9_]+$", name), name
        assert kind in ("gauge", "counter"), name
        assert name.endswith("_total") == (kind == "counter"), name
        assert not re.search(r"_(ms|milliseconds|minutes|hours|bytes_total)$", name), name
        assert help_text and "\n" not in help_text, name
