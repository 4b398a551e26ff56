"""The agent's metrics through a real node_exporter and a real Prometheus (Debian's packages).

Each GPU host runs prometheus-node-exporter with the textfile collector on the agent's folder; the faulty host also runs
prometheus, scraping both every 2s and evaluating the role's rules (the plain rules file converge wrote there).
"""
import json
import re
import time

import pytest

testinfra_hosts = ["podman://gn-gpu_readiness-healthy", "podman://gn-gpu_readiness-faulty"]

METRICS = "/var/lib/prometheus/node-exporter/gpu_native_readiness.prom"
RULES = "/etc/prometheus/rules/gpu_native_readiness.yml"
PROMETHEUS = "gn-gpu_readiness-faulty"  # also a GPU host: Prometheus needs no container of its own
HEALTHY_NODE, FAULTY_NODE = "gpu-h100-01", "gpu-a40-07"
FAULTY_GPU = {"node": FAULTY_NODE, "gpu": "4", "pci_bus_id": "0000:83:00.0",
              "uuid": "GPU-a40c0de4-0000-4000-8000-000000000004"}
# Alerts that judge GPU readiness itself (the faulty node only). The execution-path alert fires on both nodes:
# a test host has neither the Container Toolkit nor libcuda.so.1, which the healthy node's alert proves was seen.
READINESS_ALERTS = {"GpuNativeNodeGpuNotReady", "GpuNativeGpuUnhealthy"}
EVERYWHERE = "GpuNativeExecutionPathNotReady"
WAIT_S = 120

_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_GET = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"


def http_get(host, url):
    """GET from inside the test host (no controller-to-container route needed)."""
    result = host.run("python3 -c %s %s", _GET, url)
    assert result.rc == 0, "GET %s on %s failed: %s" % (url, host.backend.get_hostname(), result.stderr)
    return result.stdout


def api(host, path):
    body = json.loads(http_get(host, "http://127.0.0.1:9090" + path))
    assert body["status"] == "success", body
    return body["data"]


def series(text):
    """{(name, frozenset(labels)): value} of an exposition-format text."""
    found = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, "unparseable exposition line: %r" % line
        labels = frozenset(_LABEL.findall(match.group("labels") or ""))
        found[(match.group("name"), labels)] = float(match.group("value"))
    return found


def on(host, name):
    if host.backend.get_hostname() != name:
        pytest.skip("checked on %s" % name)


def test_node_exporter_serves_every_agent_series(host):
    written = series(host.file(METRICS).content_string)
    scraped = series(http_get(host, "http://127.0.0.1:9100/metrics"))
    assert len([name for name, _labels in written if name == "gpu_native_gpu_healthy"]) == 8  # one per GPU
    missing = sorted(key for key in written if key not in scraped)
    assert not missing, "node_exporter dropped %s" % missing
    assert all(name.startswith("gpu_native_") for name, _labels in written)
    # node_exporter serves nothing gpu_native_* the agent did not write (no stale second file); converge also wrote
    # a preflight textfile (gpu_native_preflight_*, for the dashboards)
    assert set(k for k in scraped if k[0].startswith("gpu_native_")
               and not k[0].startswith("gpu_native_preflight_")) == set(written)
    assert scraped[("node_textfile_scrape_error", frozenset())] == 0


def test_node_exporter_runs_with_the_textfile_directory(host):
    assert host.service("prometheus-node-exporter").is_running
    assert "--collector.textfile.directory=/var/lib/prometheus/node-exporter" in \
        host.file("/etc/default/prometheus-node-exporter").content_string


def test_prometheus_scrapes_both_nodes(host):
    on(host, PROMETHEUS)
    deadline = time.time() + WAIT_S
    while True:
        targets = api(host, "/api/v1/targets")["activeTargets"]
        if len(targets) == 2 and all(t["health"] == "up" for t in targets) or time.time() > deadline:
            break
        time.sleep(2)
    assert [t["health"] for t in targets] == ["up", "up"], targets
    nodes = api(host, "/api/v1/query?query=gpu_native_node_gpu_ready")["result"]
    assert dict((r["metric"]["node"], r["value"][1]) for r in nodes) == {HEALTHY_NODE: "1", FAULTY_NODE: "0"}


def test_prometheus_loaded_the_roles_rules_with_the_shortened_durations(host):
    on(host, PROMETHEUS)
    assert host.run("promtool check rules %s", RULES).rc == 0
    groups = api(host, "/api/v1/rules?type=alert")["groups"]
    assert [g["file"] for g in groups] == [RULES]
    rules = dict((r["name"], r) for g in groups for r in g["rules"])
    assert "GpuNativeGpuTooHot" in rules and READINESS_ALERTS <= set(rules)
    assert all(r["health"] == "ok" for r in rules.values()), [(n, r.get("lastError")) for n, r in rules.items()]
    # 4s from molecule.yml's role variables (the defaults are 5m and 1m); 10m is still the default
    assert rules["GpuNativeNodeGpuNotReady"]["duration"] == 4
    assert rules["GpuNativeGpuUnhealthy"]["duration"] == 4
    assert rules["GpuNativeGpuTooHot"]["duration"] == 600


def test_readiness_alerts_fire_for_the_faulty_node_only(host):
    on(host, PROMETHEUS)
    deadline = time.time() + WAIT_S
    while True:
        alerts = api(host, "/api/v1/alerts")["alerts"]
        seen = set((a["labels"]["alertname"], a["labels"].get("node")) for a in alerts)
        wanted = set((name, FAULTY_NODE) for name in READINESS_ALERTS) | {(EVERYWHERE, HEALTHY_NODE)}
        if wanted <= seen or time.time() > deadline:
            break
        time.sleep(2)
    assert wanted <= seen, "after %ss Prometheus has only %s" % (WAIT_S, sorted(seen))
    assert all(a["state"] in ("pending", "firing") for a in alerts)

    unhealthy = [a["labels"] for a in alerts if a["labels"]["alertname"] == "GpuNativeGpuUnhealthy"]
    assert len(unhealthy) == 1, unhealthy
    assert dict((k, unhealthy[0][k]) for k in FAULTY_GPU) == FAULTY_GPU
    assert unhealthy[0]["severity"] == "critical" and unhealthy[0]["job"] == "node"
    not_ready = [a["labels"] for a in alerts if a["labels"]["alertname"] == "GpuNativeNodeGpuNotReady"]
    assert [labels["node"] for labels in not_ready] == [FAULTY_NODE]

    healthy = sorted(a["labels"]["alertname"] for a in alerts if a["labels"].get("node") == HEALTHY_NODE)
    assert healthy == [EVERYWHERE], "the healthy node raised %s" % healthy
