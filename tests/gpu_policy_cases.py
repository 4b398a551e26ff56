# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pods the GPU pod guardrails are judged on, shared by the CEL-engine unit tests
(tests/unit/roles/gpu_policies/test_gpu_policy_cel.py) and the real API server
(tests/integration/roles/test_gpu_policies_role.py).

Each case is (id, pod, expected denial message or None for admitted). Every pod is one the real
API server accepts when no policy is bound (valid names, an image, requests equal to limits), so a
denial on the real server is the policy's and nothing else's.
"""
import copy

IMAGE = "registry.invalid/cuda:12.4.1-base"

PRIV = ("GPU pods must not run privileged containers, which see every GPU of the node: "
        "remove securityContext.privileged: true")
RTC = "GPU pods must set runtimeClassName: nvidia"
ENV = ("Containers that request no GPU must not set NVIDIA_VISIBLE_DEVICES or NVIDIA_DRIVER_CAPABILITIES "
       "(except to void or none): request the GPU in resources.limits, or remove the variable")
RTC_NO_GPU = ("Pods that request no GPU must not set runtimeClassName nvidia: request the GPU in resources.limits, "
              "or remove runtimeClassName")
NODE_PRIV = ("Pods that tolerate the GPU taint or select GPU nodes must not run privileged containers, which see "
             "every GPU of the node: remove securityContext.privileged: true")


def container(name, limits=None, requests=None, privileged=None, env=None, claims=None):
    result = {"name": name, "image": IMAGE}
    resources = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if claims is not None:
        resources["claims"] = [{"name": claim} for claim in claims]
    if resources:
        result["resources"] = resources
    if privileged is not None:
        result["securityContext"] = {"privileged": privileged}
    if env is not None:
        result["env"] = [dict(item) for item in env]
    return result


def pod(containers, runtime_class="nvidia", init=None, ephemeral=None, namespace="ml", labels=None,
        tolerations=None, node_selector=None, affinity=None, resource_claims=None):
    spec = {"containers": containers}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    if init:
        spec["initContainers"] = init
    if ephemeral:
        spec["ephemeralContainers"] = ephemeral
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if affinity is not None:
        spec["affinity"] = affinity
    if resource_claims is not None:
        spec["resourceClaims"] = resource_claims
    meta = {"name": "p", "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def required_node_affinity(key, operator="In", values=("true",)):
    expression = {"key": key, "operator": operator}
    if operator in ("In", "NotIn"):
        expression["values"] = list(values)
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}}


GPU1 = {"nvidia.com/gpu": "1"}
CPU = {"cpu": "500m", "memory": "1Gi"}
ALL_GPUS = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
# a DRA claim from a template (the DeviceClass gpu.nvidia.com sits in the template, out of sight of the pod)
DRA_CLAIM = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]

# (id, pod, expected message or None for admitted)
CASES = [
    # GPU pods done right
    ("compliant-limits-only", pod([container("train", limits=GPU1)]), None),
    ("compliant-requests-equal-limits",
     pod([container("train", limits={"nvidia.com/gpu": "2", "cpu": "4"},
                    requests={"nvidia.com/gpu": "2", "cpu": "1"})]), None),
    ("compliant-mixed-containers",
     pod([container("sidecar", limits=CPU, requests=CPU), container("train", limits=GPU1)],
         init=[container("fetch", limits=CPU)]), None),
    ("compliant-mig", pod([container("infer", limits={"nvidia.com/mig-1g.10gb": "1"})]), None),
    ("compliant-gpu-container-sets-visible-devices",
     pod([container("train", limits=GPU1, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])]), None),
    ("compliant-gpu-pod-tolerates-gpu-taint",
     pod([container("train", limits=GPU1)], tolerations=GPU_TOLERATION), None),
    ("compliant-dra-claim",
     pod([container("train", claims=["gpu"])], resource_claims=DRA_CLAIM), None),
    ("privileged-false-is-fine", pod([container("train", limits=GPU1, privileged=False)]), None),
    # pods that ask for no GPU and leave the GPU alone
    ("visible-devices-void", pod([container("web", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])],
                                 runtime_class=None), None),
    ("visible-devices-none-and-capabilities-none",
     pod([container("web", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
                                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "none"}])], runtime_class=None), None),
    ("other-nvidia-variable", pod([container("web", env=[{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12"}])],
                                  runtime_class=None), None),
    ("non-gpu-privileged-elsewhere", pod([container("web", limits=CPU, privileged=True)], runtime_class=None), None),
    ("non-gpu-privileged-other-toleration",
     pod([container("agent", privileged=True)], runtime_class=None,
         tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]), None),
    ("non-gpu-privileged-avoids-gpu-nodes",
     pod([container("agent", privileged=True)], runtime_class=None,
         affinity=required_node_affinity("nvidia.com/gpu.present", "NotIn", ["true"])), None),
    ("non-gpu-unprivileged-tolerates-gpu-taint",
     pod([container("exporter")], runtime_class=None, tolerations=GPU_TOLERATION), None),
    ("non-gpu-no-resources", pod([container("web")], runtime_class=None), None),
    ("non-gpu-other-extended-resource",
     pod([container("nic", limits={"rdma/hca_shared_devices_a": "1"})], runtime_class=None), None),
    ("non-gpu-lookalike-resource",
     pod([container("x", limits={"nvidia.com/gpu-feature": "1", "example.com/gpu": "1"})],
         runtime_class=None), None),
    # GPU pods that break the GPU rules
    ("privileged-gpu-container",
     pod([container("train", limits=GPU1, privileged=True)]),
     PRIV + " (container 'train' sets securityContext.privileged: true)"),
    ("privileged-sidecar-in-gpu-pod",
     pod([container("train", limits=GPU1), container("debug", privileged=True)]),
     PRIV + " (container 'debug' sets securityContext.privileged: true)"),
    ("no-runtime-class", pod([container("train", limits=GPU1)], runtime_class=None),
     RTC + " (container 'train' requests nvidia.com/gpu)"),
    ("wrong-runtime-class", pod([container("train", limits=GPU1)], runtime_class="runc"),
     RTC + " (container 'train' requests nvidia.com/gpu)"),
    ("limits-only-no-runtime-class-mig",
     pod([container("infer", limits={"nvidia.com/mig-1g.10gb": "1"})], runtime_class=None),
     RTC + " (container 'infer' requests nvidia.com/mig-1g.10gb)"),
    ("gpu-shared-no-runtime-class",
     pod([container("notebook", limits={"nvidia.com/gpu.shared": "1"})], runtime_class=None),
     RTC + " (container 'notebook' requests nvidia.com/gpu.shared)"),
    ("init-container-gpu-no-runtime-class",
     pod([container("main", limits=CPU)], init=[container("warmup", limits=GPU1)], runtime_class=None),
     RTC + " (container 'warmup' requests nvidia.com/gpu)"),
    ("two-gpu-containers-no-runtime-class",
     pod([container("a", limits=GPU1), container("b", limits=GPU1), container("c", limits=CPU)],
         runtime_class=None),
     RTC + " (container 'a' requests nvidia.com/gpu and 1 more)"),
    ("privileged-and-no-runtime-class-first-rule-reported",
     pod([container("train", limits=GPU1, privileged=True)], runtime_class=None),
     PRIV + " (container 'train' sets securityContext.privileged: true)"),
    ("gpu-zero-still-a-gpu-pod",
     pod([container("train", limits={"nvidia.com/gpu": "0"})], runtime_class=None),
     RTC + " (container 'train' requests nvidia.com/gpu)"),
    # evasion: GPUs without a GPU resource
    ("evasion-env-in-container",
     pod([container("steal", env=ALL_GPUS)], runtime_class=None),
     ENV + " (container 'steal' sets NVIDIA_VISIBLE_DEVICES)"),
    ("evasion-env-in-init-container",
     pod([container("main")], init=[container("steal", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}])],
         runtime_class=None),
     ENV + " (container 'steal' sets NVIDIA_VISIBLE_DEVICES)"),
    ("evasion-driver-capabilities",
     pod([container("steal", env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}])],
         runtime_class=None),
     ENV + " (container 'steal' sets NVIDIA_DRIVER_CAPABILITIES)"),
    ("evasion-env-empty-value",
     pod([container("steal", env=[{"name": "NVIDIA_VISIBLE_DEVICES"}])], runtime_class=None),
     ENV + " (container 'steal' sets NVIDIA_VISIBLE_DEVICES)"),
    ("evasion-env-from-field",
     pod([container("steal", env=[{"name": "NVIDIA_VISIBLE_DEVICES",
                                   "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['gpus']"}}}])],
         runtime_class=None),
     ENV + " (container 'steal' sets NVIDIA_VISIBLE_DEVICES)"),
    ("evasion-env-in-sidecar-of-gpu-pod",
     pod([container("train", limits=GPU1), container("steal", env=ALL_GPUS)]),
     ENV + " (container 'steal' sets NVIDIA_VISIBLE_DEVICES)"),
    ("evasion-env-with-runtime-class",
     pod([container("steal", env=ALL_GPUS)]),
     ENV + " (container 'steal' sets NVIDIA_VISIBLE_DEVICES)"),
    ("evasion-runtime-class-only", pod([container("steal")]), RTC_NO_GPU + " (no container requests a GPU)"),
    ("evasion-privileged-with-gpu-toleration",
     pod([container("steal", privileged=True)], runtime_class=None, tolerations=GPU_TOLERATION),
     NODE_PRIV + " (container 'steal' sets securityContext.privileged: true)"),
    ("evasion-privileged-tolerates-everything",
     pod([container("steal", privileged=True)], runtime_class=None, tolerations=[{"operator": "Exists"}]),
     NODE_PRIV + " (container 'steal' sets securityContext.privileged: true)"),
    ("evasion-privileged-tolerates-unvalidated-nodes",
     pod([container("steal", privileged=True)], runtime_class=None,
         tolerations=[{"key": "gpu-native.io/unvalidated", "operator": "Exists", "effect": "NoSchedule"}]),
     NODE_PRIV + " (container 'steal' sets securityContext.privileged: true)"),
    ("evasion-privileged-node-selector",
     pod([container("steal", privileged=True)], runtime_class=None, node_selector={"accelerator": "nvidia-gpu"}),
     NODE_PRIV + " (container 'steal' sets securityContext.privileged: true)"),
    ("evasion-privileged-node-affinity-gfd-label",
     pod([container("steal", privileged=True)], runtime_class=None,
         affinity=required_node_affinity("nvidia.com/gpu.present", "In", ["true"])),
     NODE_PRIV + " (container 'steal' sets securityContext.privileged: true)"),
    ("evasion-privileged-init-container-with-toleration",
     pod([container("main")], init=[container("steal", privileged=True)], runtime_class=None,
         tolerations=GPU_TOLERATION),
     NODE_PRIV + " (container 'steal' sets securityContext.privileged: true)"),
    # DRA: a claimed GPU follows the GPU rules
    ("dra-claim-no-runtime-class",
     pod([container("train", claims=["gpu"])], resource_claims=DRA_CLAIM, runtime_class=None),
     RTC + " (container 'train' uses resource claim 'gpu')"),
    ("dra-claim-privileged",
     pod([container("train", claims=["gpu"], privileged=True)], resource_claims=DRA_CLAIM),
     PRIV + " (container 'train' sets securityContext.privileged: true)"),
    ("dra-claim-not-used-by-a-container",
     pod([container("main")], resource_claims=DRA_CLAIM, runtime_class=None),
     RTC + " (the pod claims 'gpu' in spec.resourceClaims)"),
]

# the pods of the table that are refused, and those that are admitted
EVASION_IDS = [case[0] for case in CASES if case[0].startswith("evasion-") or case[0].startswith("dra-claim-")]


def case_pod(case_id, namespace=None, name=None):
    """A fresh copy of the case's pod, optionally in `namespace` and named `name`."""
    obj = copy.deepcopy(next(case[1] for case in CASES if case[0] == case_id))
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    if name is not None:
        obj["metadata"]["name"] = name
    return obj


