"""The DRA kubernetes gate and the dra compliance row against the real API server (tests/kube_cluster.py, v1.35.4,
resource.k8s.io/v1): DeviceClasses and ResourceSlices created as NVIDIA's DRA driver publishes them
(tests/fixtures/dra, from the driver's chart and docs), read back the way the role reads them (field selectors
spec.nodeName and spec.driver; the kubelet-plugin pods by label and node), judged by the filters.

No kubelet runs: the plugin pod's status and the node's allocatable are written through the API, as a kubelet
would write them. The scheduler allocating a claim to a device is not exercised here (no kubelet plugin).
"""
import copy
import os
import secrets
import urllib.parse

import pytest
import yaml

from ansible_collections.gpu_native.fleet.plugins.filter.dra import dra_compliance, dra_kubernetes_gate

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "dra")
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
PLUGIN_LABELS = {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}
GPU_UUID = "GPU-2fa81118-5a5f-aa66-7660-471eed407181"
DRIVER = "580.126.20"


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.fixture(scope="module")
def device_classes(kube_cluster):
    """The driver's DeviceClasses (cluster-scoped, fixed names): created when absent, left for the session."""
    items = [yaml.safe_load(fixture(name)) for name in ("deviceclass-gpu.yaml", "deviceclass-mig.yaml", "deviceclass-vfio-gpu.yaml")]
    for item in items:
        status, answer = kube_cluster.request("POST", CLASSES, item)
        assert status in (201, 409), answer
    return [item["metadata"]["name"] for item in items]


@pytest.fixture
def dra_node(kube_cluster, kube_namespace, device_classes):
    """make(slices=('resourceslice_a100_gpu.yaml',), allocatable_gpus='0', pod_ready=True, edit=None) -> node name,
    with the node, its slices (renamed to the node) and a kubelet-plugin pod in this test's namespace."""
    created = []

    def make(slices=("resourceslice_a100_gpu.yaml",), allocatable_gpus="0", pod_ready=True, edit=None):
        node = "dra-%s" % secrets.token_hex(4)
        kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        created.append("/api/v1/nodes/" + node)
        capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": allocatable_gpus}
        kube_cluster.api("PATCH", "/api/v1/nodes/%s/status" % node,
                         {"status": {"capacity": capacity, "allocatable": capacity}},
                         content_type="application/merge-patch+json")
        objects = [yaml.safe_load(fixture(name).replace("ipp1-0033", node)) for name in slices]
        for index, item in enumerate(objects):
            item["metadata"]["name"] = "%s-gpu.nvidia.com-%d" % (node, index)
        if edit:
            edit(objects)
        for item in objects:
            kube_cluster.api("POST", SLICES, item)
            created.append("%s/%s" % (SLICES, item["metadata"]["name"]))
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "dra-driver-nvidia-gpu-kubelet-plugin-" + secrets.token_hex(3),
                            "labels": PLUGIN_LABELS},
               "spec": {"nodeName": node, "containers": [{"name": "gpus", "image": "registry.invalid/dra:0.4.1"}]}}
        pod = kube_cluster.api("POST", "/api/v1/namespaces/%s/pods" % kube_namespace, pod)
        ready = "True" if pod_ready else "False"
        kube_cluster.api("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (kube_namespace, pod["metadata"]["name"]),
                         {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}},
                         content_type="application/merge-patch+json")
        return node
    yield make
    for path in reversed(created):
        kube_cluster.request("DELETE", path)


def read(kube_cluster, namespace, node):
    """What the role reads (gate_kubernetes_dra.yml), as the server answers it."""
    selector = urllib.parse.quote("spec.nodeName=%s,spec.driver=gpu.nvidia.com" % node)
    slices = kube_cluster.api("GET", "%s?fieldSelector=%s" % (SLICES, selector))["items"]
    classes = kube_cluster.api("GET", CLASSES)["items"]
    pods = kube_cluster.api("GET", "/api/v1/namespaces/%s/pods?labelSelector=%s&fieldSelector=%s" % (
        namespace, urllib.parse.quote("dra-driver-nvidia-gpu-component=kubelet-plugin"),
        urllib.parse.quote("spec.nodeName=" + node)))["items"]
    return kube_cluster.api("GET", "/api/v1/nodes/" + node), slices, classes, pods


