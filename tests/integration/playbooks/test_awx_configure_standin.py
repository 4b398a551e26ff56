"""playbooks/awx_configure.yml run against an AWX API stand-in (issue 25, item 10).

The stand-in (tests/standins/awx_api_standin.py) is not AWX: it answers the calls awx.awx 24.6.1 makes the way AWX's
API answers them (a 404 where AWX has no endpoint) and records what the playbook built. The tests assert the
Kubernetes bearer-token credential (created, or an existing one taken by name) on the onboard, preflight and driver
upgrade templates, the approval workflow's links, and the grants: operators execute the workflow only, approvers
approve it, nobody got execute on a bare template.
"""
import json
import os
import subprocess
import sys

import pytest

from testlib import REPO_ROOT, ansible_env

sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "standins"))
from awx_api_standin import AwxStandin  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = os.path.join(REPO_ROOT, "playbooks", "awx_configure.yml")
KUBE_TYPE = "OpenShift or Kubernetes API Bearer Token"
SEED = {"organizations": [{"name": "Default"}], "inventories": [{"name": "GPU fleet", "organization": 3}]}
TEMPLATES = ("GPU fleet onboard", "GPU fleet preflight", "GPU fleet driver upgrade")
WORKFLOW = "GPU fleet onboard (with approval)"


def _run(awx, tmp_path, **extra):
    variables = {
        "awx_controller_host": awx.url, "awx_controller_token": awx.token,
        "awx_fleet_project_url": "https://git.example.internal/gpu-native-fleet.git",
        "awx_fleet_ee_image": "registry.example.internal/gpu-native-fleet-ee:1.0",
        "awx_fleet_machine_ssh_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n",
    }
    variables.update(extra)
    path = tmp_path / "awx-vars.json"
    path.write_text(json.dumps(variables))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", PLAYBOOK, "-e", "@" + str(path)],
                          env=ansible_env(), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600, check=False)
    return proc


@pytest.fixture(name="awx")
def fixture_awx():
    with AwxStandin(SEED) as server:
        # the seed's ids: two credential types (1, 2), then the organization (3, then its roles)
        assert server.find("organizations", name="Default")["id"] == 3
        yield server


def _credentials_of(awx, template):
    jt = awx.find("job_templates", name=template)
    return sorted(awx.store["credentials"][cid]["name"] for cid in awx.linked("job_templates", jt["id"], "credentials"))


def test_creates_the_kube_credential_attaches_it_and_grants_the_workflow_only(awx, tmp_path):
    proc = _run(awx, tmp_path, awx_fleet_kube_host="https://k8s.example.internal:6443",
                awx_fleet_kube_bearer_token="tok-onboarding-sa", awx_fleet_kube_ca_cert="-----BEGIN CERTIFICATE-----")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "tok-onboarding-sa" not in proc.stdout and "not-a-key" not in proc.stdout

    kube_type = awx.find("credential_types", name=KUBE_TYPE)["id"]
    cred = awx.find("credentials", name="GPU cluster (bearer token)")
    assert cred["credential_type"] == kube_type and cred["organization"] == 3
    assert cred["inputs"] == {"host": "https://k8s.example.internal:6443", "bearer_token": "tok-onboarding-sa",
                              "verify_ssl": True, "ssl_ca_cert": "-----BEGIN CERTIFICATE-----"}
    for template in TEMPLATES:
        assert _credentials_of(awx, template) == ["GPU cluster (bearer token)", "GPU nodes (ssh)"], template
    # the read-only compliance job keeps only the machine credential (its token is the read-only ClusterRole's)
    assert _credentials_of(awx, "GPU fleet compliance") == ["GPU nodes (ssh)"]
    assert awx.find("job_templates", name="GPU fleet driver upgrade")["playbook"] == "playbooks/driver_upgrade.yml"
    assert awx.find("job_templates", name="GPU fleet preflight")["playbook"] == "playbooks/preflight.yml"

    # the workflow: approval first, the onboard template on its success only
    wf = awx.find("workflow_job_templates", name=WORKFLOW)
    approve = awx.find("workflow_job_template_nodes", identifier="approve", workflow_job_template=wf["id"])
    onboard = awx.find("workflow_job_template_nodes", identifier="onboard", workflow_job_template=wf["id"])
    approval = awx.find("workflow_approval_templates", name="Approve onboarding")
    assert approve["unified_job_template"] == approval["id"] and approval["timeout"] == 86400
    assert onboard["unified_job_template"] == awx.find("job_templates", name="GPU fleet onboard")["id"]
    assert awx.linked("workflow_job_template_nodes", approve["id"], "success_nodes") == [onboard["id"]]
    assert awx.linked("workflow_job_template_nodes", onboard["id"], "success_nodes") == []

    assert awx.grants() == sorted([
        ("GPU fleet operators", "execute", "workflow_job_templates", WORKFLOW),
        ("GPU fleet approvers", "approval", "workflow_job_templates", WORKFLOW),
    ])


