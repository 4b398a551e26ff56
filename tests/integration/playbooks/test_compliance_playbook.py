"""playbooks/compliance.yml through ansible-runner (the engine AWX uses) on a simulated fleet.

The fleet comes from benchmarks/fleet_compliance.py: local-connection hosts, each with its own spec fact root,
the 8-GPU nvidia-smi stand-in, a 10k-line kernel log, a containerd stand-in and a readiness textfile.
"""
import importlib.util
import json
import os
import xml.etree.ElementTree as ET

import ansible_runner
import pytest

from kube_cluster import Seed

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_SPEC = importlib.util.spec_from_file_location("fleet_bench", os.path.join(REPO, "benchmarks", "fleet_compliance.py"))
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)
PLAYBOOK = os.path.join(REPO, "playbooks", "compliance.yml")


def _run(tmp_path, hosts, drift_every, unreachable=0, check=False):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    inventory, drifting = bench.build_fleet(str(fleet), hosts, drift_every, unreachable)
    reports = tmp_path / "reports"
    env = bench.ansible_env()
    private = tmp_path / "runner"
    private.mkdir()
    result = ansible_runner.run(
        private_data_dir=str(private), playbook=PLAYBOOK, inventory=inventory, quiet=True,
        extravars={"compliance_report_dir": str(reports)}, cmdline="--check" if check else None,
        envvars=dict((k, env[k]) for k in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH",
                                           "ANSIBLE_HOST_KEY_CHECKING", "PATH")))
    return result, drifting, reports


def _failed_hosts(result):
    stats = result.stats
    return sorted(set(stats.get("failures", {})) | set(stats.get("dark", {})))


REPORT_TASKS = {"Create the report directory", "Write the reports (JSON, JUnit XML, HTML)"}


def _changed_tasks(result):
    return set(e["event_data"]["task"] for e in result.events
               if e.get("event") == "runner_on_ok" and e["event_data"].get("res", {}).get("changed"))


def _artifact_data(result):
    """artifact_data of the playbook_on_stats event: what AWX shows as the job's artifacts."""
    stats = [e for e in result.events if e.get("event") == "playbook_on_stats"]
    assert len(stats) == 1
    return stats[0]["event_data"]["artifact_data"]


def _rows(reports):
    with open(str(reports / "compliance.json")) as handle:
        return json.load(handle)


def test_drifting_hosts_fail_exactly_and_artifacts_are_published(tmp_path):
    result, drifting, reports = _run(tmp_path, hosts=4, drift_every=2, unreachable=1)
    assert sorted(drifting) == ["node002", "node004"]
    assert result.status == "failed"
    # exactly the drifting hosts and the unreachable one fail; the others stay green
    assert _failed_hosts(result) == ["gone01", "node002", "node004"]
    assert sorted(result.stats["ok"]) == ["gone01", "node001", "node002", "node003", "node004"]
    assert _changed_tasks(result) <= REPORT_TASKS  # nothing on the nodes; only the report files on the controller

    artifacts = _artifact_data(result)
    summary = artifacts["compliance_summary"]
    assert summary["hosts_total"] == 5
    assert summary["hosts_compliant"] == 2
    assert summary["hosts_failed"] == ["node002", "node004"]
    assert summary["hosts_unreachable"] == ["gone01"]
    assert summary["by_check"]["spec"]["fail"] == 1 and summary["by_check"]["gpu_health"]["fail"] == 1
    failing = artifacts["compliance_failing"]
    assert sorted(failing) == ["gone01", "node002", "node004"]
    assert [item["check"] for item in failing["node002"]] == ["spec"]
    assert "vm.max_map_count: expected 262144, got 65530" in failing["node002"][0]["actual"]
    assert [item["check"] for item in failing["node004"]] == ["gpu_health"]
    assert "79" in failing["node004"][0]["actual"]
    assert failing["gone01"][0]["status"] == "unreachable"

    rows = _rows(reports)
    by_key = dict(((r["host"], r["check"]), r) for r in rows)
    assert by_key[("node001", "containerd")]["status"] == "pass"
    assert by_key[("node001", "readiness")]["status"] == "pass"
    assert by_key[("node001", "isolation")]["status"] == "pass"  # the toolkit config the simulated host carries
    assert by_key[("node001", "mig")]["status"] == "skip"
    assert by_key[("node001", "kubernetes")]["status"] == "skip"   # no compliance_kubeconfig: said, not dropped
    assert by_key[("gone01", "reachability")]["status"] == "unreachable"
    assert not any(r["host"] == "gone01" and r["status"] == "pass" for r in rows)

    suites = ET.parse(str(reports / "compliance.junit.xml")).getroot()
    cases = dict(((case.get("classname"), case.get("name")), case) for case in suites.iter("testcase"))
    assert len(cases) == 4 * 7 + 1  # spec, gpu_health, mig, containerd, readiness, isolation, kubernetes per host
    failure = cases[("node002", "spec")].find("failure")
    assert failure is not None and "expected:" in failure.text and "65530" in failure.text
    assert cases[("node001", "spec")].find("failure") is None

    html = (reports / "compliance.html").read_text()
    assert "<svg" in html and "<table" in html and "node004" in html
    assert "src=" not in html and "href=" not in html  # self-contained