def gate(kube_cluster, namespace, node, smi="nvidia_smi_L_a100_gpu.txt", smi_text=None):
    node_obj, slices, classes, pods = read(kube_cluster, namespace, node)
    return dra_kubernetes_gate({"status": "fail", "reasons": ["device plugin: allocatable nvidia.com/gpu is 0"]},
                               "dra", node_obj, {"slices": slices, "device_classes": classes, "plugin_pods": pods,
                                                 "nvidia_smi_list": smi_text or fixture(smi),
                                                 "driver_version": DRIVER})


def test_the_server_serves_the_drivers_objects_and_refuses_the_docs_mig_name(kube_cluster, device_classes):
    assert {"gpu.nvidia.com", "mig.nvidia.com"} <= set(device_classes)
    item = yaml.safe_load(fixture("resourceslice_a100_mig.yaml"))
    item["metadata"]["name"] = "docs-name-" + secrets.token_hex(3)
    item["spec"]["devices"][0]["name"] = "gpu-0-mig-1g.5gb-0"  # resourceslice-attributes.md's example name
    status, answer = kube_cluster.request("POST", SLICES, item)
    assert status == 422 and "gpu-0-mig-1g.5gb-0" in str(answer), answer


def test_a_healthy_dra_node_passes(kube_cluster, kube_namespace, dra_node):
    node = dra_node()
    result = gate(kube_cluster, kube_namespace, node)
    assert (result["status"], result["reasons"]) == ("pass", []), result
    assert result["details"]["pools"] == {node: {"generation": 1, "resourceSliceCount": 1, "slices": 1, "stale": 0}}
    node_obj = kube_cluster.api("GET", "/api/v1/nodes/" + node)
    slices = read(kube_cluster, kube_namespace, node)[1]
    row = dra_compliance({"resources": slices}, "dra", {"resources": [node_obj]},
                         {"rc": 0, "stdout": fixture("nvidia_smi_L_a100_gpu.txt")})
    assert row["status"] == "pass", row


def test_a_healthy_mig_node_passes(kube_cluster, kube_namespace, dra_node):
    node = dra_node(slices=("resourceslice_a100_mig.yaml",))
    result = gate(kube_cluster, kube_namespace, node, smi="nvidia_smi_L_a100_mig.txt")
    assert (result["status"], result["reasons"]) == ("pass", []), result


def _incomplete(objects):
    objects[0]["spec"]["pool"]["resourceSliceCount"] = 2


def _stale(objects):
    newer = copy.deepcopy(objects[0])
    newer["metadata"]["name"] += "-g2"
    newer["spec"]["pool"]["generation"] = 2
    newer["spec"]["devices"][0]["name"] = "gpu-1"
    objects.append(newer)


SHORT = fixture("nvidia_smi_L_a100_gpu.txt") + \
    "GPU 1: NVIDIA A100-PCIE-40GB (UUID: GPU-00000000-1111-2222-3333-444444444444)\n"


