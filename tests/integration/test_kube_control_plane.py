"""The real control plane of the tests (tests/kube_cluster.py) is the upstream one, and each part of it works.

Each test proves one component by a behaviour only that component has: the API server's version and its
admission, the controller-manager's ServiceAccount, token and disruption controllers, the scheduler.
"""
import base64
import http.client
import json
import secrets
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

import kube_cluster as control_plane


def pod(name, node_name=None, labels=None):
    spec = {"containers": [{"name": "main", "image": "registry.invalid/pause:3.10"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def test_the_binaries_are_the_pinned_upstream_release(kube_cluster):
    version = kube_cluster.api("GET", "/version")
    assert version["gitVersion"] == kube_cluster.version == "v1.35.4"
    assert (version["major"], version["minor"]) == ("1", "35")
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"):
        out = subprocess.run([kube_cluster.binaries + "/" + name, "--version"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, check=True).stdout
        assert out.strip() == "Kubernetes v1.35.4", (name, out)
    assert kube_cluster.startup_seconds is not None
    # the API groups the collection's roles use, and resource.k8s.io/v1 for the DRA work
    groups = {g["name"]: [v["version"] for v in g["versions"]] for g in kube_cluster.api("GET", "/apis")["groups"]}
    for group, version in (("node.k8s.io", "v1"), ("policy", "v1"), ("admissionregistration.k8s.io", "v1"),
                           ("apps", "v1"), ("resource.k8s.io", "v1")):
        assert version in groups.get(group, []), (group, groups.get(group))


def test_a_new_namespace_gets_its_default_serviceaccount_token_and_root_ca(kube_cluster, kube_namespace):
    ns = kube_namespace
    # the serviceaccount controller made `default` (the fixture waited for it); the root-ca publisher the CA
    account = kube_cluster.api("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % ns)
    assert account["metadata"]["name"] == "default"
    ca = kube_cluster.wait_for("kube-root-ca.crt", lambda: kube_cluster.request(
        "GET", "/api/v1/namespaces/%s/configmaps/kube-root-ca.crt" % ns)[1].get("data"))
    with open(kube_cluster.pki.ca_path, encoding="ascii") as handle:
        assert ca["ca.crt"].strip() == handle.read().strip()
    # the token controller (--service-account-private-key-file, --root-ca-file) fills a legacy token Secret
    kube_cluster.api("POST", "/api/v1/namespaces/%s/secrets" % ns, {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "legacy-token", "annotations": {"kubernetes.io/service-account.name": "default"}}})
    data = kube_cluster.wait_for("the token controller to fill legacy-token", lambda: kube_cluster.api(
        "GET", "/api/v1/namespaces/%s/secrets/legacy-token" % ns).get("data", {}).get("token"))
    token = base64.b64decode(data).decode()
    # the API server accepts it (authentication) and RBAC refuses what the account was not granted
    review = kube_cluster.api("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, token=token)
    assert review["status"]["userInfo"]["username"] == "system:serviceaccount:%s:default" % ns
    status, answer = kube_cluster.request("GET", "/api/v1/nodes", token=token)
    assert status == 403, answer
    assert 'cannot list resource "nodes"' in answer["message"]
    # and a bad token is 401, not 403
    assert kube_cluster.request("GET", "/api/v1/nodes", token="not-a-token")[0] == 401


def test_a_pod_without_a_node_stays_pending_unschedulable(kube_cluster, kube_namespace):
    ns = kube_namespace
    created = kube_cluster.api("POST", "/api/v1/namespaces/%s/pods" % ns, pod("unplaced"))
    # admission and defaulting of a real server
    assert created["status"]["phase"] == "Pending" and created["status"]["qosClass"] == "BestEffort"
    assert {t["key"] for t in created["spec"]["tolerations"]} == {"node.kubernetes.io/not-ready",
                                                                  "node.kubernetes.io/unreachable"}

    def scheduled_condition():
        conditions = kube_cluster.api("GET", "/api/v1/namespaces/%s/pods/unplaced" % ns)["status"].get("conditions", [])
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)
    condition = kube_cluster.wait_for("the scheduler's verdict", scheduled_condition)
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable", condition
    # no node can take it: none registered ("no nodes available"), or only other tests' nodes, not ready ("0/n")
    assert condition["message"] == "no nodes available to schedule pods" or \
        condition["message"].startswith("0/"), condition
    assert "nodeName" not in kube_cluster.api("GET", "/api/v1/namespaces/%s/pods/unplaced" % ns)["spec"]


def test_an_eviction_under_a_pod_disruption_budget_answers_429(kube_cluster, kube_namespace):
    ns = kube_namespace
    node = "pdb-node-" + secrets.token_hex(3)
    kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    try:
        kube_cluster.api("POST", "/api/v1/namespaces/%s/pods" % ns, pod("guarded", node, {"app": "guarded"}))
        # no kubelet runs it: write the status a kubelet would (a Pending pod is evicted whatever its budget)
        kube_cluster.api("PATCH", "/api/v1/namespaces/%s/pods/guarded/status" % ns,
                         {"status": {"phase": "Running",
                                     "conditions": [{"type": "Ready", "status": "True"}]}},
                         content_type="application/merge-patch+json")
        kube_cluster.api("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % ns, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-one"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})

        def observed():
            budget = kube_cluster.api("GET", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/keep-one" % ns)
            status = budget.get("status", {})
            return status if status.get("observedGeneration") == budget["metadata"]["generation"] else None
        status = kube_cluster.wait_for("the disruption controller to observe keep-one", observed)
        assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (1, 1, 0)

        code, answer = kube_cluster.request(
            "POST", "/api/v1/namespaces/%s/pods/guarded/eviction" % ns,
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "guarded", "namespace": ns}})
        assert code == 429, answer
        assert answer["reason"] == "TooManyRequests"
        assert "Cannot evict pod as it would violate the pod's disruption budget." in answer["message"]
        assert answer["details"]["causes"][0] == {"reason": "DisruptionBudget",
                                                  "message": "The disruption budget keep-one needs 1 healthy pods "
                                                             "and has 1 currently"}
        assert kube_cluster.api("GET", "/api/v1/namespaces/%s/pods/guarded" % ns)["metadata"].get(
            "deletionTimestamp") is None
    finally:
        kube_cluster.request("DELETE", "/api/v1/nodes/" + node)


def test_the_kubelet_standin_renews_a_lease_and_leaves_a_settled_node_unchanged(kube_cluster):
    """As a kubelet since node leases: the heartbeat is the Lease; the Node changes only when its status does (a
    status heartbeat every 2 s changed it under kubernetes.core's read-then-patch, stop 40's CI failure)."""
    node = "lease-" + secrets.token_hex(3)
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + node
    kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    try:
        with control_plane.KubeletStandin(kube_cluster, [node]) as kubelet:
            def settled():
                found = kube_cluster.api("GET", "/api/v1/nodes/" + node)
                ready = [c["status"] for c in found["status"].get("conditions", []) if c["type"] == "Ready"]
                return found if ready == ["True"] and not found["spec"].get("taints") else None
            before = kube_cluster.wait_for("node %s Ready without taints" % node, settled)
            first_renewal = kube_cluster.api("GET", lease_path)["spec"]["renewTime"]
            time.sleep(5)
            after = kube_cluster.api("GET", "/api/v1/nodes/" + node)
            lease = kube_cluster.api("GET", lease_path)
            assert not kubelet.errors, kubelet.errors
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert lease["spec"]["holderIdentity"] == node and lease["spec"]["renewTime"] > first_renewal
        assert lease["metadata"]["ownerReferences"][0]["uid"] == before["metadata"]["uid"]
    finally:
        kube_cluster.request("DELETE", "/api/v1/nodes/" + node)


def test_a_node_history_of_a_quiet_node_ends_at_once(kube_cluster):
    """The watch of a node nobody changes sends nothing; leaving the context must not wait for an event (it hung
    a whole integration run once the kubelet stand-in stopped changing settled nodes)."""
    node = "quiet-" + secrets.token_hex(3)
    kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    try:
        with control_plane.NodeHistory(kube_cluster, [node]) as history:
            time.sleep(1)
            started = time.monotonic()
        assert time.monotonic() - started < 12
        assert not history._thread.is_alive()  # pylint: disable=protected-access
        assert history.entries == [{"node": node, "event": "created", "unschedulable": False, "annotations": {}}]
        assert history.errors == []
    finally:
        kube_cluster.request("DELETE", "/api/v1/nodes/" + node)


def _node_path(name):
    return "/api/v1/nodes/" + name


def test_the_audit_log_of_node_writes_tells_the_same_history_as_a_watch(kube_cluster):
    """The API server's audit log (what Molecule's verify reads once the run is over) and a watch held through the
    changes see the same cordons and marks, in the same order; a status post and a refused write leave no entry."""
    nodes = ["audited-%s-%d" % (secrets.token_hex(3), number) for number in (1, 2)]
    merge = "application/merge-patch+json"
    try:
        with control_plane.NodeHistory(kube_cluster, nodes) as watch:
            for node in nodes:
                kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                           "metadata": {"name": node}})
            kube_cluster.api("PATCH", _node_path(nodes[0]), {"spec": {"unschedulable": True}, "metadata": {
                "annotations": {"gpu-native.io/cordoned-by": "test"}}}, content_type=merge)
            kube_cluster.api("PATCH", _node_path(nodes[0]) + "/status", {"status": {"capacity": {"pods": "10"}}},
                             content_type=merge)
            assert kube_cluster.request("PATCH", _node_path(nodes[1]), {"spec": {"taints": [{"key": "x"}]}},
                                        content_type=merge)[0] == 422  # no effect: refused
            kube_cluster.api("PATCH", _node_path(nodes[0]), {"spec": {"unschedulable": None}, "metadata": {
                "annotations": {"gpu-native.io/cordoned-by": None}}}, content_type=merge)
            kube_cluster.api("PATCH", _node_path(nodes[1]), {"spec": {"unschedulable": True}}, content_type=merge)
            kube_cluster.api("DELETE", _node_path(nodes[1]))
            kube_cluster.wait_for("the watch to see the deletion", lambda: len(watch.entries) == 6)
        audited = control_plane.NodeWrites.from_audit_log(kube_cluster.directory, nodes)
        assert audited.entries == watch.entries
        assert [(e["node"], e["event"], e["unschedulable"]) for e in audited.entries] == [
            (nodes[0], "created", False), (nodes[1], "created", False), (nodes[0], "changed", True),
            (nodes[0], "changed", False), (nodes[1], "changed", True), (nodes[1], "deleted", False)]
        assert audited.entries[2]["annotations"] == {"gpu-native.io/cordoned-by": "test"}
        assert audited.max_cordoned() == 1
    finally:
        for node in nodes:
            kube_cluster.request("DELETE", _node_path(node))


