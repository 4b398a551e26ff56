# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rules that choose which pods leave a node (module_utils/k8s/gpu_pods.py) and the eviction loop, on a fake API."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s import gpu_pods

NODE = "gpu-node-1"


def pod(name, namespace="ml", gpu=None, section="limits", init=False, owner="ReplicaSet", phase="Running",
        node=NODE, volumes=None, annotations=None, terminating=False, labels=None, uid=None):
    container = {"name": "c", "image": "i"}
    if gpu:
        container["resources"] = {section: {gpu: 1}}
    spec = {"nodeName": node, "containers": [{"name": "main", "image": "i"}]}
    if init:
        spec["initContainers"] = [container]
    else:
        spec["containers"] = [container]
    if volumes:
        spec["volumes"] = volumes
    meta = {"name": name, "namespace": namespace, "labels": labels or {"app": name}, "uid": uid or name + "-uid"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    if annotations:
        meta["annotations"] = annotations
    if terminating:
        meta["deletionTimestamp"] = "2026-11-30T22:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def keys(pods):
    return sorted(gpu_pods.pod_key(p) for p in pods)


def reasons(selection):
    return {"%s/%s" % (s["namespace"], s["pod"]): s["reason"] for s in selection.skipped}


# -- gpu_resources -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("resource, section, init", [
    ("nvidia.com/gpu", "limits", False), ("nvidia.com/gpu", "requests", False),
    ("nvidia.com/mig-1g.10gb", "limits", False), ("nvidia.com/mig-3g.40gb", "requests", True),
    ("nvidia.com/gpu.shared", "limits", False)])
def test_every_nvidia_resource_in_containers_and_init_containers_counts(resource, section, init):
    assert gpu_pods.gpu_resources(pod("p", gpu=resource, section=section, init=init)) == [resource]


def test_other_resources_and_other_prefixes():
    assert gpu_pods.gpu_resources(pod("p", gpu="cpu")) == []
    assert gpu_pods.gpu_resources(pod("p", gpu="amd.com/gpu")) == []
    assert gpu_pods.gpu_resources(pod("p", gpu="amd.com/gpu"), ["amd.com/", "nvidia.com/"]) == ["amd.com/gpu"]
    assert gpu_pods.gpu_resources(pod("p", gpu="nvidia.com/gpu"), ["nvidia.com/mig-"]) == []


@pytest.mark.parametrize("hostile", [None, "x", {"spec": None}, {"spec": {"containers": "x"}},
                                     {"spec": {"containers": [None, {"resources": []}]}},
                                     {"spec": {"containers": [{"resources": {"limits": {1: 2}}}]}}])
def test_malformed_pods_use_no_gpu(hostile):
    assert gpu_pods.gpu_resources(hostile) == []


# -- select_pods ---------------------------------------------------------------------------------------------------

NODE_PODS = [
    pod("trainer", gpu="nvidia.com/gpu"),
    pod("mig-init", gpu="nvidia.com/mig-1g.10gb", init=True, owner="Job"),
    pod("bare-gpu", gpu="nvidia.com/gpu", owner=None, volumes=[{"name": "s", "emptyDir": {}}]),
    pod("web", namespace="default"),
    pod("dcgm", namespace="gpu-operator", gpu="nvidia.com/gpu", owner="DaemonSet"),
    pod("done", gpu="nvidia.com/gpu", phase="Succeeded"),
    pod("crashed", gpu="nvidia.com/gpu", phase="Failed"),
    pod("static", namespace="kube-system", owner=None, annotations={gpu_pods.MIRROR_ANNOTATION: "x"}),
    pod("leaving", gpu="nvidia.com/gpu", terminating=True),
    pod("leaving-web", namespace="default", terminating=True),
]


