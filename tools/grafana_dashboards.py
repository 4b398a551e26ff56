# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generate the collection's Grafana dashboards (roles/gpu_readiness/files/dashboards/*.json).

Plain JSON in Grafana's classic dashboard model, which file provisioning and kube-prometheus-stack's dashboard
sidecar load (https://grafana.com/docs/grafana/latest/visualizations/dashboards/build-dashboards/
view-dashboard-json-model/). ``schemaVersion`` 39 is Grafana 11.0's; newer Grafana migrates it forward on load.
Every query reads only what the readiness agent (gpu_native_*), the preflight (gpu_native_preflight_*) or the
role's alert rules (ALERTS) write: tests/unit/tools/test_grafana_dashboards.py checks that, that every query
parses (promtool check rules) and that the files equal this script's output.

    python3 tools/grafana_dashboards.py          # rewrite the files
    python3 tools/grafana_dashboards.py --check  # exit 1 when a file differs from the output
"""
import json
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OUT_DIR = os.path.join(REPO, "roles", "gpu_readiness", "files", "dashboards")
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TAGS = ["gpu-native-fleet", "gpu"]


class _Layout(object):
    """Panels placed left to right on Grafana's 24-column grid."""

    def __init__(self):
        self.x, self.y, self.row_h, self.next_id = 0, 0, 0, 1

    def place(self, w, h):
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos


def _target(expr, legend="", ref="A", instant=False, table=False):
    target = {"datasource": DATASOURCE, "expr": expr, "refId": ref, "legendFormat": legend or "__auto",
              "range": not instant, "instant": instant}
    if table:
        target["format"] = "table"
    return target


def _panel(layout, kind, title, targets, w=6, h=6, description="", unit=None, mappings=None, thresholds=None,
           transformations=None, options=None):
    refs = "ABCDEFGH"
    for index, target in enumerate(targets):
        target["refId"] = refs[index]
    defaults = {}
    if unit:
        defaults["unit"] = unit
    if mappings:
        defaults["mappings"] = mappings
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
    panel = {"id": layout.next_id, "type": kind, "title": title, "description": description,
             "datasource": DATASOURCE, "gridPos": layout.place(w, h), "targets": targets,
             "fieldConfig": {"defaults": defaults, "overrides": []}, "options": options or {}}
    if transformations:
        panel["transformations"] = transformations
    layout.next_id += 1
    return panel


OK_BAD = [{"color": "red", "value": None}, {"color": "green", "value": 1}]
BAD_OK = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
READY_MAPPING = [{"type": "value", "options": {"0": {"text": "not ready", "color": "red"},
                                               "1": {"text": "ready", "color": "green"}}}]
PASS_MAPPING = [{"type": "value", "options": {"0": {"text": "FAIL", "color": "red"},
                                              "1": {"text": "pass", "color": "green"}}}]


def _templating(with_node):
    variables = [{"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
                  "current": {}, "hide": 0, "refresh": 1, "options": [], "regex": ""}]
    if with_node:
        variables.append({
            "name": "node", "label": "Node", "type": "query", "datasource": DATASOURCE,
            "query": {"query": "label_values(gpu_native_node_gpu_ready, node)", "refId": "node"},
            "definition": "label_values(gpu_native_node_gpu_ready, node)",
            "current": {}, "hide": 0, "refresh": 2, "includeAll": False, "multi": False, "options": [],
            "regex": "", "sort": 1})
    return {"list": variables}


def _dashboard(uid, title, description, panels, with_node=False):
    return {
        "uid": uid, "title": title, "description": description, "tags": TAGS, "editable": True,
        "schemaVersion": SCHEMA_VERSION, "version": 1, "timezone": "browser", "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "1m", "templating": _templating(with_node),
        "annotations": {"list": []}, "links": [], "panels": panels,
    }


