# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""preflight role on localhost: nvidia-smi, dcgmi and libcuda stand-ins, the real Kubernetes control plane
(tests/kube_cluster.py) with `KubeletStandin` for the nodes' kubelets, and the OpenAI-compatible stand-in behind the
serving pods.  The role runs as the onboarding job (rbac/onboarding.yml, rbac/namespaced.yml in the serving
namespace), not as admin.

Each fault ends with the node cordoned and labelled failed with the reason; a healthy node passes all five gates
and joins.  One ansible-playbook run covers the whole fault table.

What the real server changes against the API stand-in these tests used to run on: the Nodes carry the control
plane's own annotation (node.alpha.kubernetes.io/ttl, the TTL controller) and taints (node.kubernetes.io/*, the node
lifecycle controller), which the assertions leave out; a deleted serving pod is gone only once its kubelet has
finalized it (asynchronous); the seeded pods, namespaces and the serving namespace are this run's own (their names
carry a random suffix; the output is read with the short names).  The kubelet stand-in gives every pod the IP
127.0.0.1 (where the OpenAI stand-ins listen) and, on a node whose registry "fails", leaves the serving pod
Pending in ImagePullBackOff.  The API outage is a TCP relay in front of the real API that closes (`OutageRelay`).
"""
import json
import os
import sys

import pytest
import testlib
from kube_cluster import KubeletStandin, OutageRelay, Seed, job_kubeconfig, kubeconfig_text
from testlib import REPO_ROOT, run_ansible_playbook

STANDINS = os.path.join(REPO_ROOT, "tests", "standins")
sys.path.insert(0, STANDINS)
import openai_standin  # noqa: E402
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import preflight_serving  # noqa: E402
CAPTURES = os.path.join(STANDINS, "captures")
DCGM_PASS = ('{"DCGM Diagnostic": {"version": "4.2.3", "test_categories": [{"category": "Deployment", "tests": '
             '[{"name": "software", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"}]}]}]}}')
DCGM_FAIL = ('{"DCGM Diagnostic": {"version": "4.2.3", "test_categories": [{"category": "Hardware", "tests": '
             '[{"name": "memory", "results": [{"entity_group": "GPU", "entity_id": 3, "status": "Fail", "warnings": '
             '[{"warning": "GPU 3 has uncorrectable memory errors and row remappings are pending", "error_id": 94}]}]}]}]}}')
GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
       "nvidia.com/cuda.driver-version.full": "565.57.01"}
PLAY = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gpu_native.fleet.preflight
      vars: %s
"""


def node_object(unschedulable=False, annotations=None, labels=None, allocatable="8", taints=None):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-1", "labels": dict(GFD if labels is None else labels),
                         "annotations": annotations or {}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"allocatable": {"nvidia.com/gpu": allocatable, "cpu": "96"}}}


PLUGIN_POD = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "nvidia-device-plugin-daemonset-x1", "namespace": "gpu-operator",
                           "labels": {"app": "nvidia-device-plugin-daemonset"}},
              "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "plugin", "image": "plugin:v0.17.1"}]},
              "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
GPU_OPERATOR_NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                 "handler": "nvidia"}


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory):
    return testlib.build_fake_libcuda(tmp_path_factory.mktemp("libcuda"))


def sysfs(tmp_path, capture, extra_devices=()):
    with open(os.path.join(CAPTURES, capture, "capture.json")) as handle:
        devices = json.load(handle)["pci_devices"] + list(extra_devices)
    root = tmp_path / "sysfs"
    for bus_id, klass, vendor, device in devices:
        folder = root / bus_id
        folder.mkdir(parents=True)
        (folder / "class").write_text(klass + "\n")
        (folder / "vendor").write_text(vendor + "\n")
        (folder / "device").write_text(device + "\n")
    return str(root)


PLAY_HOSTS = """
- hosts: all:!localhost
  gather_facts: false
  environment: "{{ preflight_test_env }}"
  roles:
    - role: gpu_native.fleet.preflight
"""


def node_name(case):
    return "gpu-%s" % case.replace("_", "-")


