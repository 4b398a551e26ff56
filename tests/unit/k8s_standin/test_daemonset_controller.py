"""The stand-in's DaemonSet controller: pods follow the node labels the template's nodeSelector names."""
import json
import urllib.request

NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/gpu.deploy.device-plugin": "true"}}}
OTHER = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-node-1", "labels": {}}}
DS = {"apiVersion": "apps/v1", "kind": "DaemonSet",
      "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"},
      "spec": {"selector": {"matchLabels": {"app": "nvidia-device-plugin-daemonset"}},
               "template": {"metadata": {"labels": {"app": "nvidia-device-plugin-daemonset"}},
                            "spec": {"nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true"},
                                     "containers": [{"name": "p", "image": "example.invalid/p:1"}]}}}}
ORPHAN = {"apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": "seeded-plugin", "namespace": "gpu-operator", "labels": {"app": "x"},
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gone",
                                            "uid": "2f4e6a8c-1b3d-4e5f-8a9b-0c1d2e3f4a5b", "controller": True}]},
          "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "c", "image": "example.invalid/c:1"}]}}


def call(server, method, path, body=None, content_type="application/json"):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + server.token, "Content-Type": content_type})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def plugin_pods(server):
    items = call(server, "GET", "/api/v1/namespaces/gpu-operator/pods?labelSelector=app%3Dnvidia-device-plugin-daemonset")
    return [(p["metadata"]["name"], p["spec"]["nodeName"], p["status"]["phase"]) for p in items["items"]]


def label(server, value):
    call(server, "PATCH", "/api/v1/nodes/gpu-node-1",
         {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": value}}}, "application/merge-patch+json")


def test_pods_leave_when_the_label_is_paused_and_come_back_when_restored(standin_factory):
    server = standin_factory(seed=[NODE, OTHER, ORPHAN, DS])
    first = plugin_pods(server)
    assert [(n, phase) for _name, n, phase in first] == [("gpu-node-1", "Running")]  # not on the unlabelled node
    label(server, "paused-for-mig-change")
    assert plugin_pods(server) == []
    label(server, "true")
    again = plugin_pods(server)
    assert [(n, phase) for _name, n, phase in again] == [("gpu-node-1", "Running")]
    assert again[0][0] != first[0][0]  # a new pod
    ds = call(server, "GET", "/apis/apps/v1/namespaces/gpu-operator/daemonsets/nvidia-device-plugin-daemonset")
    assert ds["status"]["desiredNumberScheduled"] == 1
    # a pod whose DaemonSet is not stored is left alone
    assert call(server, "GET", "/api/v1/namespaces/gpu-operator/pods/seeded-plugin")["metadata"]["name"] == "seeded-plugin"
