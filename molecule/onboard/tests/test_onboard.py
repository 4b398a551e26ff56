"""Verify onboarding on the simulated fleet: only the healthy node joined; the others stay cordoned and say why."""
testinfra_hosts = ["podman://gn-onboard-h100", "podman://gn-onboard-a40-err", "podman://gn-onboard-h100-drift",
                   "podman://gn-onboard-a100-mig"]

import os  # noqa: E402

import pytest  # noqa: E402
from kubernetes import client, config  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# the scenario's real control plane (prepare.yml: tests/kube_cluster.py up); read as admin, not as the job
KUBE_DIR = os.path.join(REPO, ".cache", "kube", "onboard")
NODE_OF = {"gn-onboard-h100": "gpu-h100-01", "gn-onboard-a40-err": "gpu-a40-07", "gn-onboard-h100-drift": "gpu-h100-02",
           "gn-onboard-a100-mig": "gpu-a100-mig-01"}
METRICS = "/var/lib/prometheus/node-exporter/gpu_native_preflight.prom"


@pytest.fixture(scope="module")
def core():
    configuration = client.Configuration()
    config.load_kube_config(config_file=os.path.join(KUBE_DIR, "admin.kubeconfig"),
                            client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))


def own_taints(node):
    """The node's taints but the ones the real node lifecycle controller manages (node.kubernetes.io/unschedulable
    on a cordoned node, not-ready...): the stand-in never added them, a real server does (TaintNodesByCondition)."""
    return [t.key for t in node.spec.taints or [] if not t.key.startswith("node.kubernetes.io/")]


def node_of(host):
    return NODE_OF[host.backend.get_hostname()]


def test_healthy_node_joined(host, core):
    if node_of(host) != "gpu-h100-01":
        pytest.skip("the healthy node only")
    node = core.read_node("gpu-h100-01")
    assert not node.spec.unschedulable
    assert node.metadata.labels["gpu-native.io/preflight"] == "passed"
    assert own_taints(node) == []
    assert "gpu-native.io/cordoned-by" not in (node.metadata.annotations or {})
    assert 'gpu_native_preflight_passed{node="gpu-h100-01"} 1' in host.file(METRICS).content_string


def test_err_gpu_node_stays_cordoned_and_names_the_gpu(host, core):
    if node_of(host) != "gpu-a40-07":
        pytest.skip("the ERR! node only")
    node = core.read_node("gpu-a40-07")
    assert node.spec.unschedulable is True
    assert node.metadata.labels["gpu-native.io/preflight"] == "failed"
    reasons = node.metadata.annotations["gpu-native.io/preflight-reasons"]
    assert reasons.startswith("hardware: ") and "0000:83:00.0" in reasons
    assert node.metadata.annotations["gpu-native.io/cordoned-by"] == "onboard"
    assert own_taints(node) == ["gpu-native.io/unvalidated"]
    metrics = host.file(METRICS).content_string
    assert 'gpu_native_preflight_gate_passed{node="gpu-a40-07",gate="hardware"} 0' in metrics
    assert 'gpu_native_preflight_gate_skipped{node="gpu-a40-07",gate="cuda"} 1' in metrics


def test_drifted_node_fails_spec_and_stays_cordoned(host, core):
    if node_of(host) != "gpu-h100-02":
        pytest.skip("the drifted node only")
    node = core.read_node("gpu-h100-02")
    assert node.spec.unschedulable is True
    assert node.metadata.labels["gpu-native.io/preflight"] == "failed"
    reasons = node.metadata.annotations["gpu-native.io/preflight-reasons"]
    assert reasons.startswith("spec: spec drift against profile h100-demo") and "550.127.08" in reasons
    assert "hardware:" not in reasons


def test_mig_node_joined_with_its_mig_instances_counted(host, core):
    if node_of(host) != "gpu-a100-mig-01":
        pytest.skip("the MIG node only")
    node = core.read_node("gpu-a100-mig-01")
    assert not node.spec.unschedulable
    assert node.metadata.labels["gpu-native.io/preflight"] == "passed"
    assert own_taints(node) == []
    metrics = host.file(METRICS).content_string
    assert 'gpu_native_preflight_gate_passed{node="gpu-a100-mig-01",gate="kubernetes"} 1' in metrics
    assert 'gpu_native_preflight_passed{node="gpu-a100-mig-01"} 1' in metrics
    # What the kubelet stand-in advertises for it (prepare.yml, from the capture's MIG state): MIG devices only.
    allocatable = node.status.allocatable
    assert allocatable["nvidia.com/mig-1g.20gb"] == "4" and "nvidia.com/gpu" not in allocatable
    # The layout assigned to the node is the one the capture shows, so the mig role found it in sync.
    lgi = host.check_output("nvidia-smi mig -lgi")
    assert lgi.count("MIG 1g.20gb") == 4


def test_the_device_plugin_pod_of_every_node_runs_from_its_daemonset(host, core):
    """The real DaemonSet controller made the pod, the real scheduler bound it past the registration taint, and
    the kubelet stand-in reported it Running and Ready: what the kubernetes gate read."""
    pods = core.list_namespaced_pod("gpu-operator", label_selector="app=nvidia-device-plugin-daemonset",
                                    field_selector="spec.nodeName=" + node_of(host)).items
    assert len(pods) == 1, [p.metadata.name for p in pods]
    assert pods[0].metadata.owner_references[0].kind == "DaemonSet"
    assert pods[0].status.phase == "Running"
    assert {c.type: c.status for c in pods[0].status.conditions}["Ready"] == "True"


def test_the_onboarding_job_ran_without_admin_rights(host):
    """preflight_kubeconfig is the onboarding job's ServiceAccount token (rbac/onboarding.yml): it may patch
    nodes, and it may not delete them or read Secrets."""
    if node_of(host) != "gpu-h100-01":
        pytest.skip("once")
    configuration = client.Configuration()
    config.load_kube_config(config_file=os.path.join(KUBE_DIR, "onboarding.kubeconfig"),
                            client_configuration=configuration)
    authz = client.AuthorizationV1Api(client.ApiClient(configuration))

    def allowed(verb, resource):
        review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource)))
        return authz.create_self_subject_access_review(review).status.allowed

    assert allowed("patch", "nodes")
    assert not allowed("delete", "nodes")
    assert not allowed("list", "secrets")


def test_every_node_got_the_containerd_handler(host):
    dump = host.check_output("containerd config dump")
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump


def test_readiness_agent_timer_installed(host):
    assert host.service("gpu-native-readiness.timer").is_enabled


def test_preflight_leaves_the_sandboxed_agents_textfile_folder_as_the_readiness_role_made_it(host):
    """The preflight role writes its metrics into the same folder: it must not reset the folder's mode (it did:
    0755 locked the readiness agent's dynamic user out, and the agent's next run failed with EACCES)."""
    folder = host.file("/var/lib/prometheus/node-exporter")
    assert (folder.user, folder.group, folder.mode) == ("root", "gpu-native-textfile", 0o1775)
    run = host.run("systemctl start gpu-native-readiness.service")
    assert run.rc == 0, host.run("journalctl --no-pager -u gpu-native-readiness.service | tail -5").stdout