def test_a_validating_admission_policy_whose_cel_does_not_compile_is_refused(kube_cluster):
    name = "broken-cel-" + secrets.token_hex(3)
    code, answer = kube_cluster.request("POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "validations": [{"expression": "object.spec.containers.all(c, c.image.startsWith('x')"}]}})
    assert code == 422, answer
    assert answer["reason"] == "Invalid"
    assert answer["details"]["causes"][0]["field"] == "spec.validations[0].expression"
    assert "compilation failed" in answer["details"]["causes"][0]["message"]
    assert kube_cluster.request(
        "GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/" + name)[0] == 404


def test_pod_security_admission_is_on(kube_cluster):
    ns = kube_cluster.create_namespace(labels={"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        code, answer = kube_cluster.request("POST", "/api/v1/namespaces/%s/pods" % ns, pod("loose"))
        assert code == 403, answer
        assert 'violates PodSecurity "restricted:latest"' in answer["message"]
    finally:
        kube_cluster.delete_namespace(ns)


def test_the_control_plane_listens_on_loopback_only(kube_cluster):
    assert kube_cluster.url.startswith("https://127.0.0.1:")
    with open("/proc/net/tcp", encoding="ascii") as handle:
        rows = [line.split() for line in handle.readlines()[1:]]
    ours = set(kube_cluster.ports.values())
    listening = {int(row[1].split(":")[1], 16): row[1].split(":")[0] for row in rows if row[3] == "0A"}
    for port in ours:
        assert listening.get(port) == "0100007F", (port, listening.get(port))  # 127.0.0.1
    assert json.loads(open(kube_cluster.kubeconfig, encoding="utf-8").read())["clusters"][0]["cluster"]["server"] \
        == kube_cluster.url


def test_start_fails_with_the_fix_when_the_binaries_are_missing(tmp_path):
    plane = control_plane.ControlPlane(str(tmp_path / "data"), binaries=str(tmp_path / "nothing"))
    with pytest.raises(control_plane.ControlPlaneError) as err:
        plane.start()
    assert "Fix: run `make kube-build`" in str(err.value)
    assert not plane.processes


def test_seed_creates_each_object_with_its_status(kube_cluster, tmp_path):
    name = "seed-node-" + secrets.token_hex(3)
    seed = tmp_path / "seed.yml"
    seed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"team": "ml"}},
         "status": {"capacity": {"nvidia.com/gpu": "8"}}},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": "kata"}]}))
    try:
        assert control_plane.seed(kube_cluster, str(seed)) == 2
        node = kube_cluster.api("GET", "/api/v1/nodes/" + name)
        assert node["metadata"]["labels"] == {"team": "ml"}
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"  # written through the status subresource
        assert kube_cluster.api("GET", "/apis/node.k8s.io/v1/runtimeclasses/" + name)["handler"] == "kata"
    finally:
        kube_cluster.request("DELETE", "/api/v1/nodes/" + name)
        kube_cluster.request("DELETE", "/apis/node.k8s.io/v1/runtimeclasses/" + name)
    seed.write_text("- just a list\n")
    with pytest.raises(control_plane.ControlPlaneError, match="is not one List document. Fix:"):
        control_plane.seed(kube_cluster, str(seed))


def test_up_with_a_job_writes_a_kubeconfig_that_is_not_admin(tmp_path):
    """`kube_cluster.py up --job` (the Molecule scenarios' control plane): the job's token has its ClusterRole's
    rights and no more; `up` with --seed over a running one refuses instead of seeding twice.  `--node-address
    ADDRESS --kubelet NAME` (a test host's real kubelet): the relay on that address reaches the API, and the
    kubelet's kubeconfig is node NAME's identity, which the Node authorizer and NodeRestriction hold to its own
    Node."""
    directory = str(tmp_path / "plane")
    command = [sys.executable, control_plane.__file__]
    seed = tmp_path / "seed.yml"
    seed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1"}}]}))
    up = subprocess.run(command + ["up", "--dir", directory, "--seed", str(seed), "--job", "compliance",
                                   "--node-address", "127.0.0.1", "--kubelet", "gpu-node-2"],
                        capture_output=True, text=True, timeout=300, check=False)
    relay_pid = None
    try:
        assert up.returncode == 0, up.stderr
        assert "seeded 1 objects" in up.stderr
        job = yaml.safe_load((tmp_path / "plane" / "compliance.kubeconfig").read_text())
        token = job["users"][0]["user"]["token"]
        state = json.loads((tmp_path / "plane" / "state.json").read_text())
        status = plane_request(state["url"], directory, "GET", "/api/v1/nodes/gpu-node-1", token)
        assert status == 200  # compliance reads nodes
        status = plane_request(state["url"], directory, "PATCH", "/api/v1/nodes/gpu-node-1", token,
                               body={"metadata": {"labels": {"x": "y"}}})
        assert status == 403  # and changes none
        again = subprocess.run(command + ["up", "--dir", directory, "--seed", str(seed)],
                               capture_output=True, text=True, timeout=60, check=False)
        assert again.returncode == 1 and "Fix: run `down --dir" in again.stderr

        relay = state["node-relay"]
        relay_pid = relay["pid"]
        kubelet = json.loads((tmp_path / "plane" / "kubelet-gpu-node-2.kubeconfig").read_text())
        assert kubelet["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:%d" % relay["port"]
        assert relay["port"] != state["ports"]["kube-apiserver"]
        as_node = node_request(kubelet, tmp_path)
        assert as_node("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                 "metadata": {"name": "gpu-node-2"}}) == 201  # registers itself
        assert as_node("GET", "/api/v1/nodes/gpu-node-2") == 200
        assert as_node("PATCH", "/api/v1/nodes/gpu-node-1", {"metadata": {"labels": {"x": "y"}}}) == 403
        assert as_node("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                 "metadata": {"name": "gpu-node-3"}}) == 403  # no other node
    finally:
        subprocess.run(command + ["down", "--dir", directory], capture_output=True, timeout=120, check=False)
    if relay_pid is not None:  # `down` stopped the relay with the control plane
        assert not control_plane._alive(relay_pid)  # pylint: disable=protected-access


def node_request(kubeconfig, tmp_path):
    """A function (method, path, body=None) -> HTTP status of a request with the client certificate of
    `kubeconfig` (a kubelet's: TLS server name from its cluster, server through the node relay)."""
    cluster, user = kubeconfig["clusters"][0]["cluster"], kubeconfig["users"][0]["user"]
    files = {}
    for name, key in (("ca.crt", "certificate-authority-data"), ("node.crt", "client-certificate-data"),
                      ("node.key", "client-key-data")):
        files[name] = tmp_path / name
        files[name].write_bytes(base64.b64decode(cluster.get(key) or user.get(key)))
    context = ssl.create_default_context(cafile=str(files["ca.crt"]))
    context.load_cert_chain(str(files["node.crt"]), str(files["node.key"]))
    host, port = cluster["server"].split("://", 1)[1].rsplit(":", 1)

    def request(method, path, body=None):
        connection = http.client.HTTPSConnection(host, int(port), timeout=30, context=context)
        # TLS to the relay's address, verified against the name the API server's certificate holds (tls-server-name)
        connection.sock = context.wrap_socket(socket.create_connection((host, int(port)), timeout=30),
                                              server_hostname=cluster["tls-server-name"])
        headers = {"Accept": "application/json", "Content-Type": "application/merge-patch+json" if method == "PATCH"
                   else "application/json"}
        connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        status = connection.getresponse().status
        connection.close()
        return status
    return request


def plane_request(url, directory, method, path, token, body=None):
    """The HTTP status of one request with a bearer token to the control plane `up` started in `directory`."""
    context = ssl.create_default_context(cafile=directory + "/ca.crt")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": "Bearer " + token, "Accept": "application/json",
               "Content-Type": "application/merge-patch+json"}
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("arguments, message", [
    (["--kubelet", "gpu-node-1"], "--kubelet needs --node-address"),
    (["--node-address", "not-an-address"], "does not appear to be an IPv4 or IPv6 address"),
    (["--node-address", "127.0.0.1", "--kubelet", "GPU_Node"], "is not a node name"),
])
def test_up_refuses_bad_kubelet_arguments_before_anything_starts(tmp_path, arguments, message):
    directory = tmp_path / "plane"
    up = subprocess.run([sys.executable, control_plane.__file__, "up", "--dir", str(directory)] + arguments,
                        capture_output=True, text=True, timeout=60, check=False)
    assert up.returncode == 2 and message in up.stderr, up.stderr
    assert not directory.exists()  # nothing was started or written
