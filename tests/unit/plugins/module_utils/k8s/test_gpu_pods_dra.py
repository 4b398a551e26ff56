# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pods that hold a GPU through a DRA ResourceClaim (module_utils/k8s/gpu_pods.py): which claims a pod uses, which
devices a claim holds, and that such pods are evicted like GPU pods. Objects as kube-apiserver v1.35 returns them."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s import gpu_pods

NODE = "gpu-node-1"
DRIVERS = gpu_pods.DEFAULT_DRA_DRIVERS


def pod(name, gpu=None, owner="ReplicaSet", phase="Running", volumes=None):
    container = {"name": "main", "image": "i"}
    if gpu:
        container["resources"] = {"limits": {gpu: 1}}
    meta = {"name": name, "namespace": "ml", "uid": name + "-uid"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    spec = {"nodeName": NODE, "containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def reasons(selection):
    return {"%s/%s" % (s["namespace"], s["pod"]): s["reason"] for s in selection.skipped}


def claim_pod(name, direct=(), templated=(), generated=None, **kwargs):
    """A pod naming claims directly (``direct``) and through templates (``templated``: entry names; ``generated``:
    entry name -> the generated claim's name in status.resourceClaimStatuses, None when none was needed)."""
    obj = pod(name, **kwargs)
    entries = [{"name": "c%d" % i, "resourceClaimName": claim} for i, claim in enumerate(direct)]
    entries += [{"name": entry, "resourceClaimTemplateName": "tmpl"} for entry in templated]
    obj["spec"]["resourceClaims"] = entries
    if generated is not None:
        obj["status"]["resourceClaimStatuses"] = [{"name": k, "resourceClaimName": v} for k, v in generated.items()]
    return obj


def claim(name, driver="gpu.nvidia.com", device="gpu-0", allocated=True):
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"},
           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": driver, "pool": NODE, "device": device}]}}}
    return obj


class Claims(object):
    def __init__(self, *claims):
        self.claims = {("ml", c["metadata"]["name"]): c for c in claims}
        self.reads = []

    def __call__(self, namespace, name):
        self.reads.append((namespace, name))
        return self.claims.get((namespace, name))


def test_claim_names_direct_and_generated_from_templates():
    obj = claim_pod("p", direct=["shared-gpu"], templated=["gpu", "unneeded"],
                    generated={"gpu": "p-gpu-x7k2q", "unneeded": None})
    assert gpu_pods.claim_names(obj) == ["p-gpu-x7k2q", "shared-gpu"]


def test_a_template_entry_without_its_generated_claim_yet_names_nothing():
    assert gpu_pods.claim_names(claim_pod("p", templated=["gpu"])) == []


@pytest.mark.parametrize("hostile", [None, "x", {"spec": {"resourceClaims": "x"}},
                                     {"spec": {"resourceClaims": [None, 3, {"resourceClaimName": 7}]}},
                                     {"spec": {"resourceClaims": [{"name": "a", "resourceClaimTemplateName": "t"}]},
                                      "status": {"resourceClaimStatuses": [None, {"name": "a",
                                                                                  "resourceClaimName": ["x"]}]}}])
def test_malformed_claim_references_name_nothing(hostile):
    assert gpu_pods.claim_names(hostile) == []


def test_claim_names_are_bounded():
    obj = claim_pod("p", direct=["c%d" % i for i in range(10 * gpu_pods.MAX_CLAIMS)])
    assert len(gpu_pods.claim_names(obj)) == gpu_pods.MAX_CLAIMS


def test_allocated_devices_of_the_nvidia_driver_only():
    assert gpu_pods.allocated_devices(claim("a"), DRIVERS) == ["gpu.nvidia.com/%s/gpu-0" % NODE]
    assert gpu_pods.allocated_devices(claim("a", driver="dra.example.com"), DRIVERS) == []
    assert gpu_pods.allocated_devices(claim("a", allocated=False), DRIVERS) == []
    for hostile in (None, "x", {"status": {"allocation": {"devices": {"results": [None, "x", {"driver": []}]}}}}):
        assert gpu_pods.allocated_devices(hostile, DRIVERS) == []


def test_a_pod_holding_an_nvidia_dra_device_is_evicted_like_a_gpu_pod():
    pods = [claim_pod("trainer", direct=["trainer-gpu"]),
            claim_pod("llm", templated=["gpu"], generated={"gpu": "llm-gpu-abcde"}),
            claim_pod("nic", direct=["nic"]), pod("web")]
    claims = Claims(claim("trainer-gpu"), claim("llm-gpu-abcde", device="gpu-0-mig-1g10gb-19-0"),
                    claim("nic", driver="dra.example.com"))
    selection = gpu_pods.select_pods(pods, node=NODE, dra_drivers=DRIVERS, read_claim=claims)
    assert sorted(gpu_pods.pod_key(p) for p in selection.evict) == ["ml/llm", "ml/trainer"]
    assert reasons(selection) == {
        "ml/nic": "uses no nvidia.com/* resource and no device of DRA driver gpu.nvidia.com",
        "ml/web": "uses no nvidia.com/* resource and no device of DRA driver gpu.nvidia.com"}
    # The pod without claims is judged without a read.
    assert sorted(claims.reads) == [("ml", "llm-gpu-abcde"), ("ml", "nic"), ("ml", "trainer-gpu")]


def test_without_dra_drivers_claims_are_not_read_and_the_pod_stays():
    claims = Claims(claim("trainer-gpu"))
    selection = gpu_pods.select_pods([claim_pod("trainer", direct=["trainer-gpu"])], node=NODE, dra_drivers=(),
                                     read_claim=claims)
    assert selection.evict == [] and claims.reads == []
    assert reasons(selection) == {"ml/trainer": "uses no nvidia.com/* resource"}


def test_claims_of_resource_pods_daemonsets_and_finished_pods_are_never_read():
    claims = Claims(claim("a"))
    pods = [claim_pod("res", direct=["a"], gpu="nvidia.com/gpu"), claim_pod("ds", direct=["a"], owner="DaemonSet"),
            claim_pod("done", direct=["a"], phase="Succeeded")]
    selection = gpu_pods.select_pods(pods, node=NODE, dra_drivers=DRIVERS, read_claim=claims)
    assert [gpu_pods.pod_key(p) for p in selection.evict] == ["ml/res"] and claims.reads == []


def test_a_claim_gone_or_not_allocated_holds_no_gpu():
    claims = Claims(claim("pending", allocated=False))
    pods = [claim_pod("a", direct=["gone"]), claim_pod("b", direct=["pending"])]
    selection = gpu_pods.select_pods(pods, node=NODE, dra_drivers=DRIVERS, read_claim=claims)
    assert selection.evict == [] and len(selection.skipped) == 2


def test_under_drain_a_dra_gpu_pod_leaves_whatever_its_volumes_or_owner():
    pods = [claim_pod("scratch", direct=["g"], owner=None, volumes=[{"name": "s", "emptyDir": {}}])]
    selection = gpu_pods.select_pods(pods, node=NODE, drain=True, dra_drivers=DRIVERS, read_claim=Claims(claim("g")))
    assert [gpu_pods.pod_key(p) for p in selection.evict] == ["ml/scratch"] and selection.refused == []