def test_gpu_mode_evicts_gpu_pods_whatever_their_owner_or_volumes():
    selection = gpu_pods.select_pods(NODE_PODS, node=NODE)
    assert keys(selection.evict) == ["ml/bare-gpu", "ml/mig-init", "ml/trainer"]
    assert keys(selection.wait) == ["ml/leaving"]
    assert selection.refused == []
    why = reasons(selection)
    assert why["gpu-operator/dcgm"].startswith("DaemonSet pod")
    assert why["ml/done"] == "finished (Succeeded)" and why["ml/crashed"] == "finished (Failed)"
    assert why["kube-system/static"].startswith("mirror")
    assert why["default/web"] == "uses no nvidia.com/* resource"
    assert why["default/leaving-web"] == "uses no nvidia.com/* resource"


def test_drain_adds_the_other_pods_but_never_daemonset_mirror_or_finished_ones():
    selection = gpu_pods.select_pods(NODE_PODS, drain=True, node=NODE)
    assert keys(selection.evict) == ["default/web", "ml/bare-gpu", "ml/mig-init", "ml/trainer"]
    assert keys(selection.wait) == ["default/leaving-web", "ml/leaving"]
    assert sorted(reasons(selection)) == ["gpu-operator/dcgm", "kube-system/static", "ml/crashed", "ml/done"]


def test_drain_refuses_emptydir_and_unmanaged_non_gpu_pods_like_kubectl():
    pods = [pod("scratch", volumes=[{"name": "s", "emptyDir": {}}]), pod("bare", owner=None),
            pod("disk", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}])]
    selection = gpu_pods.select_pods(pods, drain=True)
    assert [(gpu_pods.pod_key(p), why.split(";")[0]) for p, why in selection.refused] == [
        ("ml/scratch", "uses emptyDir (local data)"),
        ("ml/bare", "not managed by a controller, nothing would recreate it")]
    assert keys(selection.evict) == ["ml/disk"]
    selection = gpu_pods.select_pods(pods, drain=True, delete_emptydir_data=True, force=True)
    assert selection.refused == [] and keys(selection.evict) == ["ml/bare", "ml/disk", "ml/scratch"]


def test_an_owner_reference_that_is_not_a_controller_does_not_count():
    lone = pod("lone", owner=None)
    lone["metadata"]["ownerReferences"] = [{"kind": "ConfigMap", "name": "c"}]
    assert len(gpu_pods.select_pods([lone], drain=True).refused) == 1


def test_pods_of_another_node_are_skipped():
    selection = gpu_pods.select_pods([pod("p", gpu="nvidia.com/gpu", node="other")], node=NODE)
    assert selection.evict == [] and reasons(selection) == {"ml/p": "bound to another node"}


def test_too_many_pods_is_refused():
    with pytest.raises(gpu_pods.EvictionError, match="more than the 5000"):
        gpu_pods.select_pods([pod("p")] * 5001)


# -- selectors and 429 answers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("selector, labels, expected", [
    ({"matchLabels": {"app": "a"}}, {"app": "a", "x": "y"}, True),
    ({"matchLabels": {"app": "a"}}, {"app": "b"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}, {"app": "b"}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {"app": "a"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, {"app": "a"}, False),
    ({}, {"app": "a"}, True), (None, {"app": "a"}, False)])
def test_selector_matches(selector, labels, expected):
    assert gpu_pods.selector_matches(selector, labels) is expected


def test_the_pdb_name_comes_from_the_api_cause():
    body = {"message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget",
                                    "message": "The disruption budget serve-pdb needs 1 healthy pods and has 1 currently"}]}}
    assert gpu_pods.pdb_from_status(body) == "serve-pdb"
    assert gpu_pods.pdb_from_status({"message": "Too many requests"}) is None
    assert gpu_pods.pdb_from_status("junk") is None


# -- Evictor -------------------------------------------------------------------------------------------------------