def fleet():
    lay = _Layout()
    panels = [
        _panel(lay, "stat", "Nodes GPU ready", [_target("count(gpu_native_node_gpu_ready == 1)", instant=True)],
               description="gpu_health verdict of the readiness agent: every GPU healthy, every count agrees.",
               thresholds=[{"color": "green", "value": None}]),
        _panel(lay, "stat", "Nodes not GPU ready", [_target("count(gpu_native_node_gpu_ready == 0)", instant=True)],
               thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        _panel(lay, "stat", "Unhealthy GPUs", [_target("count(gpu_native_gpu_healthy == 0)", instant=True)],
               thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        _panel(lay, "stat", "Readiness alerts firing",
               [_target('count(ALERTS{alertname=~"GpuNative.*",alertstate="firing"})', instant=True)],
               thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        _panel(lay, "table", "GPU readiness per node (Healthy = every check passes)", [
            _target("gpu_native_node_gpu_ready", "{{node}}", instant=True, table=True)],
            w=8, h=8, mappings=READY_MAPPING, thresholds=OK_BAD),
        _panel(lay, "table", "Execution path per node", [
            _target("gpu_native_node_driver_ready", "driver {{node}}", instant=True, table=True),
            _target("gpu_native_node_toolkit_ready", "toolkit {{node}}", instant=True, table=True),
            _target("gpu_native_node_plugin_ready", "device plugin {{node}}", instant=True, table=True),
            _target("gpu_native_node_cuda_ready", "cuda {{node}}", instant=True, table=True)],
            w=16, h=8, mappings=READY_MAPPING, thresholds=OK_BAD,
            description="The four execution-path signals: driver (nvidia-smi), Container Toolkit, device plugin "
                        "counts and CUDA (cuInit).",
            transformations=[{"id": "merge", "options": {}}]),
        _panel(lay, "timeseries", "PCI GPUs against the device plugin's count", [
            _target("gpu_native_nvidia_pci_devices", "PCI {{node}}"),
            _target("gpu_native_node_nvidia_smi_devices", "nvidia-smi {{node}}"),
            _target("gpu_native_node_device_plugin_gpus", "nvidia.com/gpu {{node}}"),
            _target("gpu_native_node_device_plugin_devices", "{{resource}} {{node}}")], w=12, h=8,
            description="nvidia.com/gpu and the other device-plugin resources are read from the node object; "
                        "absent when the agent cannot reach the API server."),
        _panel(lay, "timeseries", "Validation freshness", [
            _target("time() - gpu_native_node_validation_last_success_ts_seconds", "last success {{node}}"),
            _target("time() - gpu_native_readiness_agent_last_run_ts_seconds", "agent last run {{node}}")],
            w=12, h=8, unit="s"),
        _panel(lay, "timeseries", "Xid events by action (not cleared)", [
            _target('sum by (action) (gpu_native_xid_events_in_window{cleared="false"})', "{{action}}")],
            w=12, h=8, description="Kernel-log Xid lines in the agent's window per recommended action."),
        _panel(lay, "table", "Fatal Xid alerts with the workload", [
            _target('ALERTS{alertname="GpuNativeFatalXid"}', instant=True, table=True)], w=12, h=8,
            description="GpuNativeFatalXid: node, GPU, Xid, the process from the kernel line and, with "
                        "dcgm-exporter's pod mapping, namespace/pod/container."),
    ]
    return _dashboard("gpu-native-fleet-readiness", "GPU fleet readiness",
                      "gpu_native.fleet: GPU readiness of every node, from the readiness agent and the alert rules.",
                      panels)


def node():
    lay = _Layout()
    sel = '{node=~"$node"}'
    panels = [
        _panel(lay, "stat", "GPU ready", [_target("gpu_native_node_gpu_ready" + sel, instant=True)],
               mappings=READY_MAPPING, thresholds=OK_BAD),
        _panel(lay, "stat", "GPUs on PCI", [_target("gpu_native_nvidia_pci_devices" + sel, instant=True)]),
        _panel(lay, "stat", "Agent run", [_target("gpu_native_readiness_agent_duration_seconds" + sel,
                                                  instant=True)], unit="s"),
        _panel(lay, "stat", "Agent errors", [_target("gpu_native_readiness_agent_error" + sel, instant=True)],
               thresholds=BAD_OK),
        _panel(lay, "table", "Per-GPU health", [
            _target("gpu_native_gpu_healthy" + sel, instant=True, table=True)], w=12, h=9,
            mappings=[{"type": "value", "options": {"0": {"text": "UNHEALTHY", "color": "red"},
                                                    "1": {"text": "healthy", "color": "green"}}}],
            thresholds=OK_BAD),
        _panel(lay, "table", "Pending actions", [
            _target("gpu_native_gpu_pending_action" + sel, instant=True, table=True)], w=12, h=9),
        _panel(lay, "timeseries", "Xid timeline", [
            _target("gpu_native_xid_events_in_window" + sel, "Xid {{xid}} GPU {{gpu}} ({{action}})")],
            w=24, h=8, options={"legend": {"displayMode": "table", "placement": "right"}}),
        _panel(lay, "table", "Preflight gates: last result", [
            _target("gpu_native_preflight_gate_passed" + sel, instant=True, table=True),
            _target("gpu_native_preflight_gate_skipped" + sel, instant=True, table=True)], w=12, h=8,
            mappings=PASS_MAPPING, thresholds=OK_BAD),
        _panel(lay, "bargauge", "Preflight gate durations", [
            _target("gpu_native_preflight_gate_duration_seconds" + sel, "{{gate}}", instant=True)], w=12, h=8,
            unit="s"),
        _panel(lay, "table", "Alerts on this node", [
            _target('ALERTS{alertname=~"GpuNative.*",node=~"$node"}', instant=True, table=True)], w=24, h=7),
    ]
    return _dashboard("gpu-native-node", "GPU node", "gpu_native.fleet: one node's GPUs, Xid events and preflight.",
                      panels, with_node=True)


def preflight():
    lay = _Layout()
    panels = [
        _panel(lay, "stat", "Nodes passed", [_target("count(gpu_native_preflight_passed == 1)", instant=True)],
               thresholds=[{"color": "green", "value": None}]),
        _panel(lay, "stat", "Nodes failed", [_target("count(gpu_native_preflight_passed == 0)", instant=True)],
               thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        _panel(lay, "stat", "Oldest preflight",
               [_target("max(time() - gpu_native_preflight_last_run_ts_seconds)", instant=True)], unit="s"),
        _panel(lay, "stat", "Nodes with a readiness alert",
               [_target('count(count by (node) (ALERTS{alertname=~"GpuNative.*",alertstate="firing"}))',
                        instant=True)],
               thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        _panel(lay, "table", "Node x gate (1 pass, 0 fail; a skipped gate is absent)", [
            _target("gpu_native_preflight_gate_passed", instant=True, table=True)], w=16, h=10,
            mappings=PASS_MAPPING, thresholds=OK_BAD,
            transformations=[{"id": "groupingToMatrix",
                              "options": {"columnField": "gate", "rowField": "node", "valueField": "Value"}}],
            description="The failed reasons are on the preflight report page (docs/dashboards.md)."),
        _panel(lay, "table", "Verdict per node", [
            _target("gpu_native_preflight_passed", instant=True, table=True)], w=8, h=10,
            mappings=PASS_MAPPING, thresholds=OK_BAD),
        _panel(lay, "barchart", "Failures by gate", [
            _target("count by (gate) (gpu_native_preflight_gate_passed == 0)", "{{gate}}", instant=True,
                    table=True)], w=12, h=8),
        _panel(lay, "barchart", "Readiness alerts firing by alert", [_target(
            'count by (alertname) (ALERTS{alertname=~"GpuNative.*",alertstate="firing"})', "{{alertname}}",
            instant=True, table=True)], w=12, h=8,
            description="The readiness checks the compliance playbook also reads, as alerts over the fleet."),
        _panel(lay, "timeseries", "Gate durations over the fleet", [
            _target("max by (gate) (gpu_native_preflight_gate_duration_seconds)", "{{gate}}")], w=24, h=8,
            unit="s"),
    ]
    return _dashboard("gpu-native-preflight", "GPU preflight and compliance",
                      "gpu_native.fleet: the preflight gates of every node and the readiness alerts over the fleet.",
                      panels)


DASHBOARDS = {"gpu-native-fleet-readiness.json": fleet, "gpu-native-node.json": node,
              "gpu-native-preflight.json": preflight}


def render():
    """{file name: JSON text}."""
    return dict((name, json.dumps(build(), indent=2, sort_keys=True) + "\n") for name, build in DASHBOARDS.items())


def main(argv):
    check = "--check" in argv
    stale = []
    for name, text in sorted(render().items()):
        path = os.path.join(OUT_DIR, name)
        current = open(path).read() if os.path.exists(path) else None
        if current == text:
            continue
        stale.append(name)
        if not check:
            os.makedirs(OUT_DIR, exist_ok=True)
            with open(path, "w") as handle:
                handle.write(text)
    if check and stale:
        sys.stderr.write("out of date: %s. Fix: python3 tools/grafana_dashboards.py\n" % ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
