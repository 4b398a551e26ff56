# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared pytest fixtures for every suite under tests/ (the one conftest that others build on).

pytest loads this file for `pytest tests/unit`, `pytest tests/integration` and
any single test file below tests/, and puts tests/ on sys.path, so tests import
the shared helpers as ``testlib``.  Integration-only fixtures (ansible-playbook)
live here too; unit tests simply do not use them.
"""
import os

import pytest

from kube_cluster import ControlPlane, ControlPlaneError, job_credentials
import testlib

testlib.link_collection()


@pytest.fixture(autouse=True)
def _modules_run_as_on_a_managed_node(request, monkeypatch):
    """Module tests see module behaviour, whatever ran before them.

    Importing controller code (filter plugins, ansible-playbook helpers) flips
    ansible-core's process-wide ``is_controller`` flag, after which
    ``AnsibleModule.warn`` prints through Display instead of returning the
    warning in the result.  A module always runs on a managed node.
    """
    if os.sep + os.path.join("plugins", "modules") + os.sep in str(request.node.path):
        from ansible.module_utils import _internal
        monkeypatch.setattr(_internal, "is_controller", False)


# --- the real control plane (tests/kube_cluster.py; binaries from tests/tools/kube-build.sh) ----
@pytest.fixture(scope="session")
def kube_cluster():
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler, started once per test process.

    Started on first use only (a worker that runs no Kubernetes test starts none), stopped at the end of
    the session; under pytest-xdist each worker that needs one has its own.  Tests share it: each takes a
    namespace of its own (``kube_namespace``) and names its cluster-scoped objects uniquely.
    """
    plane = ControlPlane()
    try:
        plane.start()
    except ControlPlaneError as exc:
        pytest.fail("the real Kubernetes control plane did not start: %s" % exc, pytrace=False)
    yield plane
    plane.stop()


@pytest.fixture
def kube_namespace(kube_cluster):
    """A fresh namespace on the real control plane (its default ServiceAccount exists); deleted afterwards."""
    name = kube_cluster.create_namespace()
    yield name
    kube_cluster.delete_namespace(name)


@pytest.fixture
def kube_kubeconfig(kube_cluster, kube_namespace, tmp_path):
    """An admin kubeconfig for the real control plane whose context defaults to this test's namespace."""
    return kube_cluster.write_kubeconfig(str(tmp_path / "kube-admin.kubeconfig"), namespace=kube_namespace)


@pytest.fixture
def kube_job_kubeconfig(kube_cluster, kube_namespace, tmp_path):
    """kube_job_kubeconfig(job, namespaces=()) -> the path of a kubeconfig for the real control plane that holds
    only a service-account token bound to the collection's ClusterRole for `job` (rbac/<job>.yml: onboarding,
    upgrades, compliance, policies; for onboarding and upgrades also rbac/namespaced.yml, bound in `namespaces`,
    default this test's namespace).  Not admin: a verb the shipped role lacks fails the test with 403."""
    created = []

    def make(job, namespaces=()):
        token, cleanup = job_credentials(kube_cluster, job, kube_namespace, namespaces)
        created.extend(cleanup)
        return kube_cluster.write_kubeconfig(str(tmp_path / ("kube-%s.kubeconfig" % job)), namespace=kube_namespace,
                                             token=token)
    yield make
    for path in created:
        kube_cluster.request("DELETE", path)


@pytest.fixture
def run_playbook(tmp_path):
    """Write `text` as a playbook under tmp_path and run it with ansible-playbook (integration tests)."""
    def _run(text, kubeconfig_path=None, args=(), extra_env=None):
        path = tmp_path / "playbook.yml"
        path.write_text(text)
        return testlib.run_ansible_playbook(str(path), kubeconfig_path, args, extra_env)
    return _run