class FakeApi(object):
    """Pods by key; ``refuse`` maps a pod key to how many evictions get 429 before one succeeds."""

    def __init__(self, pods, refuse=None, errors=None, pdbs=None, cause=True, sticky=()):
        self.pods = dict((gpu_pods.pod_key(p), p) for p in pods)
        self.refuse = dict(refuse or {})
        self.errors = dict(errors or {})
        self.pdbs = pdbs or []
        self.cause = cause
        self.sticky = set(sticky)  # evicted, but stay terminating
        self.calls = []

    def evict(self, namespace, name, grace_period, dry_run):
        key = "%s/%s" % (namespace, name)
        self.calls.append((key, grace_period, dry_run))
        if key in self.errors:
            return self.errors[key]
        if key not in self.pods:
            return 404, {"message": "not found"}
        if self.refuse.get(key, 0) != 0:
            if not dry_run:
                self.refuse[key] -= 1
            causes = [{"reason": "DisruptionBudget", "message": "The disruption budget %s-pdb needs 1 healthy pods "
                                                                "and has 1 currently" % name}] if self.cause else []
            return 429, {"message": "Cannot evict pod as it would violate the pod's disruption budget.",
                         "details": {"causes": causes}}
        if not dry_run:
            if key in self.sticky:
                self.pods[key]["metadata"]["deletionTimestamp"] = "now"
            else:
                del self.pods[key]
        return 201, {"status": "Success"}

    def read_pod(self, namespace, name):
        return self.pods.get("%s/%s" % (namespace, name))

    def list_pdbs(self, namespace):
        return self.pdbs


class Clock(object):
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def evictor(api, timeout=30, grace=None, clock=None):
    clock = clock or Clock()
    return gpu_pods.Evictor(api, NODE, timeout, grace, wait_sleep=5, clock=clock, sleep=clock.sleep), clock


def test_evicts_retries_429_until_the_budget_allows_and_waits_for_nothing_more():
    pods = [pod("a", gpu="nvidia.com/gpu"), pod("b", gpu="nvidia.com/gpu")]
    api = FakeApi(pods, refuse={"ml/b": 2})
    ev, clock = evictor(api, grace=30)
    result = ev.run(gpu_pods.select_pods(pods))
    assert [e["pod"] for e in result["evicted"]] == ["a", "b"]
    assert result["blocked"] == []
    assert [c for c in api.calls if c[0] == "ml/b"] == [("ml/b", 30, False)] * 3
    assert [c for c in api.calls if c[0] == "ml/a"] == [("ml/a", 30, False)]
    assert clock.sleeps == [5, 5]


def test_timeout_names_the_blocked_pod_and_its_pdb_and_reports_what_was_evicted():
    pods = [pod("a", gpu="nvidia.com/gpu"), pod("serve", gpu="nvidia.com/gpu")]
    api = FakeApi(pods, refuse={"ml/serve": -1})
    ev, clock = evictor(api, timeout=12)
    with pytest.raises(gpu_pods.EvictionError) as err:
        ev.run(gpu_pods.select_pods(pods))
    msg = str(err.value)
    assert msg.startswith("node gpu-node-1: eviction of ml/serve (PodDisruptionBudget serve-pdb) still refused "
                          "after 12s; let the budget allow a disruption")
    assert [e["pod"] for e in err.value.result["evicted"]] == ["a"]
    assert err.value.result["blocked"][0]["pdb"] == "serve-pdb"
    assert clock.now == 1012.0  # the last sleep is cut to the deadline
    assert list(api.pods) == ["ml/serve"]


def test_without_a_cause_the_pdb_is_found_by_its_selector():
    pods = [pod("serve", gpu="nvidia.com/gpu", labels={"app": "serve"})]
    pdbs = [{"metadata": {"name": "other"}, "spec": {"selector": {"matchLabels": {"app": "x"}}}},
            {"metadata": {"name": "serve-budget"}, "spec": {"selector": {"matchLabels": {"app": "serve"}}}}]
    api = FakeApi(pods, refuse={"ml/serve": -1}, pdbs=pdbs, cause=False)
    ev, _clock = evictor(api, timeout=1)
    with pytest.raises(gpu_pods.EvictionError, match=r"ml/serve \(PodDisruptionBudget serve-budget\)"):
        ev.run(gpu_pods.select_pods(pods))