def host_vars(tmp_path, libcuda, case, capture="h100x8-healthy", dcgm=DCGM_PASS, kernel_log="", env=None,
              extra_pci=(), llm_port=None, **extra):
    """Inventory variables of one simulated node (its own captures, stand-in settings and node name).

    `llm_port`: run the serving gate against the OpenAI stand-in on that port (the simulated kubelet gives the
    pod the IP 127.0.0.1); without it the serving gate is skipped."""
    folder = tmp_path / case
    folder.mkdir()
    (folder / "dcgm.json").write_text(dcgm)
    (folder / "kern.log").write_text(kernel_log)
    test_env = {"NVIDIA_SMI_STANDIN_CAPTURE": os.path.join(CAPTURES, capture),
                "DCGMI_STANDIN_OUTPUT": str(folder / "dcgm.json")}
    test_env.update(env or {})
    values = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "preflight_test_env": test_env,
        "preflight_node_name": node_name(case),
        "preflight_spec_matrix": {"version": 1, "profiles": {"p": {"sysctl": {"kernel.pid_max": ">=1"}}}},
        "preflight_nvidia_smi": os.path.join(STANDINS, "nvidia-smi"),
        "preflight_lspci": str(folder / "no-lspci"),
        "preflight_pci_sysfs_root": sysfs(folder, capture, extra_pci),
        "preflight_kernel_log": str(folder / "kern.log"),
        "preflight_dcgmi": os.path.join(STANDINS, "dcgmi"),
        "preflight_cuda_library": libcuda,
        "preflight_skip_gates": ["serving"],
        "preflight_skip_reasons": {"serving": "no LLM server in this test"},
        "preflight_metrics_dir": str(folder / "textfile"),
    }
    if llm_port is not None:
        values.update(preflight_skip_gates=[], preflight_skip_reasons={}, preflight_serving_port=llm_port,
                      preflight_serving_model=openai_standin.MODEL, preflight_serving_ready_poll=1,
                      preflight_serving_ready_timeout=30, preflight_serving_timeout=10)
    values.update(extra)
    return values


def node_for(case, node):
    node = json.loads(json.dumps(node))
    node["metadata"]["name"] = node_name(case)
    return node


def api_get(fleet, path):
    return fleet.plane.api("GET", path)


def pod_for(case):
    pod = json.loads(json.dumps(PLUGIN_POD))
    pod["metadata"]["name"] = "nvidia-device-plugin-" + node_name(case)
    pod["spec"]["nodeName"] = node_name(case)
    return pod


def tenant_pod(case, gpus):
    """A tenant's training pod holding `gpus` GPUs of the node of `case`."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-" + node_name(case), "namespace": "gpu-operator"},
            "spec": {"nodeName": node_name(case), "containers": [
                {"name": "train", "image": "train:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


CONTROL_PLANE_ANNOTATIONS = ("node.alpha.kubernetes.io/ttl",)  # the TTL controller's


def own_annotations(node):
    """A Node's annotations without the control plane's own."""
    return {k: v for k, v in node["metadata"].get("annotations", {}).items() if k not in CONTROL_PLANE_ANNOTATIONS}


def own_taints(node):
    """A Node's taints without those the node lifecycle controller manages (node.kubernetes.io/*)."""
    return [t for t in node["spec"].get("taints") or [] if not t["key"].startswith("node.kubernetes.io/")]