@pytest.mark.parametrize("case, kwargs, smi, expected", [
    ("slices missing", {"slices": ()}, None, "no ResourceSlice of driver gpu.nvidia.com for node"),
    ("incomplete", {"edit": _incomplete}, None, "is incomplete: 1 of 2 ResourceSlices at generation 1"),
    ("stale", {"edit": _stale}, None, "stale ResourceSlices from an older generation"),
    ("one device short", {}, SHORT, "the slices publish 1 full GPUs, nvidia-smi shows 2 (MIG off)"),
    ("unknown uuid", {}, fixture("nvidia_smi_L_a100_gpu.txt").replace(GPU_UUID, "GPU-99999999-0000-0000-0000-000000000000"),
     "publish GPU %s (device gpu-0) that nvidia-smi does not show" % GPU_UUID),
    ("mig profile mismatch", {"slices": ("resourceslice_a100_mig.yaml",)},
     fixture("nvidia_smi_L_a100_mig.txt").replace("MIG 1g.5gb ", "MIG 2g.10gb"),
     "is published as profile 1g.5gb, nvidia-smi shows 2g.10gb"),
    ("double exposure", {"allocatable_gpus": "1"}, None,
     "double exposure: the node's allocatable offers nvidia.com/gpu: 1 from the device plugin"),
    ("plugin pod not ready", {"pod_ready": False}, None, "the DRA kubelet-plugin pod is not Running and Ready"),
])
def test_each_broken_dra_node_fails_with_its_reason(kube_cluster, kube_namespace, dra_node, case, kwargs, smi,
                                                    expected):
    node = dra_node(**kwargs)
    result = gate(kube_cluster, kube_namespace, node, smi_text=smi)
    assert result["status"] == "fail", (case, result)
    assert any(expected in reason for reason in result["reasons"]), (case, result["reasons"])


# --- the claim guardrails (gpu_policies_dra_claims) on the real API server's ValidatingAdmissionPolicy ------------
def test_the_claim_guardrails_on_the_real_api_server(kube_cluster):
    """The table of tests/gpu_policy_cases.py (CLAIM_CASES), each claim created in fresh namespaces standing for the
    table's ones; the namespaces carry resource.kubernetes.io/admin-access=true (the label's name since 1.34; it was
    resource.k8s.io/admin-access in 1.33), so that the API's own adminAccess check
    lets the claims through and a refusal is the policy's."""
    from ansible_collections.gpu_native.fleet.plugins.plugin_utils.gpu_policies import render_claim_policy_objects
    from gpu_policy_cases import CLAIM_ADMIN_NAMESPACES, CLAIM_CASES, CLAIM_CLASS_NAMESPACES

    roles_vars = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "gpu_policies", "vars", "main.yml")
    with open(roles_vars, encoding="utf-8") as handle:
        claim_cel = yaml.safe_load(handle)["__gpu_policies_claim_cel"]
    suffix = secrets.token_hex(3)
    names = {ns: "%s-%s" % (ns, suffix) for ns in ("training", "inference", "web", "kube-system")}
    for real in names.values():
        kube_cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": real, "labels": {"resource.kubernetes.io/admin-access": "true"}}})
    policy, binding = render_claim_policy_objects(
        claim_cel, "vap", name="gpu-claim-guardrails-" + suffix,
        class_namespaces=dict((cls, [names[ns] for ns in nss]) for cls, nss in CLAIM_CLASS_NAMESPACES.items()),
        admin_namespaces=[names[ns] for ns in CLAIM_ADMIN_NAMESPACES])
    # bound to this test's namespaces only (other tests' claims are not judged)
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(names.values())}]}}
    admission = "/apis/admissionregistration.k8s.io/v1/"
    kube_cluster.api("POST", admission + "validatingadmissionpolicies", policy)
    kube_cluster.api("POST", admission + "validatingadmissionpolicybindings", binding)

    def create(obj, name):
        obj = copy.deepcopy(obj)
        ns = names[obj["metadata"]["namespace"]]
        obj["metadata"].update(namespace=ns, name=name)
        plural = "resourceclaimtemplates" if obj["kind"] == "ResourceClaimTemplate" else "resourceclaims"
        return kube_cluster.request("POST", "/apis/resource.k8s.io/v1/namespaces/%s/%s" % (ns, plural), obj)

    try:
        refused = next(case for case in CLAIM_CASES if case[2])
        kube_cluster.wait_for("the claim policy to refuse claims", lambda: create(
            refused[1], "probe-%s" % secrets.token_hex(3))[0] == 422, timeout=60, interval=0.5)
        for index, (case_id, obj, expected) in enumerate(CLAIM_CASES):
            status, answer = create(obj, "c%d" % index)
            if expected is None:
                assert status == 201, (case_id, answer)
            else:
                for table, real in names.items():
                    expected = expected.replace("namespace " + table + ")", "namespace " + real + ")")
                assert status == 422, (case_id, answer)
                assert expected in answer["message"], (case_id, answer["message"])
    finally:
        kube_cluster.request("DELETE", admission + "validatingadmissionpolicybindings/" + binding["metadata"]["name"])
        kube_cluster.request("DELETE", admission + "validatingadmissionpolicies/" + policy["metadata"]["name"])
        for real in names.values():
            kube_cluster.delete_namespace(real)