def test_pods_already_terminating_are_waited_on_not_evicted():
    pods = [pod("leaving", gpu="nvidia.com/gpu", terminating=True)]
    api = FakeApi(pods)
    ev, _clock = evictor(api, timeout=10)
    with pytest.raises(gpu_pods.EvictionError) as err:
        ev.run(gpu_pods.select_pods(pods))
    assert str(err.value) == ("node gpu-node-1: ml/leaving still terminating on the node; find what holds the pod "
                              "(finalizers, a long grace period) or raise timeout, then run again")
    assert api.calls == []
    assert err.value.result["terminating"] == [{"pod": "leaving", "namespace": "ml"}]


def test_an_evicted_pod_is_waited_for_until_gone_or_replaced():
    pods = [pod("sts-0", gpu="nvidia.com/gpu")]
    api = FakeApi(pods, sticky=["ml/sts-0"])
    ev, clock = evictor(api)
    original = clock.sleep

    def sleep(seconds):
        original(seconds)
        if len(clock.sleeps) == 2:  # the StatefulSet controller puts a new sts-0 elsewhere
            api.pods["ml/sts-0"] = pod("sts-0", gpu="nvidia.com/gpu", node="gpu-node-2", uid="new")

    ev.sleep = sleep
    result = ev.run(gpu_pods.select_pods(pods))
    assert result["evicted"] == [{"pod": "sts-0", "namespace": "ml"}]
    assert len(clock.sleeps) == 2
    assert [c[0] for c in api.calls] == ["ml/sts-0"]  # evicted once, then only waited on


def test_a_pod_gone_before_its_eviction_is_not_reported_as_evicted():
    pods = [pod("a", gpu="nvidia.com/gpu")]
    api = FakeApi([])
    ev, _clock = evictor(api)
    assert ev.run(gpu_pods.select_pods(pods))["evicted"] == []


def test_any_other_refusal_fails_at_once_with_the_api_message():
    pods = [pod("a", gpu="nvidia.com/gpu"), pod("b", gpu="nvidia.com/gpu")]
    api = FakeApi(pods, errors={"ml/b": (500, {"message": "This pod has more than one PodDisruptionBudget, which "
                                                          "the eviction subresource does not support."})})
    ev, clock = evictor(api)
    with pytest.raises(gpu_pods.EvictionError) as err:
        ev.run(gpu_pods.select_pods(pods))
    assert str(err.value).startswith("evicting pod ml/b from node gpu-node-1 failed: HTTP 500 This pod has more "
                                     "than one PodDisruptionBudget")
    assert err.value.result["evicted"] == [{"pod": "a", "namespace": "ml"}]
    assert clock.sleeps == []


def test_check_uses_dry_run_lists_every_candidate_and_reports_the_blocked_ones():
    pods = [pod("a", gpu="nvidia.com/gpu"), pod("serve", gpu="nvidia.com/gpu"),
            pod("leaving", gpu="nvidia.com/gpu", terminating=True)]
    api = FakeApi(pods, refuse={"ml/serve": 1})
    ev, clock = evictor(api)
    result = ev.check(gpu_pods.select_pods(pods))
    assert [e["pod"] for e in result["would_evict"]] == ["a", "serve"]
    assert [(b["pod"], b["pdb"]) for b in result["blocked"]] == [("serve", "serve-pdb")]
    assert result["terminating"] == [{"pod": "leaving", "namespace": "ml"}]
    assert result["evicted"] == []
    assert all(dry for _key, _grace, dry in api.calls) and len(api.calls) == 2
    assert len(api.pods) == 3 and clock.sleeps == []