def run_fleet(plane, tmp_path, libcuda, cases, check=False, llm_ports=None, play=PLAY_HOSTS, args=(), extra_env=None,
              runtime_class=True, outage_trigger=None):
    """One ansible-playbook run over several simulated nodes; returns (result, fleet) with the fleet still up
    (its kubelet stand-in running): the caller closes it.

    A case's `serving: MODE` runs its serving gate against the OpenAI stand-in of that mode (`llm_ports`).
    `outage_trigger`: the role talks to the API through an `OutageRelay` that closes once that file exists."""
    fleet = Fleet(plane, tmp_path)
    seed = fleet.seed
    serving_namespace = seed.ns("gpu-native-preflight")
    plugin_namespace = seed.ns("gpu-operator")
    rc_path = "/apis/node.k8s.io/v1/runtimeclasses/" + RUNTIME_CLASS["metadata"]["name"]
    if runtime_class is not None:  # None: the run needs no serving pod, the RuntimeClass is left as it is
        plane.request("DELETE", rc_path)
    if runtime_class:
        plane.api("POST", "/apis/node.k8s.io/v1/runtimeclasses", RUNTIME_CLASS, expect=(201, 409))
    elif runtime_class is not None:
        plane.wait_for("RuntimeClass nvidia to be gone", lambda: plane.request("GET", rc_path)[0] == 404)
    inventory = {"all": {"hosts": {}}}
    resources, waiting = {}, {}
    pods = []
    for case, spec in cases.items():
        spec = dict(spec)
        node = json.loads(json.dumps(spec.pop("node", None) or node_object()))
        case_pods = spec.pop("pods", (PLUGIN_POD,))
        mode = spec.pop("serving", None)
        tenant_gpus = spec.pop("tenant_gpus", None)
        if mode is not None:
            spec["llm_port"] = llm_ports[mode]
        never = node["metadata"].get("annotations", {}).pop(NEVER_READY, None)
        seeded = node_for(case, node)
        if never:
            waiting[seeded["metadata"]["name"]] = (never, 'Back-off pulling image "%(image)s"')
        resources[seeded["metadata"]["name"]] = seeded.get("status", {}).get("allocatable", {})
        seed.node(seeded)
        pods.extend(pod_for(case) for _pod in case_pods)
        if tenant_gpus:
            pods.append(tenant_pod(case, tenant_gpus))
        variables = host_vars(tmp_path, libcuda, case, **spec)
        variables.update(preflight_device_plugin_namespace=plugin_namespace,
                         preflight_serving_namespace=serving_namespace)
        inventory["all"]["hosts"][case] = variables
    for pod in pods:
        seed.pod(pod)
    fleet.start_kubelet(resources, waiting, serving_namespace)
    kubeconfig, cleanup = job_kubeconfig(plane, "onboarding", str(tmp_path / "kube-onboarding.kubeconfig"),
                                         serving_namespace, [serving_namespace])
    fleet.cluster_paths.extend(cleanup)
    if outage_trigger:
        fleet.relay = OutageRelay(plane.url, outage_trigger)
        with open(kubeconfig, encoding="utf-8") as handle:
            token = json.load(handle)["users"][0]["user"]["token"]
        with open(kubeconfig, "w", encoding="utf-8") as handle:
            handle.write(kubeconfig_text(fleet.relay.url, plane.pki.ca_path, serving_namespace, token=token))
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(play)
    args = ["-i", str(tmp_path / "inventory.json"), "--forks", "4"] + (["--check"] if check else []) + list(args)
    result = run_ansible_playbook(str(tmp_path / "play.yml"), kubeconfig, args, extra_env=extra_env)
    for short, real in seed.namespaces.items():  # read with the short names the tests seeded
        result.stdout = result.stdout.replace(real + "/", short + "/")
    fleet.result = result
    return result, fleet


