"""Every query of the collection's Grafana dashboards (roles/gpu_readiness/files/dashboards) against this scenario's
real Prometheus: each returns series for the test hosts (the healthy and the faulty node), the node dashboard's for
each node in turn ($node), and the node variable lists both nodes.

The scenario has the agent's metrics, a preflight textfile per node (converge.yml: all gates passed on the healthy
node; hardware and cuda failed, serving skipped on the faulty one) and the role's alert rules; it has no Kubernetes
API, so the agent writes no device-plugin count: the queries that read only those must return nothing (checked).
"""
import json
import os
import time
import urllib.parse

import pytest

testinfra_hosts = ["podman://gn-gpu_readiness-faulty"]  # the Prometheus host

DASHBOARD_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "gpu_readiness", "files",
                             "dashboards")
HEALTHY_NODE, FAULTY_NODE = "gpu-h100-01", "gpu-a40-07"
NODES = (HEALTHY_NODE, FAULTY_NODE)
WAIT_S = 150
# No Kubernetes API in this scenario (test_gpu_readiness.py asserts the metric absent).
NO_KUBERNETES = ("gpu_native_node_device_plugin_gpus", "gpu_native_node_device_plugin_devices")
# Queries whose series carry the node label and must have both nodes.
BOTH_NODES = {"gpu_native_node_gpu_ready", "gpu_native_node_driver_ready", "gpu_native_node_toolkit_ready",
              "gpu_native_node_plugin_ready", "gpu_native_node_cuda_ready", "gpu_native_nvidia_pci_devices",
              "gpu_native_node_nvidia_smi_devices", "time() - gpu_native_readiness_agent_last_run_ts_seconds",
              "gpu_native_preflight_gate_passed", "gpu_native_preflight_passed"}
# Node-dashboard panels with series for the faulty node only (the healthy node has no Xid, no pending action).
FAULTY_ONLY_PANELS = {"Xid timeline", "Pending actions"}
# The healthy node's validation succeeded; the faulty node's never did (no series for it).
HEALTHY_ONLY = {"time() - gpu_native_node_validation_last_success_ts_seconds"}

_GET = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"


def dashboards():
    boards = {}
    for name in sorted(os.listdir(DASHBOARD_DIR)):
        with open(os.path.join(DASHBOARD_DIR, name)) as handle:
            boards[name] = json.load(handle)
    assert len(boards) == 3, sorted(boards)
    return boards


def targets():
    """[(dashboard, panel title, expr)] of every panel target."""
    return [(name, panel["title"], target["expr"]) for name, board in dashboards().items()
            for panel in board["panels"] for target in panel["targets"]]


def api(host, path):
    result = host.run("python3 -c %s %s", _GET, "http://127.0.0.1:9090" + path)
    assert result.rc == 0, "GET %s failed: %s" % (path, result.stderr)
    body = json.loads(result.stdout)
    assert body["status"] == "success", body
    return body["data"]


def query(host, expr):
    data = api(host, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert data["resultType"] in ("vector", "scalar"), (expr, data)
    return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]


def wait_for_series(host, expr, wanted_nodes=()):
    """The query's series once it has some (and the wanted nodes), polling for the alerts' `for:` and the scrapes."""
    deadline = time.time() + WAIT_S
    while True:
        result = query(host, expr)
        nodes = set(series["metric"].get("node", "") for series in result)
        if (result and set(wanted_nodes) <= nodes) or time.time() > deadline:
            return result, nodes
        time.sleep(3)


def test_every_fleet_query_returns_series_for_the_test_hosts(host):
    checked = 0
    for board, title, expr in targets():
        if "$node" in expr:
            continue
        if any(name in expr for name in NO_KUBERNETES):
            assert query(host, expr) == [], "%s / %s: %s has series without Kubernetes" % (board, title, expr)
            continue
        wanted = NODES if expr in BOTH_NODES else (HEALTHY_NODE,) if expr in HEALTHY_ONLY else ()
        result, nodes = wait_for_series(host, expr, wanted)
        assert result, "%s / %s: %s returned no series after %ss" % (board, title, expr, WAIT_S)
        assert set(wanted) <= nodes, "%s / %s: %s has series for %s only" % (board, title, expr, sorted(nodes))
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("node", NODES)
def test_every_node_dashboard_query_returns_series_for_the_node(host, node):
    board = dashboards()["gpu-native-node.json"]
    for panel in board["panels"]:
        if node == HEALTHY_NODE and panel["title"] in FAULTY_ONLY_PANELS:
            continue
        for target in panel["targets"]:
            # Grafana sends a single-value variable as the value itself (regex-quoted in =~ matchers)
            expr = target["expr"].replace("$node", node.replace(".", "\\\\."))
            result, nodes = wait_for_series(host, expr, (node,))
            assert result, "%s: %s returned no series for %s" % (panel["title"], expr, node)
            assert nodes == {node}, "%s: %s has series for %s" % (panel["title"], expr, sorted(nodes))


def test_the_node_variable_lists_both_nodes(host):
    variable = [v for v in dashboards()["gpu-native-node.json"]["templating"]["list"] if v["name"] == "node"][0]
    metric = variable["definition"][len("label_values("):].split(",")[0]
    values = api(host, "/api/v1/label/node/values?" + urllib.parse.urlencode({"match[]": metric}))
    assert set(NODES) <= set(values), values


def test_preflight_panels_show_the_failed_gates_and_the_fatal_xid_alert(host):
    failures, _nodes = wait_for_series(host, "count by (gate) (gpu_native_preflight_gate_passed == 0)")
    assert sorted(s["metric"]["gate"] for s in failures) == ["cuda", "hardware"]
    verdicts = query(host, "gpu_native_preflight_passed")
    assert dict((s["metric"]["node"], s["value"][1]) for s in verdicts) == {HEALTHY_NODE: "1", FAULTY_NODE: "0"}
    # the fatal-Xid alert (the pod join's fallback: no dcgm-exporter here) fires for the faulty GPU
    xid, _nodes = wait_for_series(host, 'ALERTS{alertname="GpuNativeFatalXid"}', (FAULTY_NODE,))
    fatal = [s["metric"] for s in xid if (s["metric"]["xid"], s["metric"]["gpu"]) == ("119", "4")]
    assert len(fatal) == 1 and fatal[0]["node"] == FAULTY_NODE, xid
    assert "pod" not in fatal[0], fatal  # no dcgm-exporter in this scenario: the alert without a pod
