"""The stand-in answers like kube-apiserver: raw HTTP and the kubernetes client."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client, config, watch
from kubernetes.dynamic import DynamicClient

from testlib import K8S_STANDIN_SERVER_PY as SERVER_PY  # noqa: E402

GPU_NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "gpu-node-1", "labels": {"team": "ml", "kubernetes.io/hostname": "gpu-node-1"}},
    "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
}


def pod(name, node, labels=None, namespace="ml", phase="Running", owner="ReplicaSet"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": "trainer"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": "owner",
                                              "uid": "6a0c1d7e-3c1e-4d8a-9a43-0d6b7c2f1a01", "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "example.invalid/c:1"}]},
            "status": {"phase": phase}}


def call(server, method, path, body=None, content_type="application/json", token=True):
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + server.token)
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw.startswith(b"{") else raw.decode()
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def seeded(standin_factory):
    return standin_factory(seed=[GPU_NODE, pod("trainer-1", "gpu-node-1"), pod("trainer-2", "gpu-node-2")])


@pytest.fixture
def core(seeded, tmp_path):
    cfg = client.Configuration()
    config.load_kube_config(config_file=seeded.write_kubeconfig(str(tmp_path / "kc")),
                            client_configuration=cfg)
    return client.ApiClient(cfg)


# -- discovery and auth ------------------------------------------------------

def test_discovery_lists_the_groups_and_resources_we_use(standin):
    code, version = call(standin, "GET", "/version")
    assert code == 200 and version["major"] == "1" and version["gitVersion"].startswith("v1.")
    code, api = call(standin, "GET", "/api")
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]
    code, groups = call(standin, "GET", "/apis")
    names = {g["name"]: g for g in groups["groups"]}
    for group in ("apps", "node.k8s.io", "policy", "monitoring.coreos.com", "apiextensions.k8s.io"):
        assert group in names
    assert names["node.k8s.io"]["preferredVersion"] == {"groupVersion": "node.k8s.io/v1", "version": "v1"}
    code, core_v1 = call(standin, "GET", "/api/v1")
    by_name = {r["name"]: r for r in core_v1["resources"]}
    assert by_name["nodes"]["namespaced"] is False and "patch" in by_name["nodes"]["verbs"]
    assert by_name["pods/eviction"]["group"] == "policy" and by_name["pods/eviction"]["kind"] == "Eviction"
    assert by_name["configmaps"]["shortNames"] == ["cm"]
    _code, rcs = call(standin, "GET", "/apis/node.k8s.io/v1")
    assert [r["name"] for r in rcs["resources"]] == ["runtimeclasses"]
    _code, pdbs = call(standin, "GET", "/apis/policy/v1")
    assert "poddisruptionbudgets" in [r["name"] for r in pdbs["resources"]]
    _code, mon = call(standin, "GET", "/apis/monitoring.coreos.com/v1")
    assert {"prometheusrules", "servicemonitors", "podmonitors"} <= {r["name"] for r in mon["resources"]}
    _code, apps = call(standin, "GET", "/apis/apps/v1")
    assert {"daemonsets", "deployments"} <= {r["name"] for r in apps["resources"]}
    code, missing = call(standin, "GET", "/apis/nope.example.com/v1")
    assert code == 404 and missing["reason"] == "NotFound"


def test_requests_without_the_token_are_unauthorised(standin):
    code, body = call(standin, "GET", "/api/v1/nodes", token=False)
    assert code == 401 and body["reason"] == "Unauthorized"


def test_binds_loopback_only(standin):
    assert standin.httpd.server_address[0] == "127.0.0.1"


# -- nodes: get, list, patches -----------------------------------------------

def test_node_list_with_label_and_field_selectors(seeded, core):
    v1 = client.CoreV1Api(core)
    seeded_two = client.V1Node(metadata=client.V1ObjectMeta(name="cpu-node-1", labels={"team": "web"}))
    v1.create_node(seeded_two)
    assert [n.metadata.name for n in v1.list_node(label_selector="team=ml").items] == ["gpu-node-1"]
    assert [n.metadata.name for n in v1.list_node(label_selector="team in (ml,web),team!=web").items] == \
        ["gpu-node-1"]
    assert [n.metadata.name for n in v1.list_node(label_selector="!kubernetes.io/hostname").items] == \
        ["cpu-node-1"]
    assert [n.metadata.name for n in v1.list_node(field_selector="metadata.name=cpu-node-1").items] == \
        ["cpu-node-1"]
    code, body = call(seeded, "GET", "/api/v1/nodes?fieldSelector=spec.nodeName%3Dx")
    assert code == 400 and body["message"] == "field label not supported: spec.nodeName"


def test_strategic_merge_patch_keeps_foreign_labels_and_replaces_taints(seeded, core):
    v1 = client.CoreV1Api(core)
    before = v1.read_node("gpu-node-1")
    patched = v1.patch_node("gpu-node-1", {"metadata": {"labels": {"accelerator": "nvidia-gpu", "team": None}},
                                           "spec": {"unschedulable": True,
                                                    "taints": [{"key": "nvidia.com/gpu", "value": "present",
                                                                "effect": "NoSchedule"}]}})
    assert patched.metadata.labels == {"kubernetes.io/hostname": "gpu-node-1", "accelerator": "nvidia-gpu"}
    assert patched.spec.unschedulable is True
    # Node.spec.taints has no patchMergeKey: the list is replaced whole, as in Kubernetes
    assert [(t.key, t.effect) for t in patched.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]
    assert int(patched.metadata.resource_version) > int(before.metadata.resource_version)
    assert patched.metadata.uid == before.metadata.uid


def test_merge_and_json_patch_on_node(seeded):
    code, node = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1",
                      {"metadata": {"annotations": {"gpu.nvidia.com/owner": "fleet"}}},
                      "application/merge-patch+json")
    assert code == 200 and node["metadata"]["annotations"] == {"gpu.nvidia.com/owner": "fleet"}
    ops = [{"op": "test", "path": "/metadata/labels/team", "value": "ml"},
           {"op": "add", "path": "/metadata/labels/gpu.nvidia.com~1model", "value": "NVIDIA-H100-80GB-HBM3"},
           {"op": "add", "path": "/spec/taints/-", "value": {"key": "nvidia.com/gpu", "value": "present",
                                                             "effect": "NoSchedule"}},
           {"op": "replace", "path": "/spec/unschedulable", "value": False}]
    code, body = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1", ops, "application/json-patch+json")
    assert code == 422 and "doc is missing key: /spec/unschedulable" in body["message"]
    ops[-1]["op"] = "add"
    code, node = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1", ops, "application/json-patch+json")
    assert code == 200
    assert node["metadata"]["labels"]["gpu.nvidia.com/model"] == "NVIDIA-H100-80GB-HBM3"
    assert [t["key"] for t in node["spec"]["taints"]] == ["dedicated", "nvidia.com/gpu"]
    code, body = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1",
                      [{"op": "test", "path": "/metadata/labels/team", "value": "other"}],
                      "application/json-patch+json")
    assert code == 422 and "testing value /metadata/labels/team failed" in body["message"]


def test_resource_version_no_op_conflict_and_dry_run(seeded):
    _code, node = call(seeded, "GET", "/api/v1/nodes/gpu-node-1")
    rv = node["metadata"]["resourceVersion"]
    _code, same = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1", {"metadata": {"labels": {"team": "ml"}}},
                       "application/strategic-merge-patch+json")
    assert same["metadata"]["resourceVersion"] == rv  # a no-op write does not bump it
    _code, dry = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1?dryRun=All",
                      {"metadata": {"labels": {"x": "y"}}}, "application/strategic-merge-patch+json")
    assert dry["metadata"]["labels"]["x"] == "y"
    _code, after = call(seeded, "GET", "/api/v1/nodes/gpu-node-1")
    assert "x" not in after["metadata"]["labels"] and after["metadata"]["resourceVersion"] == rv
    code, body = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1",
                      {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}},
                      "application/strategic-merge-patch+json")
    assert code == 409 and body["reason"] == "Conflict"
    assert body["message"].startswith('Operation cannot be fulfilled on nodes "gpu-node-1": the object has been')
    node["metadata"]["labels"]["x"] = "y"
    code, put = call(seeded, "PUT", "/api/v1/nodes/gpu-node-1", node)
    assert code == 200 and int(put["metadata"]["resourceVersion"]) > int(rv)
    code, body = call(seeded, "PUT", "/api/v1/nodes/gpu-node-1", node)  # stale resourceVersion now
    assert code == 409


def test_error_bodies_match_the_real_server(seeded):
    code, body = call(seeded, "GET", "/apis/node.k8s.io/v1/runtimeclasses/nvidia")
    assert code == 404 and body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'runtimeclasses.node.k8s.io "nvidia" not found', "reason": "NotFound",
        "details": {"name": "nvidia", "group": "node.k8s.io", "kind": "runtimeclasses"}, "code": 404}
    code, body = call(seeded, "POST", "/api/v1/nodes", GPU_NODE)
    assert code == 409 and body["reason"] == "AlreadyExists" and body["message"] == 'nodes "gpu-node-1" already exists'
    code, body = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1",
                      {"metadata": {"labels": {"gpu.nvidia.com/model": "NVIDIA H100 80GB HBM3"}}},
                      "application/strategic-merge-patch+json")
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('Node "gpu-node-1" is invalid: metadata.labels: Invalid value: '
                                      '"NVIDIA H100 80GB HBM3"')
    assert body["details"]["causes"][0]["field"] == "metadata.labels"
    code, body = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1",
                      {"metadata": {"labels": {"gpu.nvidia.com/memory": 80}}},
                      "application/strategic-merge-patch+json")
    assert code == 400 and body["reason"] == "BadRequest"
    code, body = call(seeded, "PATCH", "/api/v1/nodes/gpu-node-1",
                      {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"},
                                           {"key": "a", "value": "b", "effect": "NoSchedule"},
                                           {"key": "b", "effect": "Sometimes"}]}},
                      "application/strategic-merge-patch+json")
    assert code == 422 and "spec.taints: Duplicate value" in body["message"]
    assert 'spec.taints[2].effect: Unsupported value: "Sometimes"' in body["message"]
    code, body = call(seeded, "POST", "/api/v1/namespaces/nowhere/configmaps",
                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    assert code == 404 and body["message"] == 'namespaces "nowhere" not found'


def test_runtimeclass_validation_and_immutable_handler(standin):
    path = "/apis/node.k8s.io/v1/runtimeclasses"
    code, body = call(standin, "POST", path, {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                              "metadata": {"name": "nvidia"}, "handler": "NVIDIA_runtime"})
    assert code == 422 and body["message"].startswith(
        'RuntimeClass.node.k8s.io "nvidia" is invalid: handler: Invalid value: "NVIDIA_runtime": a lowercase RFC '
        '1123 label')
    rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
          "handler": "nvidia", "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
          "scheduling": {"nodeSelector": {"accelerator": "nvidia-gpu"},
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    code, created = call(standin, "POST", path, rc)
    assert code == 201 and created["handler"] == "nvidia" and created["metadata"]["uid"]
    code, body = call(standin, "PATCH", path + "/nvidia", {"handler": "nvidia-cdi"},
                      "application/merge-patch+json")
    assert code == 422 and 'handler: Invalid value: "nvidia-cdi": field is immutable' in body["message"]
    code, body = call(standin, "PATCH", path + "/nvidia",
                      {"scheduling": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
                       "overhead": {"podFixed": {"cpu": "lots"}}}, "application/merge-patch+json")
    assert code == 422 and "value must be empty when `operator` is 'Exists'" in body["message"]
    assert "overhead.podFixed[cpu]" in body["message"]


# -- pods, eviction, PDBs ----------------------------------------------------

def test_pods_by_node_and_eviction_honours_the_pdb(seeded, core):
    v1 = client.CoreV1Api(core)
    on_node = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-node-1")
    assert [p.metadata.name for p in on_node.items] == ["trainer-1"]
    policy = client.PolicyV1Api(core)
    policy.create_namespaced_pod_disruption_budget("ml", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainer"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "trainer"}}}})
    status = policy.read_namespaced_pod_disruption_budget("trainer", "ml").status
    assert (status.current_healthy, status.desired_healthy, status.disruptions_allowed) == (2, 2, 0)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "trainer-1", "namespace": "ml"}}
    with pytest.raises(client.ApiException) as err:
        v1.create_namespaced_pod_eviction("trainer-1", "ml", eviction)
    assert err.value.status == 429
    body = json.loads(err.value.body)
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert v1.read_namespaced_pod("trainer-1", "ml").metadata.name == "trainer-1"  # still there
    policy.patch_namespaced_pod_disruption_budget("trainer", "ml", {"spec": {"minAvailable": 1}})
    v1.create_namespaced_pod_eviction("trainer-1", "ml", eviction)
    with pytest.raises(client.ApiException) as err:
        v1.read_namespaced_pod("trainer-1", "ml")
    assert err.value.status == 404
    # the last healthy pod is protected again
    with pytest.raises(client.ApiException) as err:
        v1.create_namespaced_pod_eviction("trainer-2", "ml", dict(eviction, metadata={"name": "trainer-2"}))
    assert err.value.status == 429


def test_delete_with_finalizers_and_collection(seeded):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["example.com/x"],
                                                                "labels": {"tier": "a"}}, "data": {"k": "v"}}
    assert call(seeded, "POST", "/api/v1/namespaces/default/configmaps", cm)[0] == 201
    code, body = call(seeded, "DELETE", "/api/v1/namespaces/default/configmaps/held")
    assert code == 202 and body["metadata"]["deletionTimestamp"]
    code, _body = call(seeded, "PATCH", "/api/v1/namespaces/default/configmaps/held",
                       {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    assert code == 200
    # the finalizer is gone, the deletion is pending: a plain delete removes it now
    code, body = call(seeded, "DELETE", "/api/v1/namespaces/default/configmaps/held")
    assert code == 200 and body["status"] == "Success" and body["details"]["name"] == "held"
    assert call(seeded, "GET", "/api/v1/namespaces/default/configmaps/held")[0] == 404
    code, body = call(seeded, "DELETE", "/api/v1/namespaces/ml/pods?labelSelector=app%3Dtrainer")
    assert code == 200 and len(body["items"]) == 2
    assert call(seeded, "GET", "/api/v1/namespaces/ml/pods")[1]["items"] == []


# -- custom resources and CRDs -----------------------------------------------

def test_custom_resources_are_stored_as_is(standin):
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "gpu", "namespace": "default"},
            "spec": {"groups": [{"name": "gpu", "rules": [
                {"alert": "GpuXid", "expr": "x > 0", "anything": {"nested": [1, 2]}}]}]}}
    path = "/apis/monitoring.coreos.com/v1/namespaces/default/prometheusrules"
    code, created = call(standin, "POST", path, rule)
    assert code == 201 and created["spec"] == rule["spec"] and created["metadata"]["generation"] == 1
    code, body = call(standin, "PATCH", path + "/gpu", {"spec": {"groups": []}},
                      "application/strategic-merge-patch+json")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"
    code, patched = call(standin, "PATCH", path + "/gpu", {"spec": {"groups": []}}, "application/merge-patch+json")
    assert code == 200 and patched["spec"] == {"groups": []} and patched["metadata"]["generation"] == 2
    _code, listing = call(standin, "GET", "/apis/monitoring.coreos.com/v1/prometheusrules")
    assert listing["kind"] == "PrometheusRuleList" and listing["items"][0]["kind"] == "PrometheusRule"


def test_a_new_crd_adds_its_api_and_deleting_it_removes_objects(standin):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "gpupolicies.fleet.example.com"},
           "spec": {"group": "fleet.example.com", "scope": "Cluster",
                    "names": {"plural": "gpupolicies", "singular": "gpupolicy", "kind": "GpuPolicy"},
                    "versions": [{"name": "v1alpha1", "served": True, "storage": True}]}}
    assert call(standin, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)[0] == 201
    _code, resources = call(standin, "GET", "/apis/fleet.example.com/v1alpha1")
    assert resources["resources"][0]["kind"] == "GpuPolicy"
    obj = {"apiVersion": "fleet.example.com/v1alpha1", "kind": "GpuPolicy", "metadata": {"name": "p"},
           "spec": {"anything": True}}
    assert call(standin, "POST", "/apis/fleet.example.com/v1alpha1/gpupolicies", obj)[0] == 201
    call(standin, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpupolicies.fleet.example.com")
    assert call(standin, "GET", "/apis/fleet.example.com/v1alpha1")[0] == 404


def test_server_side_apply_needs_a_field_manager_and_creates(standin):
    path = "/api/v1/namespaces/default/configmaps/applied"
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: '1'\n"
    code, err = call(standin, "PATCH", path, body, "application/apply-patch+yaml")
    assert code == 422 and "fieldManager: Required value" in err["message"]
    code, created = call(standin, "PATCH", path + "?fieldManager=test", body, "application/apply-patch+yaml")
    assert code == 201 and created["data"] == {"a": "1"}
    code, again = call(standin, "PATCH", path + "?fieldManager=test", body, "application/apply-patch+yaml")
    assert code == 200 and again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


# -- dynamic client, watch, persistence, CLI ---------------------------------

def test_dynamic_client_discovers_and_creates(core):
    dyn = DynamicClient(core)
    rc_api = dyn.resources.get(api_version="node.k8s.io/v1", kind="RuntimeClass")
    assert rc_api.namespaced is False
    rc_api.create(body={"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                        "handler": "nvidia"})
    assert rc_api.get(name="nvidia").handler == "nvidia"
    assert dyn.resources.get(api_version="monitoring.coreos.com/v1", kind="PrometheusRule").namespaced


def test_watch_reports_changes(seeded, core):
    v1 = client.CoreV1Api(core)
    start_rv = v1.list_node().metadata.resource_version

    def later():
        time.sleep(0.3)
        v1.patch_node("gpu-node-1", {"metadata": {"labels": {"watched": "yes"}}})
    threading.Thread(target=later).start()
    events = []
    for event in watch.Watch().stream(v1.list_node, resource_version=start_rv, timeout_seconds=3):
        events.append((event["type"], event["object"].metadata.labels.get("watched")))
        break
    assert events == [("MODIFIED", "yes")]


def test_state_survives_a_restart(standin_factory, tmp_path):
    state_dir = str(tmp_path / "persist")
    first = standin_factory(seed=[GPU_NODE], state_dir=state_dir)
    call(first, "PATCH", "/api/v1/nodes/gpu-node-1", {"metadata": {"labels": {"kept": "yes"}}},
         "application/merge-patch+json")
    rv = call(first, "GET", "/api/v1/nodes/gpu-node-1")[1]["metadata"]["resourceVersion"]
    first.stop()
    second = standin_factory(state_dir=state_dir)  # no seed: the state file wins
    code, node = call(second, "GET", "/api/v1/nodes/gpu-node-1")
    assert code == 200 and node["metadata"]["labels"]["kept"] == "yes"
    assert node["metadata"]["resourceVersion"] == rv
    _code, created = call(second, "POST", "/api/v1/namespaces/default/configmaps",
                          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}})
    assert int(created["metadata"]["resourceVersion"]) > int(rv)


def test_cli_daemon_start_and_stop(tmp_path):
    seed = tmp_path / "seed.yaml"
    seed.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n")
    state = tmp_path / "cli"
    out = subprocess.run([sys.executable, SERVER_PY, "--daemon", "--port", "0", "--state-dir", str(state),
                          "--seed", str(seed), "--kubeconfig-out", str(tmp_path / "kc"),
                          "--pidfile", str(tmp_path / "pid")], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    pid = int((tmp_path / "pid").read_text())
    assert info["pid"] == pid and info["server"].startswith("http://127.0.0.1:")
    try:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(tmp_path / "kc"), client_configuration=cfg)
        nodes = client.CoreV1Api(client.ApiClient(cfg)).list_node()
        assert [n.metadata.name for n in nodes.items] == ["n1"]
    finally:
        stop = subprocess.run([sys.executable, SERVER_PY, "stop", "--pidfile", str(tmp_path / "pid")],
                              capture_output=True, text=True, timeout=60, check=False)
    assert json.loads(stop.stdout)["stopped"] is True
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert (state / "state.json").exists()
    port = int(info["server"].rsplit(":", 1)[1])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_cli_refuses_an_invalid_seed(tmp_path):
    seed = tmp_path / "seed.yaml"
    seed.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {model: 'NVIDIA H100'}\n")
    out = subprocess.run([sys.executable, SERVER_PY, "--daemon", "--state-dir", str(tmp_path / "s"),
                          "--seed", str(seed)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1 and "did not start" in out.stderr
    assert 'seed object rejected: Node "n1" is invalid: metadata.labels' in (tmp_path / "s" / "server.log").read_text()
