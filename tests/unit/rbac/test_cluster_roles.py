# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped ClusterRoles (rbac/*.yml) stay least-privilege; what they allow is proven against the real control
plane by the integration tests that run the roles under them (kube_job_kubeconfig)."""
import os

import pytest
import yaml

from testlib import REPO_ROOT

RBAC = os.path.join(REPO_ROOT, "rbac")
FILES = sorted(name for name in os.listdir(RBAC) if name.endswith(".yml"))
READ_VERBS = {"get", "list", "watch"}
# rights that would let a job escalate past its role, read credentials or switch admission off
NEVER = [("", "secrets"), ("", "serviceaccounts/token"), ("rbac.authorization.k8s.io", "*"),
         ("", "nodes/proxy"), ("", "pods/exec"), ("", "pods/attach"), ("certificates.k8s.io", "*")]


def load(name):
    with open(os.path.join(RBAC, name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_one_cluster_role_per_job_and_the_namespaced_one():
    assert FILES == ["compliance.yml", "namespaced.yml", "onboarding.yml", "policies.yml", "upgrades.yml"]


@pytest.mark.parametrize("name", FILES)
def test_each_file_is_one_cluster_role_named_after_its_job_without_wildcards(name):
    role = load(name)
    assert role["apiVersion"] == "rbac.authorization.k8s.io/v1" and role["kind"] == "ClusterRole"
    assert role["metadata"]["name"] == "gpu-native-fleet-" + name[:-4]
    assert role["metadata"]["labels"] == {"app.kubernetes.io/part-of": "gpu_native.fleet"}
    assert "aggregationRule" not in role
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        for field in ("apiGroups", "resources", "verbs"):
            assert rule[field] and "*" not in rule[field], rule
        for group, resource in NEVER:
            assert not (group in rule["apiGroups"] and (resource == "*" or resource in rule["resources"])), rule
        assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), rule


def test_compliance_is_read_only():
    for rule in load("compliance.yml")["rules"]:
        assert set(rule["verbs"]) <= READ_VERBS, rule


def test_pods_are_created_only_through_the_namespaced_role():
    for name in FILES:
        for rule in load(name)["rules"]:
            if "" in rule["apiGroups"] and "pods" in rule["resources"] and "create" in rule["verbs"]:
                assert name == "namespaced.yml", (name, rule)


def test_no_job_deletes_pods_or_patches_namespaces():
    """Pods leave through pods/eviction (PodDisruptionBudgets apply); namespaces' Pod Security labels stay."""
    for name in FILES:
        for rule in load(name)["rules"]:
            if "" not in rule["apiGroups"]:
                continue
            if "namespaces" in rule["resources"]:
                assert set(rule["verbs"]) <= {"get", "create"}, (name, rule)
            if "pods" in rule["resources"] and name != "namespaced.yml":
                assert "delete" not in rule["verbs"], (name, rule)