# --- DRA claims (resource.k8s.io/v1), judged by the claim guardrails (gpu_policies_dra_claims) ------------------
# Settings of the table: full GPUs only in "training" (and kube-system, for monitoring), MIG in "training" and "inference"; adminAccess in kube-system.
CLAIM_CLASS_NAMESPACES = {"gpu.nvidia.com": ["kube-system", "training"], "mig.nvidia.com": ["inference", "training"]}
CLAIM_ADMIN_NAMESPACES = ["kube-system"]
CLASS_MSG = ("This namespace may not claim this DeviceClass: ask for a DeviceClass allowed here "
             "(gpu_policies_dra_class_namespaces)")
ADMIN_MSG = ("DRA claims may ask for adminAccess (every device, in use or not) in system namespaces only "
             "(gpu_policies_dra_admin_namespaces): remove adminAccess")


def claim(requests, namespace="training", template=False, name="c"):
    """A ResourceClaim (or ResourceClaimTemplate) of `requests`: [(request name, class, admin_access)] for
    exactly-requests, or (request name, [classes]) for firstAvailable."""
    items = []
    for request in requests:
        if isinstance(request[1], list):
            items.append({"name": request[0], "firstAvailable": [
                {"name": "s%d" % i, "deviceClassName": cls} for i, cls in enumerate(request[1])]})
        else:
            exactly = {"deviceClassName": request[1]}
            if len(request) > 2 and request[2] is not None:
                exactly["adminAccess"] = request[2]
            items.append({"name": request[0], "exactly": exactly})
    spec = {"devices": {"requests": items}}
    if template:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": spec}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