def test_compliant_fleet_passes_and_check_mode_is_the_same(tmp_path):
    result, drifting, reports = _run(tmp_path, hosts=2, drift_every=100, check=True)
    assert drifting == {}
    assert result.status == "successful", result.stdout.read()[-3000:]
    assert _changed_tasks(result) <= REPORT_TASKS
    assert _artifact_data(result)["compliance_summary"]["hosts_compliant"] == 2
    assert _artifact_data(result)["compliance_failing"] == {}
    assert all(r["status"] in ("pass", "skip") for r in _rows(reports))


@pytest.mark.parametrize("hosts", [3])
def test_benchmark_runs_with_a_small_fleet(hosts, tmp_path):
    """Keeps benchmarks/fleet_compliance.py working; never asserts timings."""
    result = bench.run(hosts, 3, str(tmp_path))
    assert result["failed_hosts"] == result["drifting_hosts"] == ["node002"]
    assert result["module_runs_per_host"] <= 3
    for key in ("ping_s", "compliance_s", "ratio", "parse_ms_max"):
        assert result[key] is not None


def test_device_plugin_count_from_the_api_joins_gpu_health(tmp_path, kube_cluster, kube_job_kubeconfig):
    """With compliance_kubeconfig, the node object's nvidia.com/gpu allocatable is checked against the GPUs.

    The Nodes are on the real control plane (tests/kube_cluster.py), their allocatable written through the status
    subresource as a kubelet would; the playbook reads them as the compliance job (rbac/compliance.yml)."""
    counts = (("node001", "8"), ("node002", "7"))
    seed = Seed(kube_cluster)
    try:
        for name, count in counts:
            seed.node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
            resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": count}
            kube_cluster.api("PATCH", "/api/v1/nodes/%s/status" % name,
                             {"status": {"capacity": resources, "allocatable": resources}},
                             content_type="application/merge-patch+json")
        kubeconfig = kube_job_kubeconfig("compliance")
        fleet = tmp_path / "fleet"
        fleet.mkdir()
        inventory, drifting = bench.build_fleet(str(fleet), 2, 100)
        env = bench.ansible_env()
        (tmp_path / "runner").mkdir()
        result = ansible_runner.run(
            private_data_dir=str(tmp_path / "runner"), playbook=PLAYBOOK, inventory=inventory, quiet=True,
            extravars={"compliance_report_dir": str(tmp_path / "reports"), "compliance_kubeconfig": kubeconfig},
            envvars=dict((k, env[k]) for k in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH",
                                               "PATH")))
    finally:
        seed.cleanup()
    assert drifting == {}
    assert _failed_hosts(result) == ["node002"]
    failing = _artifact_data(result)["compliance_failing"]
    assert list(failing) == ["node002"] and failing["node002"][0]["check"] == "gpu_health"


def test_an_unreachable_api_is_a_kubernetes_error_row_never_dropped(tmp_path):
    """compliance_kubeconfig names an API nobody answers: every host gets a kubernetes row with the status error
    (the device-plugin count was not compared), and the hosts are not compliant."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}]}))
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    inventory, drifting = bench.build_fleet(str(fleet), 2, 100)
    env = bench.ansible_env()
    (tmp_path / "runner").mkdir()
    result = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"), playbook=PLAYBOOK, inventory=inventory, quiet=True,
        extravars={"compliance_report_dir": str(tmp_path / "reports"), "compliance_kubeconfig": str(kubeconfig)},
        envvars=dict((k, env[k]) for k in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH", "PATH")))
    assert drifting == {}
    assert _failed_hosts(result) == ["node001", "node002"]
    rows = [row for row in _rows(tmp_path / "reports") if row["check"] == "kubernetes"]
    assert [(row["host"], row["status"]) for row in rows] == [("node001", "error"), ("node002", "error")]
    assert "the Kubernetes API could not be read" in rows[0]["actual"] and "Fix: check compliance_kubeconfig" in \
        rows[0]["actual"]
    summary = _artifact_data(result)["compliance_summary"]
    assert summary["hosts_compliant"] == 0 and summary["by_check"]["kubernetes"]["error"] == 2
