"""The stand-in's simulated kubelet (--simulate-kubelet) and its API outage hook (--outage-trigger)."""
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import testlib

SERVER = testlib.k8s_standin_server


def node(name, annotations=None, ready=True, address=None):
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations or {}},
           "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    if address:
        obj["status"]["addresses"] = [{"type": "Hostname", "address": name},
                                      {"type": "InternalIP", "address": address}]
    return obj


def pod(name, node_name=None, image="localhost:5000/vllm-openai:v0.11.0"):
    spec = {"containers": [{"name": "server", "image": image,
                            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def call(server, method, path, body=None, content_type="application/json"):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + server.token, "Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def create_and_sync(server, obj):
    created = call(server, "POST", "/api/v1/namespaces/default/pods", obj)
    server.kubelet.sync()  # the kubelet thread may already have done it; a second pass changes nothing
    return created, call(server, "GET", "/api/v1/namespaces/default/pods/" + obj["metadata"]["name"])


def condition(pod_obj, kind):
    return [c for c in pod_obj["status"]["conditions"] if c["type"] == kind][0]


def events_of(server, name):
    items = call(server, "GET", "/api/v1/namespaces/default/events")["items"]
    return [(e["type"], e["reason"], e["message"]) for e in items if e["involvedObject"]["name"] == name]


@pytest.fixture
def kubelet_standin(standin_factory):
    return standin_factory(seed=[
        node("gpu-a", {"standin.gpu-native.io/pod-ip": "10.244.1.7"}, address="192.0.2.10"),
        node("gpu-b"),
        node("gpu-pull", {"standin.gpu-native.io/pods-never-ready": "ImagePullBackOff"}),
        node("gpu-create", {"standin.gpu-native.io/pods-never-ready": "true"}),
        node("gpu-down", ready=False),
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "seeded", "namespace": "default"},
         "spec": {"nodeName": "gpu-b", "containers": [{"name": "c", "image": "c:1"}]},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    ], simulate_kubelet=True)


def test_a_bound_pod_becomes_running_and_ready_with_the_nodes_pod_ip(kubelet_standin):
    created, started = create_and_sync(kubelet_standin, pod("llm", "gpu-a"))
    assert created["status"]["phase"] == "Pending"  # the create answer comes before the kubelet
    status = started["status"]
    assert status["phase"] == "Running"
    assert status["podIP"] == "10.244.1.7" and status["podIPs"] == [{"ip": "10.244.1.7"}]
    assert status["hostIP"] == "192.0.2.10"
    for kind in ("Ready", "ContainersReady", "Initialized", "PodScheduled", "PodReadyToStartContainers"):
        assert condition(started, kind)["status"] == "True", kind
    [container] = status["containerStatuses"]
    assert container["ready"] is True and container["started"] is True and "running" in container["state"]
    assert container["image"] == "localhost:5000/vllm-openai:v0.11.0"
    assert status["qosClass"] == "Burstable"
    assert int(started["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert sorted(reason for _type, reason, _msg in events_of(kubelet_standin, "llm")) == \
        ["Created", "Pulled", "Pulling", "Started"]
    assert ("Normal", "Pulling", 'Pulling image "localhost:5000/vllm-openai:v0.11.0"') in \
        events_of(kubelet_standin, "llm")


def test_the_default_pod_ip_is_loopback(kubelet_standin):
    _created, started = create_and_sync(kubelet_standin, pod("llm-b", "gpu-b"))
    assert started["status"]["podIP"] == "127.0.0.1" and started["status"]["hostIP"] == "127.0.0.1"


def test_a_node_that_cannot_pull_keeps_its_pods_pending_in_image_pull_back_off(kubelet_standin):
    _created, parked = create_and_sync(kubelet_standin, pod("llm-pull", "gpu-pull", image="mirror.invalid/x:1"))
    status = parked["status"]
    assert status["phase"] == "Pending"
    assert condition(parked, "Ready")["status"] == "False"
    assert condition(parked, "Ready")["reason"] == "ContainersNotReady"
    waiting = status["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "mirror.invalid/x:1"'}
    assert status["containerStatuses"][0]["ready"] is False
    assert ("Warning", "Failed", "Error: ErrImagePull") in events_of(kubelet_standin, "llm-pull")
    version = parked["metadata"]["resourceVersion"]
    assert kubelet_standin.kubelet.sync() == []  # still waiting: no new write
    assert call(kubelet_standin, "GET", "/api/v1/namespaces/default/pods/llm-pull")["metadata"][
        "resourceVersion"] == version
    # the registry is fixed: the annotation goes, the pod starts
    call(kubelet_standin, "PATCH", "/api/v1/nodes/gpu-pull",
         {"metadata": {"annotations": {"standin.gpu-native.io/pods-never-ready": None}}},
         "application/merge-patch+json")
    kubelet_standin.kubelet.sync()
    assert call(kubelet_standin, "GET", "/api/v1/namespaces/default/pods/llm-pull")["status"]["phase"] == "Running"


def test_a_node_whose_runtime_hangs_keeps_its_pods_in_container_creating(kubelet_standin):
    _created, parked = create_and_sync(kubelet_standin, pod("llm-create", "gpu-create"))
    assert parked["status"]["phase"] == "Pending"
    assert parked["status"]["containerStatuses"][0]["state"]["waiting"] == {"reason": "ContainerCreating"}
    assert "podIP" not in parked["status"]  # no sandbox yet
    assert condition(parked, "PodReadyToStartContainers")["status"] == "False"


@pytest.mark.parametrize("node_name", [None, "no-such-node", "gpu-down"])
def test_pods_without_a_live_node_stay_pending(kubelet_standin, node_name):
    _created, same = create_and_sync(kubelet_standin, pod("orphan", node_name))
    assert same["status"] == {"phase": "Pending"}


def test_a_pod_bound_later_is_started(kubelet_standin):
    create_and_sync(kubelet_standin, pod("later"))
    call(kubelet_standin, "PATCH", "/api/v1/namespaces/default/pods/later", {"spec": {"nodeName": "gpu-b"}},
         "application/merge-patch+json")
    kubelet_standin.kubelet.sync()
    assert call(kubelet_standin, "GET", "/api/v1/namespaces/default/pods/later")["status"]["phase"] == "Running"


def test_pods_with_a_status_already_are_left_alone(kubelet_standin):
    before = call(kubelet_standin, "GET", "/api/v1/namespaces/default/pods/seeded")
    kubelet_standin.kubelet.sync()
    assert call(kubelet_standin, "GET", "/api/v1/namespaces/default/pods/seeded") == before


def test_the_delay_holds_a_pod_back(standin_factory):
    server = standin_factory(seed=[node("gpu-b")], simulate_kubelet=True, kubelet_delay=3600)
    created, same = create_and_sync(server, pod("slow", "gpu-b"))
    assert same["status"] == {"phase": "Pending"}
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_without_the_option_there_is_no_kubelet(standin_factory):
    server = standin_factory(seed=[node("gpu-b")])
    assert server.kubelet is None
    call(server, "POST", "/api/v1/namespaces/default/pods", pod("idle", "gpu-b"))
    assert call(server, "GET", "/api/v1/namespaces/default/pods/idle")["status"] == {"phase": "Pending"}


def test_the_kubelet_thread_starts_pods_on_its_own(kubelet_standin):
    call(kubelet_standin, "POST", "/api/v1/namespaces/default/pods", pod("by-thread", "gpu-b"))
    with kubelet_standin.store.lock:
        for _attempt in range(100):  # the thread wakes on every store change
            obj = kubelet_standin.store.objects[("", "pods", "default", "by-thread")]
            if obj["status"]["phase"] == "Running":
                break
            kubelet_standin.store.changed.wait(0.1)
    assert obj["status"]["phase"] == "Running"


def test_the_outage_trigger_makes_the_api_unreachable_and_keeps_the_objects(standin_factory, tmp_path):
    trigger = tmp_path / "api-down"
    server = standin_factory(seed=[node("gpu-b")], outage_trigger=str(trigger))
    assert call(server, "GET", "/api/v1/nodes/gpu-b")["metadata"]["name"] == "gpu-b"
    trigger.write_text("")
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        call(server, "GET", "/api/v1/nodes/gpu-b")  # dropped without an answer
    assert server.httpd.outage_done.wait(10)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5)
    assert ("", "nodes", "", "gpu-b") in server.store.objects
    server.stop()  # stopping a server that is already down returns


def test_the_cli_documents_the_options():
    out = subprocess.run([sys.executable, SERVER.__file__, "--help"], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    for option in ("--simulate-kubelet", "--kubelet-delay", "--outage-trigger"):
        assert option in out


@pytest.mark.parametrize("field,value", [("args", ["--port", 8000]), ("command", [1]),
                                         ("env", [{"name": "PORT", "value": 8000}])])
def test_container_strings_are_strings_as_for_the_real_decoder(standin_factory, field, value):
    server = standin_factory(seed=[node("gpu-b")])
    bad = pod("bad-args", "gpu-b")
    bad["spec"]["containers"][0][field] = value
    with pytest.raises(urllib.error.HTTPError) as caught:
        call(server, "POST", "/api/v1/namespaces/default/pods", bad)
    assert caught.value.code == 400
    assert "json: cannot unmarshal number into Go struct field" in json.loads(caught.value.read())["message"]
    with pytest.raises(urllib.error.HTTPError):
        call(server, "GET", "/api/v1/namespaces/default/pods/bad-args")  # nothing was created
