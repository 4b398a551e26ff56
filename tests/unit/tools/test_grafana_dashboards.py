"""The Grafana dashboards (tools/grafana_dashboards.py -> roles/gpu_readiness/files/dashboards/).

Structure Grafana's classic dashboard model needs (uid, title, schemaVersion, panels with type, gridPos, datasource
and targets, templating variables), every query parsed by Prometheus's own parser (`promtool check rules` on a
rules file made of the queries as recording rules), and every metric a query reads is one that this collection
writes: the readiness agent's METRICS, the preflight's textfile (plugin_utils/preflight.py) or ALERTS of the role's
alert rules.
"""
import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from testlib import REPO_ROOT, render_role_template

DASHBOARD_DIR = os.path.join(REPO_ROOT, "roles", "gpu_readiness", "files", "dashboards")
AGENT = os.path.join(REPO_ROOT, "roles", "gpu_readiness", "files", "gpu_native_readiness_agent.py")
PREFLIGHT = os.path.join(REPO_ROOT, "plugins", "plugin_utils", "preflight.py")
PROMTOOL = shutil.which("promtool")


def _generator():
    spec = importlib.util.spec_from_file_location("grafana_dashboards",
                                                  os.path.join(REPO_ROOT, "tools", "grafana_dashboards.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboards():
    found = {}
    for name in sorted(os.listdir(DASHBOARD_DIR)):
        with open(os.path.join(DASHBOARD_DIR, name)) as handle:
            found[name] = json.load(handle)
    return found


def queries():
    """[(dashboard file, panel title, expr)] of every panel target and query variable."""
    found = []
    for name, board in dashboards().items():
        for panel in board["panels"]:
            for target in panel["targets"]:
                found.append((name, panel["title"], target["expr"]))
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                found.append((name, "variable " + variable["name"], variable["definition"]))
    return found


def agent_metrics():
    tree = ast.parse(open(AGENT).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "METRICS":
            return set(ast.literal_eval(node.value))
    raise AssertionError("no METRICS in the agent")


def preflight_metrics():
    return set(re.findall(r"# TYPE (gpu_native_preflight_[a-z_]+) gauge", open(PREFLIGHT).read()))


def alert_names():
    document = render_role_template("gpu_readiness", "prometheusrule.yaml.j2")
    return set(rule["alert"] for group in document["spec"]["groups"] for rule in group["rules"])


# PromQL words that are not metric names
_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr):
    """The metric names a query reads (functions, keywords, label names and strings left out)."""
    if expr.startswith("label_values("):
        expr = expr[len("label_values("):].rsplit(",", 1)[0]
    text = _GROUPING.sub(" ", _MATCHERS.sub(" ", _STRING.sub(" ", expr)))
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end():].lstrip()
        if match.group(0) in _WORDS or rest.startswith("("):
            continue
        names.add(match.group(0))
    return names


def test_files_are_the_generators_output():
    assert _generator().render() == dict((name, open(os.path.join(DASHBOARD_DIR, name)).read())
                                         for name in os.listdir(DASHBOARD_DIR)), \
        "Fix: python3 tools/grafana_dashboards.py"


def test_three_dashboards_with_unique_uids():
    boards = dashboards()
    assert set(boards) == {"gpu-native-fleet-readiness.json", "gpu-native-node.json", "gpu-native-preflight.json"}
    uids = [board["uid"] for board in boards.values()]
    assert len(set(uids)) == 3 and all(re.match(r"^[a-z0-9-]{1,40}$", uid) for uid in uids)


@pytest.mark.parametrize("name", sorted(os.listdir(DASHBOARD_DIR)))
def test_dashboard_structure(name):
    board = dashboards()[name]
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["title"] and "id" not in board  # provisioning and the sidecar assign the id
    variables = dict((v["name"], v) for v in board["templating"]["list"])
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = set()
    for panel in board["panels"]:
        assert panel["type"] in ("stat", "table", "timeseries", "bargauge", "barchart"), panel["title"]
        assert panel["id"] not in ids
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(set(refs)) == len(refs)
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip()
    # every $variable a query uses is defined
    for _board, title, expr in [q for q in queries() if q[0] == name]:
        for used in re.findall(r"\$([A-Za-z_]+)", expr):
            assert used in variables, (title, used)


def test_every_metric_is_one_this_collection_writes():
    known = agent_metrics() | preflight_metrics() | {"ALERTS"}
    assert "gpu_native_gpu_healthy" in known and "gpu_native_preflight_gate_passed" in known
    used = set()
    for board, title, expr in queries():
        names = metric_names(expr)
        assert names, (board, title, expr)
        assert names <= known, "%s / %s reads %s, which nothing in the collection writes" % (
            board, title, sorted(names - known))
        used |= names
    # the alerts a query names exist in the rules
    for _board, _title, expr in queries():
        for alert in re.findall(r'alertname="([A-Za-z]+)"', expr):
            assert alert in alert_names()
    # the views: readiness, the four execution-path signals, counts, freshness, Xid, preflight gates
    for wanted in ("gpu_native_node_gpu_ready", "gpu_native_node_driver_ready", "gpu_native_node_toolkit_ready",
                   "gpu_native_node_plugin_ready", "gpu_native_node_cuda_ready", "gpu_native_nvidia_pci_devices",
                   "gpu_native_node_device_plugin_gpus", "gpu_native_node_validation_last_success_ts_seconds",
                   "gpu_native_xid_events_in_window", "gpu_native_preflight_gate_passed",
                   "gpu_native_preflight_gate_duration_seconds", "gpu_native_gpu_healthy"):
        assert wanted in used, wanted


def test_metric_names_reads_names_only():
    assert metric_names('sum by (action) (x_total{cleared="false"}) / on(node) y') == {"x_total", "y"}
    assert metric_names("label_values(gpu_native_node_gpu_ready, node)") == {"gpu_native_node_gpu_ready"}
    assert metric_names("time() - a") == {"a"}


def grafana_free(expr):
    """The query with Grafana's variables replaced by values Prometheus accepts."""
    if expr.startswith("label_values("):
        expr = expr[len("label_values("):].rsplit(",", 1)[0]
    return expr.replace("$node", ".+")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package 'prometheus')")
def test_every_query_parses_with_promtool(tmp_path):
    rules = [{"record": "gpu_native_dashboard_query:%d" % index, "expr": grafana_free(expr)}
             for index, (_board, _title, expr) in enumerate(queries())]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    check = subprocess.run([PROMTOOL, "check", "rules", "queries.yml"], cwd=tmp_path, capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: %d rules found" % len(rules) in check.stdout


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package 'prometheus')")
def test_promtool_refuses_a_broken_query(tmp_path):
    """The parse check above can fail: a query with a missing parenthesis is refused."""
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(
        {"groups": [{"name": "d", "rules": [{"record": "x:y", "expr": "sum by (node (gpu_native_node_gpu_ready)"}]}]}))
    check = subprocess.run([PROMTOOL, "check", "rules", "bad.yml"], cwd=tmp_path, capture_output=True,
                           text=True, check=False)
    assert check.returncode != 0