class Fleet(object):
    """The nodes and pods of one run on the real control plane, with their kubelet stand-in."""

    def __init__(self, plane, folder):
        self.plane, self.folder = plane, folder
        self.seed = Seed(plane)
        self.kubelet = self.relay = self.result = None
        self.cluster_paths = []

    def start_kubelet(self, resources, waiting, serving_namespace):
        self.kubelet = KubeletStandin(self.plane, self.seed.nodes, resources=resources, pod_ip="127.0.0.1",
                                      waiting=waiting, waiting_namespace=serving_namespace, events=True).__enter__()

        def settled():  # every node Ready (the not-ready taint lifted), every seeded pod Running
            for name in self.seed.nodes:
                if any(t["key"] == "node.kubernetes.io/not-ready" for t in self.node_by_name(name)["spec"].get(
                        "taints") or []):
                    return False
            return all(self.plane.api("GET", "/api/v1/namespaces/%s/pods/%s" % pod)["status"].get("phase") ==
                       "Running" for pod in self.seed.pods)
        self.plane.wait_for("the fleet's nodes Ready and its pods Running", settled, timeout=120)

    def node_by_name(self, name):
        return self.plane.api("GET", "/api/v1/nodes/" + name)

    def node(self, case):
        return self.node_by_name(node_name(case))

    def metrics(self, case):
        return (self.folder / case / "textfile" / "gpu_native_preflight.prom").read_text()

    def serving_pods(self):
        return self.plane.api("GET", "/api/v1/pods?labelSelector=app.kubernetes.io%2Fname%3Dgpu-native-preflight")[
            "items"]

    def kubelet_events(self, case):
        """(reason, message) of the kubelet's Events about the serving pod of `case` (they outlive the pod)."""
        items = self.plane.api("GET", "/api/v1/namespaces/%s/events" % self.seed.ns("gpu-native-preflight"))["items"]
        pod = preflight_serving.serving_pod_identity(node_name(case))["name"]
        return [(e["reason"], e["message"]) for e in items if e["involvedObject"]["name"] == pod]

    def close(self):
        if self.relay is not None:
            self.relay.stop()
        if self.kubelet is not None:
            self.kubelet.__exit__(None, None, None)
        for path in self.cluster_paths:
            self.plane.request("DELETE", path)
        self.seed.cleanup()


NEVER_READY = "standin.gpu-native.io/pods-never-ready"
MIRROR_IMAGE = "localhost:5000/mirror/vllm-openai:v0.11.0"
EXTRA_GPU = ("0000:cc:00.0", "0x030200", "0x10de", "0x2330")