def test_takes_an_existing_kube_credential_by_name_and_revokes_a_bare_template_grant(awx, tmp_path):
    kube_type = awx.find("credential_types", name=KUBE_TYPE)["id"]
    existing = awx._create("credentials", {"name": "prod cluster", "credential_type": kube_type, "organization": 3,
                                           "inputs": {"host": "https://prod:6443", "bearer_token": "$encrypted$"}})
    # an operator grant on the bare onboard template, left from an earlier hand-made setup
    team = awx._create("teams", {"name": "GPU fleet operators", "organization": 3})
    bare = awx._create("job_templates", {"name": "GPU fleet onboard", "organization": 3})
    awx.links[("roles", bare["summary_fields"]["object_roles"]["execute_role"]["id"], "teams")] = [team["id"]]

    proc = _run(awx, tmp_path, awx_fleet_kube_credential="prod cluster")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert [c["name"] for c in awx.objects("credentials")] == ["prod cluster", "GPU nodes (ssh)"]
    assert awx.find("credentials", name="prod cluster")["inputs"] == existing["inputs"]  # untouched
    for template in TEMPLATES:
        assert _credentials_of(awx, template) == ["GPU nodes (ssh)", "prod cluster"], template
    grants = awx.grants()
    assert ("GPU fleet operators", "execute", "job_templates", "GPU fleet onboard") not in grants
    assert ("GPU fleet operators", "execute", "workflow_job_templates", WORKFLOW) in grants


def test_a_missing_existing_credential_stops_before_any_template(awx, tmp_path):
    proc = _run(awx, tmp_path, awx_fleet_kube_credential="nobody made this")
    assert proc.returncode != 0
    assert "No credential \"nobody made this\" of the type" in proc.stdout, proc.stdout[-3000:]
    assert [c["name"] for c in awx.objects("credentials")] == ["GPU nodes (ssh)"]
    assert awx.objects("job_templates") == []


@pytest.mark.parametrize("extra, needle", [
    ({"awx_fleet_kube_bearer_token": "tok-secret", "awx_fleet_kube_host": "https://k:6443"}, "awx_fleet_kube_ca_cert"),
    ({"awx_fleet_kube_bearer_token": "tok-secret", "awx_fleet_kube_ca_cert": "x"}, "awx_fleet_kube_host"),
    ({"awx_fleet_approver_team": "GPU fleet operators"}, "two teams"),
])
def test_refuses_a_credential_awx_would_weaken_or_one_team_for_both_rights(awx, tmp_path, extra, needle):
    proc = _run(awx, tmp_path, **extra)
    assert proc.returncode != 0 and needle in proc.stdout, proc.stdout[-3000:]
    assert "tok-secret" not in proc.stdout
    assert [r for r in awx.requests if r["method"] != "GET"] == []


def test_the_standin_refuses_what_awx_refuses(awx):
    """The stand-in's 404 for the approval template's success_nodes (ansible/awx issue 8777) and its 401."""
    import urllib.error
    import urllib.request
    node = awx._create("workflow_job_template_nodes", {"identifier": "x", "workflow_job_template": 1})
    approval = awx._route("POST", "/api/v2/workflow_job_template_nodes/%d/create_approval_template/" % node["id"],
                          {"name": "a"})[1]
    assert awx._route("POST", approval["url"] + "success_nodes/", {"id": node["id"]})[0] == 404
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(awx.url + "/api/v2/organizations/")
    assert err.value.code == 401


def test_verify_ssl_off_needs_no_ca_and_reaches_the_credential(awx, tmp_path):
    """awx_fleet_kube_verify_ssl=false (a lab): no CA asked for, the credential says verify_ssl false."""
    proc = _run(awx, tmp_path, awx_fleet_kube_host="https://lab:6443", awx_fleet_kube_bearer_token="tok-lab",
                awx_fleet_kube_verify_ssl=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert awx.find("credentials", name="GPU cluster (bearer token)")["inputs"] == {
        "host": "https://lab:6443", "bearer_token": "tok-lab", "verify_ssl": False}