# --- the preflight role's kubernetes gate under gpu_native_allocation=dra, as the onboarding job ------------------
PLAY = """
- name: Preflight, the kubernetes gate only
  hosts: localhost
  gather_facts: false
  roles:
    - gpu_native.fleet.preflight
"""


@pytest.mark.parametrize("allocatable, expected", [
    ("0", "PASSED (kubernetes=pass)"),
    ("1", "FAILED (kubernetes=fail): kubernetes: double exposure: the node's allocatable offers nvidia.com/gpu: 1"),
])
def test_the_preflight_role_judges_a_dra_node(kube_cluster, kube_namespace, kube_job_kubeconfig, dra_node,
                                              run_playbook, tmp_path, allocatable, expected):
    import json
    node = dra_node(allocatable_gpus=allocatable)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$1\" = -L ] && cat <<'X'\n%sX\n" % fixture("nvidia_smi_L_a100_gpu.txt"))
    smi.chmod(0o755)
    variables = {"preflight_node_name": node, "preflight_gates": ["kubernetes"], "preflight_metrics_dir": "",
                 "gpu_native_allocation": "dra", "preflight_nvidia_smi": str(smi),
                 "preflight_dra_plugin_namespace": kube_namespace}
    result = run_playbook(PLAY, kubeconfig_path=kube_job_kubeconfig("onboarding"),
                          args=["-e", json.dumps(variables)])
    assert result.returncode == 0, result.stdout[-4000:]
    text = " ".join(result.stdout.split())
    assert "%s: %s" % (node, expected) in text, result.stdout[-5000:]


# --- playbooks/compliance.yml's dra row, as the compliance job -------------------------------------------------------
@pytest.mark.parametrize("allocatable, status, actual", [
    ("0", "pass", "1 ResourceSlice(s), 1 GPU(s), MIG none"),
    ("1", "fail", "double exposure: the node's allocatable offers nvidia.com/gpu: 1"),
])
def test_the_compliance_playbook_writes_the_dra_row(kube_job_kubeconfig, dra_node, run_playbook, tmp_path,
                                                    allocatable, status, actual):
    import json
    node = dra_node(allocatable_gpus=allocatable)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$1\" = -L ] && cat <<'X'\n%sX\n" % fixture("nvidia_smi_L_a100_gpu.txt"))
    smi.chmod(0o755)
    playbook = os.path.join(os.path.dirname(__file__), "..", "..", "..", "playbooks", "compliance.yml")
    variables = {"compliance_hosts": "localhost", "compliance_node_name": node, "compliance_become": False,
                 "compliance_checks": [], "compliance_nvidia_smi": str(smi), "gpu_native_allocation": "dra",
                 "compliance_kubeconfig": kube_job_kubeconfig("compliance"),
                 "compliance_report_dir": str(tmp_path / "reports")}
    with open(playbook, encoding="utf-8") as handle:
        result = run_playbook(handle.read(), args=["-e", json.dumps(variables)])
    with open(str(tmp_path / "reports" / "compliance.json"), encoding="utf-8") as handle:
        rows = dict((row["check"], row) for row in json.load(handle))
    assert rows["dra"]["status"] == status, (rows, result.stdout[-3000:])
    assert rows["dra"]["actual"].startswith(actual), rows["dra"]
    assert rows["kubernetes"]["status"] == "pass", rows["kubernetes"]