# (id, claim or template, expected message or None for admitted)
CLAIM_CASES = [
    ("full-gpu-where-allowed", claim([("gpu", "gpu.nvidia.com")]), None),
    ("mig-where-allowed", claim([("mig", "mig.nvidia.com")], namespace="inference"), None),
    ("template-mig-where-allowed", claim([("mig", "mig.nvidia.com")], namespace="inference", template=True), None),
    ("unrestricted-class", claim([("nic", "example.com-nic")], namespace="inference"), None),
    ("admin-access-in-kube-system", claim([("gpu", "gpu.nvidia.com", True)], namespace="kube-system"), None),
    ("admin-access-false", claim([("gpu", "gpu.nvidia.com", False)]), None),
    ("full-gpu-elsewhere", claim([("gpu", "gpu.nvidia.com")], namespace="inference"),
     CLASS_MSG + " (request 'gpu' asks for DeviceClass gpu.nvidia.com in namespace inference)"),
    ("template-full-gpu-elsewhere", claim([("gpu", "gpu.nvidia.com")], namespace="inference", template=True),
     CLASS_MSG + " (request 'gpu' asks for DeviceClass gpu.nvidia.com in namespace inference)"),
    ("first-available-falls-back-to-a-full-gpu", claim([("any", ["mig.nvidia.com", "gpu.nvidia.com"])],
                                                       namespace="inference"),
     CLASS_MSG + " (request 'any' may get DeviceClass gpu.nvidia.com in namespace inference)"),
    ("mig-in-a-namespace-without-gpus", claim([("mig", "mig.nvidia.com")], namespace="web"),
     CLASS_MSG + " (request 'mig' asks for DeviceClass mig.nvidia.com in namespace web)"),
    ("admin-access-in-a-tenant-namespace", claim([("gpu", "gpu.nvidia.com", True)]),
     ADMIN_MSG + " (request 'gpu' sets adminAccess: true in namespace training)"),
    ("template-admin-access", claim([("mig", "mig.nvidia.com", True)], namespace="inference", template=True),
     ADMIN_MSG + " (request 'mig' sets adminAccess: true in namespace inference)"),
]
