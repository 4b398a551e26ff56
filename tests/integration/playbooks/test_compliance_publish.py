"""playbooks/compliance.yml publishes its reports and reaches the API the way an AWX credential gives it (issue 25, 10).

- compliance_publish_url: each report file is PUT (roles/compliance/tasks/publish.yml) to a local report-store
  stand-in (Python's http.server, here) that records every request; the URLs and statuses become the
  ``compliance_published`` job artifact, a refused upload fails the job with the status, and the store's credentials
  (compliance_publish_headers) never show in the job's events.
- K8S_AUTH_HOST in the job's environment (what AWX's "OpenShift or Kubernetes API Bearer Token" credential injects),
  no kubeconfig: the node object is read (an API nobody answers is an ``error`` row), where it used to be skipped.

The fleet is benchmarks/fleet_compliance.py's, run through ansible-runner as in test_compliance_playbook.py.
"""
import importlib.util
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ansible_runner
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_SPEC = importlib.util.spec_from_file_location("fleet_bench", os.path.join(REPO, "benchmarks", "fleet_compliance.py"))
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)
PLAYBOOK = os.path.join(REPO, "playbooks", "compliance.yml")
SECRET = "Bearer store-s3cr3t-token"


class ReportStoreStandin(object):
    """A report store stand-in: answers PUT with ``status`` (per path suffix in ``refuse``), keeps each request."""

    def __init__(self, status=201, refuse=None):
        self.requests = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_PUT(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
                code = status
                for suffix, refused in (refuse or {}).items():
                    if self.path.endswith(suffix):
                        code = refused
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(name="store_factory")
def fixture_store_factory():
    servers = []

    def make(**kwargs):
        servers.append(ReportStoreStandin(**kwargs))
        return servers[-1]
    yield make
    for server in servers:
        server.close()


@pytest.fixture(name="store")
def fixture_store(store_factory):
    return store_factory()


def _run(tmp_path, extravars, envvars=None, hosts=2, drift_every=2):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    inventory, drifting = bench.build_fleet(str(fleet), hosts, drift_every)
    env = bench.ansible_env()
    private = tmp_path / "runner"
    private.mkdir()
    variables = {"compliance_report_dir": str(tmp_path / "reports")}
    variables.update(extravars)
    runner_env = dict((k, env[k]) for k in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH",
                                            "ANSIBLE_HOST_KEY_CHECKING", "PATH"))
    runner_env.update(envvars or {})
    result = ansible_runner.run(private_data_dir=str(private), playbook=PLAYBOOK, inventory=inventory, quiet=True,
                                extravars=variables, envvars=runner_env)
    return result, drifting


def _artifacts(result):
    stats = [e for e in result.events if e.get("event") == "playbook_on_stats"]
    assert len(stats) == 1
    return stats[0]["event_data"]["artifact_data"]


def _failed(result):
    return sorted(set(result.stats.get("failures", {})) | set(result.stats.get("dark", {})))


def _all_events_text(result):
    return "\n".join(json.dumps(e) for e in result.events)


def test_every_report_is_put_and_its_url_is_a_job_artifact(tmp_path, store):
    result, drifting = _run(tmp_path, {"compliance_publish_url": store.url + "/gpu-fleet/nightly/",
                                       "compliance_publish_headers": {"Authorization": SECRET},
                                       "compliance_report_name": "compliance-4711"})
    assert sorted(drifting) == ["node002"]
    assert _failed(result) == ["node002"]  # the drift verdicts are unchanged by the upload
    reports = tmp_path / "reports"
    assert [r["path"] for r in store.requests] == ["/gpu-fleet/nightly/compliance-4711.json",
                                                   "/gpu-fleet/nightly/compliance-4711.junit.xml",
                                                   "/gpu-fleet/nightly/compliance-4711.html"]
    for request, ext, ctype in zip(store.requests, ("json", "junit.xml", "html"),
                                   ("application/json", "application/xml", "text/html; charset=utf-8")):
        assert request["body"] == (reports / ("compliance-4711." + ext)).read_bytes()
        assert request["headers"]["Content-Type"] == ctype
        assert request["headers"]["Authorization"] == SECRET
    assert json.loads(store.requests[0]["body"])[0]["host"] == "node001"
    artifacts = _artifacts(result)
    assert artifacts["compliance_published"] == {
        "base_url": store.url + "/gpu-fleet/nightly",
        "files": [store.url + "/gpu-fleet/nightly/compliance-4711." + ext for ext in ("json", "junit.xml", "html")],
        "status": [201, 201, 201]}
    assert artifacts["compliance_summary"]["hosts_failed"] == ["node002"]
    assert "store-s3cr3t-token" not in _all_events_text(result)


def test_a_refused_upload_fails_the_job_with_its_status_and_keeps_the_artifacts(tmp_path, store_factory):
    store = store_factory(refuse={".html": 403})
    result, drifting = _run(tmp_path, {"compliance_publish_url": store.url,
                                       "compliance_publish_headers": {"Authorization": SECRET}}, drift_every=100)
    assert drifting == {}
    assert result.rc != 0 and _failed(result) != []
    assert len(store.requests) == 3
    artifacts = _artifacts(result)
    assert artifacts["compliance_published"]["status"] == [201, 201, 403]
    assert artifacts["compliance_summary"]["hosts_compliant"] == 2  # the verdicts were published before
    text = _all_events_text(result)
    assert "Not every report was stored under %s: json HTTP 201, junit.xml HTTP 201, html HTTP 403" % store.url in text
    assert "store-s3cr3t-token" not in text


def test_an_unreachable_store_fails_the_job(tmp_path):
    result, _store = _run(tmp_path, {"compliance_publish_url": "http://127.0.0.1:9/reports"}, drift_every=100)
    assert result.rc != 0
    assert _artifacts(result)["compliance_published"]["status"] == [-1, -1, -1]
    assert "Not every report was stored under http://127.0.0.1:9/reports: json HTTP -1" in _all_events_text(result)


def test_no_publish_url_uploads_nothing(tmp_path, store):
    result, _store = _run(tmp_path, {}, drift_every=100)
    assert result.rc == 0 and store.requests == []
    assert "compliance_published" not in _artifacts(result)


def test_an_awx_bearer_token_credential_reaches_the_api_without_a_kubeconfig(tmp_path):
    """The environment AWX's Kubernetes bearer-token credential injects, no kubeconfig anywhere: the node object is
    read (here an API nobody answers: an error row, never the old skip)."""
    awx_credential = {"K8S_AUTH_HOST": "https://127.0.0.1:9", "K8S_AUTH_API_KEY": "tok", "K8S_AUTH_VERIFY_SSL": "False"}
    result, _store = _run(tmp_path, {}, envvars=awx_credential, drift_every=100)
    with open(str(tmp_path / "reports" / "compliance.json")) as handle:
        rows = [row for row in json.load(handle) if row["check"] == "kubernetes"]
    assert [(row["host"], row["status"]) for row in rows] == [("node001", "error"), ("node002", "error")]
    assert "host='127.0.0.1', port=9" in rows[0]["actual"]
    assert _failed(result) == ["node001", "node002"]