FAULTS = [
    ("err_gpu", dict(capture="a40x8-gpu4-err", node=node_object(labels=dict(GFD, **{
        "nvidia.com/gpu.product": "NVIDIA-A40"}))), "hardware", "0000:83:00.0"),
    ("xid79", dict(kernel_log="[ 1234.567] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"),
     "hardware", "79"),
    ("device_plugin_count", dict(node=node_object(allocatable="7")), "kubernetes",
     "allocatable nvidia.com/gpu is 7, expected 8"),
    ("missing_gfd_label", dict(node=node_object(labels={"nvidia.com/gpu.count": "8",
                                                        "nvidia.com/cuda.driver-version.full": "565.57.01"})),
     "kubernetes", "label nvidia.com/gpu.product is missing"),
    ("plugin_pod_missing", dict(pods=()), "kubernetes", "no device plugin pod runs on the node"),
    ("driver_drift", dict(preflight_spec_matrix={"version": 1, "profiles": {"p": {"driver": {"version": "550.127.08"}}}}),
     "spec", "driver.version"),
    ("dcgmi_failure", dict(dcgm=DCGM_FAIL), "hardware", "memory on GPU 3"),
    ("dcgmi_hard_error", dict(env={"DCGMI_STANDIN_MODE": "no-hostengine"}), "hardware", "dcgmi exited with rc=255"),
    ("cuda_failure", dict(env={"FAKE_CUDA_FAIL": "cuModuleLoadData=218"}), "cuda", "CUDA_ERROR_INVALID_PTX"),
    ("libcuda_missing", dict(preflight_cuda_library="/nonexistent/libcuda.so.1"), "cuda",
     "is the NVIDIA driver installed?"),
    ("pci_count_mismatch", dict(extra_pci=[EXTRA_GPU]), "hardware", "PCI shows 9 NVIDIA GPUs"),
    ("dcgmi_timeout", dict(env={"DCGMI_STANDIN_SLEEP": "60"}, preflight_dcgm_timeout=2), "hardware",
     "dcgmi did not answer within 2 s"),
    ("no_tokens", dict(serving="empty"), "serving", "returned 0 completion tokens, fewer than min_tokens 8"),
    ("empty_completion", dict(serving="empty-text"), "serving", "returned an empty completion"),
    ("llm_pod_never_ready", dict(serving="ok", node=node_object(annotations={NEVER_READY: "ImagePullBackOff"}),
                                 preflight_serving_ready_timeout=3), "serving",
     "did not become Ready within 3 s: phase Pending; container server waiting: ImagePullBackOff (Back-off pulling "
     "image \"vllm/vllm-openai:v0.11.0\")"),
]
# All five gates, the serving pod with an air-gapped override (mirror image, model from a volume, offline hub).
HEALTHY = dict(node=node_object(taints=[{"key": "gpu-native.io/unvalidated", "effect": "NoSchedule"},
                                        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
               serving="ok", preflight_serving_image=MIRROR_IMAGE, preflight_serving_image_pull_policy="Never",
               preflight_serving_env=[{"name": "HF_HUB_OFFLINE", "value": "1"}],
               preflight_serving_volumes=[{"name": "models", "hostPath": {"path": "/srv/models"}}],
               preflight_serving_volume_mounts=[{"name": "models", "mountPath": "/models", "readOnly": True}])
LLM_MODES = ("ok", "empty", "empty-text")
# Every GPU held by a tenant's pod, and preflight_evict false: the active tests (dcgmi diag -r 2, the CUDA kernel,
# the serving pod) are skipped with the reason, the node is not failed (issue 25, item 1).
GPU_BUSY = dict(serving="ok", tenant_gpus=8, preflight_evict=False)


@pytest.fixture(scope="module")
def llm_ports():
    """One OpenAI-compatible stand-in per mode on 127.0.0.1, where the simulated kubelet puts the pods."""
    servers = dict((mode, openai_standin.serve(0, mode)) for mode in LLM_MODES)
    yield dict((mode, server.server_address[1]) for mode, server in servers.items())
    for server in servers.values():
        server.shutdown()
        server.server_close()


ADMIN_CORDONED = dict(node=node_object(unschedulable=True, annotations={"ops.example.com/reason": "RMA"}))
MARKS = ("gpu-native.io/cordoned-by", "gpu-native.io/cordoned-at", "gpu-native.io/run-id")


def marked(owner, run_id="killed-run-1", **kwargs):
    """A node cordoned by `owner` in an earlier run (one that was killed before it handed the node back)."""
    return node_object(unschedulable=True, annotations={
        "gpu-native.io/cordoned-by": owner, "gpu-native.io/cordoned-at": "2026-11-29T08:00:00Z",
        "gpu-native.io/run-id": run_id}, **kwargs)


CORDON_CASES = {
    "admin_take_over": dict(ADMIN_CORDONED, preflight_take_over_cordon=True),
    "killed_run": dict(node=marked("preflight")),
    "mig_cordoned": dict(node=marked("mig", run_id="mig-run")),
}


@pytest.fixture(scope="module")
def fleet(kube_cluster, tmp_path_factory, libcuda, llm_ports):
    folder = tmp_path_factory.mktemp("fleet")
    cases = {"healthy": HEALTHY, "admin_cordoned": ADMIN_CORDONED, "gpu_busy": GPU_BUSY}
    cases.update(CORDON_CASES)
    # A fault's node runs only the gate that judges it (the kubernetes gate after hardware: it counts against the
    # GPUs hardware found, and alone it passes a node that advertises too few): what the test reads (the node
    # failed, cordoned, with that gate's reason) is the same, and the run, the longest fixture of the suite, does
    # much less work.
    cases.update((name, dict(kwargs, preflight_gates=["hardware", gate] if gate == "kubernetes" else [gate]))
                 for name, kwargs, gate, _reason in FAULTS)
    _result, fleet = run_fleet(kube_cluster, folder, libcuda, cases, llm_ports=llm_ports)
    yield fleet
    fleet.close()


@pytest.fixture
def fleet_run(kube_cluster, tmp_path, libcuda):
    """run_fleet(cases, **options) for one test; its fleet is closed at teardown."""
    made = []

    def _run(cases, **options):
        result, fleet = run_fleet(kube_cluster, tmp_path, libcuda, cases, **options)
        made.append(fleet)
        return result, fleet
    yield _run
    for fleet in made:
        fleet.close()


def test_a_failing_node_never_stops_the_others(fleet):
    assert fleet.result.returncode == 0, fleet.result.stdout[-4000:]


def test_healthy_node_passes_is_labelled_and_uncordoned(fleet):
    node = fleet.node("healthy")
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "passed"
    assert not node["spec"].get("unschedulable")
    assert [t["key"] for t in own_taints(node)] == ["nvidia.com/gpu"]
    assert "gpu-native.io/cordoned-by" not in node["metadata"].get("annotations", {})
    metrics = fleet.metrics("healthy")
    assert 'gpu_native_preflight_passed{node="gpu-healthy"} 1' in metrics
    assert 'gpu_native_preflight_gate_passed{node="gpu-healthy",gate="cuda"} 1' in metrics
    assert 'gpu_native_preflight_gate_passed{node="gpu-healthy",gate="serving"} 1' in metrics
    assert "gpu-healthy: PASSED (spec=pass, hardware=pass, kubernetes=pass, cuda=pass, serving=pass)" in \
        fleet.result.stdout


def test_the_serving_pod_used_the_air_gapped_override_and_is_gone(fleet):
    assert ("Pulling", 'Pulling image "%s"' % MIRROR_IMAGE) in fleet.kubelet_events("healthy")
    assert ("Started", "Started container server") in fleet.kubelet_events("healthy")
    # every serving pod deleted, Ready or not (gone once the kubelet has finalized it: a moment after the delete)
    fleet.plane.wait_for("every serving pod gone", lambda: fleet.serving_pods() == [], timeout=30)


def test_a_node_whose_gpus_are_all_in_use_skips_the_active_tests_and_is_not_failed(fleet):
    text = " ".join(fleet.result.stdout.split())
    assert "gpu-gpu-busy: PASSED (spec=pass, hardware=pass, kubernetes=pass, cuda=skip, serving=skip)" in text
    busy = "GPU pods running: gpu-operator/train-gpu-gpu-busy (preflight_evict is false)"
    assert "gpu-gpu-busy: skipped cuda: %s; serving: %s" % (busy, busy) in text
    node = fleet.node("gpu_busy")
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "passed"
    assert fleet.kubelet_events("gpu_busy") == []   # no serving pod was started next to the tenant
    assert 'gpu_native_preflight_gate_skipped{node="gpu-gpu-busy",gate="serving"} 1' in fleet.metrics("gpu_busy")


def test_an_empty_completion_is_not_mistaken_for_a_token_shortage(fleet):
    annotation = fleet.node("empty_completion")["metadata"]["annotations"]["gpu-native.io/preflight-reasons"]
    assert "fewer than min_tokens" not in annotation, annotation


@pytest.mark.parametrize("case,kwargs,gate,reason", FAULTS, ids=[fault[0] for fault in FAULTS])
def test_fault_keeps_the_node_cordoned_with_the_reason(fleet, case, kwargs, gate, reason):
    node = fleet.node(case)
    assert node["spec"].get("unschedulable") is True
    assert node["metadata"]["labels"].get("gpu-native.io/preflight") == "failed"
    annotation = node["metadata"]["annotations"]["gpu-native.io/preflight-reasons"]
    assert annotation.startswith(gate + ":") or ("; %s:" % gate) in annotation, annotation
    assert reason in annotation, annotation
    assert 'gpu_native_preflight_passed{node="%s"} 0' % node_name(case) in fleet.metrics(case)


def test_node_cordoned_by_an_admin_stays_cordoned(fleet):
    node = fleet.node("admin_cordoned")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "passed"
    assert "gpu-admin-cordoned passed but stays cordoned: it was cordoned by someone outside gpu_native.fleet" in \
        " ".join(fleet.result.stdout.split())


def test_api_unreachable_mid_run_leaves_the_node_cordoned_with_a_clear_reason(tmp_path, fleet_run):
    """The API goes away during the hardware gate (the dcgmi hook creates the relay's outage trigger)."""
    trigger = tmp_path / "api-down"
    hook = tmp_path / "dcgmi-then-api-down"
    hook.write_text('#!/bin/sh\n# test hook: the Kubernetes API goes away while dcgmi runs\n: > "%s"\nexec "%s" "$@"\n'
                    % (trigger, os.path.join(STANDINS, "dcgmi")))
    hook.chmod(0o755)
    result, fleet = fleet_run({"api_down": dict(preflight_dcgmi=str(hook))}, outage_trigger=str(trigger))
    assert fleet.relay.outage_done.wait(10)
    output = " ".join(result.stdout.split())
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Traceback" not in result.stdout and "An exception occurred" not in result.stdout, result.stdout[-3000:]
    assert "gpu-api-down: the verdict could not be written to the Kubernetes API" in output, result.stdout[-3000:]
    assert "Connection refused" in output and "Nothing was uncordoned" in output
    assert "The gates said FAILED: kubernetes: the Kubernetes API could not be read" in output
    node = fleet.node("api_down")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["gpu-native.io/cordoned-by"] == "preflight"
    assert node["metadata"]["labels"].get("gpu-native.io/preflight") != "passed"


def test_node_cordoned_by_an_admin_keeps_its_cordon_untouched(fleet):
    node = fleet.node("admin_cordoned")
    assert own_annotations(node) == {"ops.example.com/reason": "RMA"}   # no mark of ours
    assert "gpu-admin-cordoned: skipped: cordoned by someone outside gpu_native.fleet, not by preflight" in \
        " ".join(fleet.result.stdout.split())


def test_taking_over_an_admin_cordon_is_opt_in_and_the_node_joins(fleet):
    node = fleet.node("admin_take_over")
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "passed"
    assert not node["spec"].get("unschedulable")
    assert not set(MARKS) & set(node["metadata"]["annotations"])
    assert "gpu-admin-take-over: taken_over: cordoned by someone outside gpu_native.fleet; taken over by preflight" \
        in " ".join(fleet.result.stdout.split())


def test_a_run_killed_after_cordoning_is_resumed_and_the_passed_node_joins(fleet):
    node = fleet.node("killed_run")
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "passed"
    assert not node["spec"].get("unschedulable")
    assert not set(MARKS) & set(node["metadata"]["annotations"])
    assert "gpu-killed-run: resumed: already cordoned by preflight (run killed-run-1" in \
        " ".join(fleet.result.stdout.split())


def test_a_cordon_held_by_another_owner_is_never_released(fleet):
    node = fleet.node("mig_cordoned")
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "passed"
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["gpu-native.io/cordoned-by"] == "mig"
    assert node["metadata"]["annotations"]["gpu-native.io/run-id"] == "mig-run"
    assert "gpu-mig-cordoned passed but stays cordoned: it was cordoned by mig" in " ".join(fleet.result.stdout.split())


def test_check_mode_runs_no_active_test_and_changes_nothing(tmp_path, fleet_run):
    """--check runs the passive checks only: a dcgmi and an nvbandwidth that record their calls are never called, no
    CUDA kernel runs (a failing one would fail the gate), and nothing on the nodes changes."""
    record = tmp_path / "active-tests-invoked"
    env = {"DCGMI_STANDIN_RECORD": str(record), "NVBANDWIDTH_STANDIN_RECORD": str(record),
           "FAKE_CUDA_FAIL": "cuModuleLoadData=218"}
    cases = {"failing": dict(dcgm=DCGM_FAIL, env=env, preflight_nvbandwidth=os.path.join(STANDINS, "nvbandwidth")),
             "xid79": dict(FAULTS[1][1], env=env),
             "killed_run": dict(node=marked("preflight"), env=env),
             "admin_take_over": dict(CORDON_CASES["admin_take_over"], env=env)}
    before = dict((case, node_for(case, spec["node"])) for case, spec in cases.items() if "node" in spec)
    result, server = fleet_run(cases, check=True)
    assert result.returncode == 0, result.stdout[-3000:]
    assert not record.exists(), record.read_text()
    text = " ".join(result.stdout.split())
    assert "gpu-failing: PASSED" in text and "memory on GPU 3" not in text
    assert "check mode: dcgmi diag -r 2 would run; nothing was run" in text
    assert "cuda=skip" in text and "CUDA_ERROR_INVALID_PTX" not in text
    assert "gpu-xid79: FAILED" in text    # the passive checks still judge (gpu_health reads the kernel log)
    node = api_get(server, "/api/v1/nodes/gpu-failing")
    assert not node["spec"].get("unschedulable")
    assert "gpu-native.io/preflight" not in node["metadata"]["labels"]
    assert not set(MARKS) & set(node["metadata"].get("annotations", {}))
    assert not (tmp_path / "failing" / "textfile" / "gpu_native_preflight.prom").exists()
    for case, seeded in before.items():   # the cordons are reported, not changed
        node = api_get(server, "/api/v1/nodes/" + node_name(case))
        assert node["spec"]["unschedulable"] is True
        assert own_annotations(node) == seeded["metadata"]["annotations"]
    assert "gpu-killed-run: resumed:" in text and "gpu-admin-take-over: taken_over:" in text


ONBOARD_PLAY = """
- ansible.builtin.import_playbook: gpu_native.fleet.onboard
"""
ONBOARD_VARS = {"onboard_hosts": "all:!localhost", "onboard_become": False, "onboard_gather_facts": False,
                "onboard_sysctl": False,
                "onboard_driver": False, "onboard_toolkit": False, "onboard_containerd": False,
                "onboard_readiness": False, "onboard_mig": False, "onboard_runtime_class": False}


def test_onboard_skips_an_admin_cordon_and_finishes_a_killed_run(tmp_path, fleet_run, llm_ports):
    """onboard.yml with the node stack switched off: the cordon, the gates and the join, through _node_cordon."""
    (tmp_path / "dcgm-pass.json").write_text(DCGM_PASS)
    registering = [{"key": "gpu-native.io/unvalidated", "effect": "NoSchedule"}]
    cases = {"new": HEALTHY, "admin": ADMIN_CORDONED,
             "killed": dict(node=marked("onboard", taints=registering))}
    result, server = fleet_run(cases, llm_ports=llm_ports, play=ONBOARD_PLAY, args=["-e", json.dumps(ONBOARD_VARS)],
                               extra_env={"NVIDIA_SMI_STANDIN_CAPTURE": os.path.join(CAPTURES, "h100x8-healthy"),
                                          "DCGMI_STANDIN_OUTPUT": str(tmp_path / "dcgm-pass.json")})
    assert result.returncode == 0, result.stdout[-4000:]
    text = " ".join(result.stdout.split())
    for case in ("new", "killed"):
        node = api_get(server, "/api/v1/nodes/" + node_name(case))
        assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "passed", case
        assert not node["spec"].get("unschedulable"), case
        assert not set(MARKS) & set(node["metadata"].get("annotations", {})), case
        assert "gpu-native.io/unvalidated" not in [t["key"] for t in own_taints(node)], case
    assert "gpu-killed: resumed: already cordoned by onboard (run killed-run-1" in text
    admin = api_get(server, "/api/v1/nodes/gpu-admin")
    assert admin["spec"]["unschedulable"] is True
    assert own_annotations(admin) == {"ops.example.com/reason": "RMA"}
    assert "gpu-native.io/preflight" not in admin["metadata"]["labels"]     # no gates ran there
    summary = [line for line in result.stdout.splitlines() if "gpu-admin " in line]
    assert summary and "skipped" in summary[-1] and "cordoned by someone outside gpu_native.fleet" in summary[-1]


def test_onboard_without_the_runtime_class_stops_before_any_cordon(fleet_run, llm_ports):
    """No RuntimeClass nvidia and onboard_runtime_class false: the serving pod would be refused on every node, so
    onboard.yml stops first, naming the fix, and no node is cordoned or changed."""
    cases = {"new": HEALTHY, "other": dict(serving="ok")}
    result, server = fleet_run(cases, llm_ports=llm_ports, play=ONBOARD_PLAY, args=["-e", json.dumps(ONBOARD_VARS)],
                               runtime_class=False)
    assert result.returncode != 0
    text = " ".join(result.stdout.split())
    assert "RuntimeClass nvidia does not exist, so the serving gate's pod would be refused on every node; " \
           "nothing was cordoned or changed. Fix: leave onboard_runtime_class at true" in text, text[-3000:]
    for case in cases:
        node = api_get(server, "/api/v1/nodes/" + node_name(case))
        assert not node["spec"].get("unschedulable") and not set(MARKS) & set(node["metadata"].get("annotations", {}))
