# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness agent's per-resource device-plugin metrics (issue #12 section 3): a time-sliced node with
renameByDefault is plugin-ready; a real shortfall is not."""
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from test_gpu_readiness_agent import agent, metrics, node  # noqa: F401  pylint: disable=unused-import

RENAMED_X4 = {"version": "v1", "flags": {"migStrategy": "none"},
              "sharing": {"timeSlicing": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}


def serve(allocatable):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server naming
            body = json.dumps({"kind": "Node", "status": {"allocatable": allocatable}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("shared, ready", [("32", 1.0), ("28", 0.0)])
def test_time_sliced_node_counts_per_resource(node, tmp_path, shared, ready):  # noqa: F811
    server = serve({"cpu": "64", "nvidia.com/gpu.shared": shared})
    try:
        token = tmp_path / "token"
        token.write_text("t\n")
        kube = {"api_url": "http://127.0.0.1:%d" % server.server_port, "token_file": str(token), "insecure": True}
        config, output = node("h100x8-healthy", kube=kube, device_plugin_config=RENAMED_X4)
        assert agent.main(["--config", config]) == 0
        found = metrics(output)
    finally:
        server.shutdown()
    assert found["gpu_native_readiness_agent_error"][0][1] == 0.0
    assert [(labels["resource"], value) for labels, value in found["gpu_native_node_device_plugin_devices"]] == [
        ("nvidia.com/gpu.shared", float(shared))]
    assert [(labels["resource"], value) for labels, value in found["gpu_native_node_device_plugin_expected_devices"]] == [
        ("nvidia.com/gpu.shared", 32.0)]
    assert found["gpu_native_node_plugin_ready"][0][1] == ready
    assert found["gpu_native_node_gpu_ready"][0][1] == ready
    assert found["gpu_native_node_device_plugin_gpus"][0][1] == 0.0  # nvidia.com/gpu itself is renamed away
