"""gpu_native.fleet.runtime_class against the real Kubernetes control plane, through ansible-playbook.

The control plane is the upstream one (tests/kube_cluster.py: etcd, kube-apiserver, controller-manager and
scheduler v1.35.4, shared by the tests of this process); each test gets a Node of its own, and the
cluster-scoped RuntimeClass `nvidia` is removed before and after each test.  The role runs on localhost
(the "node"), with nvidia-smi replaced by the nvidia-smi stand-in replaying an 8x H100 capture, and talks to the
API with the token of the onboarding job's ServiceAccount (rbac/onboarding.yml), not as admin.

Where the tests ran on the Kubernetes API stand-in before, two of their beliefs were the stand-in's, not the
API's: a Node keeps exactly the taints it was given (a real API server adds `node.kubernetes.io/not-ready`
at create, the node lifecycle controller `node.kubernetes.io/unreachable` later: `role_taints` leaves the
control plane's own `node.kubernetes.io/` taints out), and "nothing changed" could be read off one store
revision (controllers write all the time: `snapshot` compares what the role could have changed).
"""
import copy
import json
import re
import secrets
import os

import pytest

from testlib import REPO_ROOT

NVIDIA_SMI = os.path.join(REPO_ROOT, "tests", "standins", "nvidia-smi")
H100_CAPTURE = os.path.join(REPO_ROOT, "tests", "standins", "captures", "h100x8-healthy")
RUNTIMECLASS = "/apis/node.k8s.io/v1/runtimeclasses/nvidia"

NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-node-1", "labels": {"team": "ml-platform", "accelerator": "foreign"}},
        "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}}

PLAYBOOK = """
- name: Apply runtime_class
  hosts: localhost
  gather_facts: false
  environment:
    NVIDIA_SMI_STANDIN_CAPTURE: "{{ capture }}"
  roles:
    - gpu_native.fleet.runtime_class
"""


def seed(accelerator_label="foreign"):
    node = copy.deepcopy(NODE)
    node["metadata"]["labels"]["accelerator"] = accelerator_label
    return [node]


def role_taints(node):
    """The node's taints without those the control plane manages itself (node.kubernetes.io/*)."""
    return [t for t in node["spec"].get("taints", []) if not t["key"].startswith("node.kubernetes.io/")]


def failure_message(output):
    """The msg of the last task failure (the one that stopped the play)."""
    messages = re.findall(r"^fatal: \[localhost\]: FAILED! => (\{.*\})$", output, re.MULTILINE)
    assert messages, output[-3000:]
    return json.loads(messages[-1])["msg"]


def recap(output):
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output[-3000:]
    return {"ok": int(match.group(1)), "changed": int(match.group(2)), "failed": int(match.group(4))}


class Cluster:
    """The shared control plane as these tests see it: their node (renamed per test) and the RuntimeClass."""

    def __init__(self, plane, node_name):
        self.plane = plane
        self.node_name = node_name

    def get(self, path):
        return self.plane.api("GET", path.replace("/nodes/gpu-node-1", "/nodes/" + self.node_name))

    def exists(self, path):
        return self.plane.request("GET", path)[0] == 200

    def snapshot(self):
        """What the role could change: its node's labels, annotations and taints, and every RuntimeClass."""
        node = self.get("/api/v1/nodes/gpu-node-1")
        classes = self.plane.api("GET", "/apis/node.k8s.io/v1/runtimeclasses")["items"]
        annotations = {key: value for key, value in node["metadata"].get("annotations", {}).items()
                       if not key.startswith("node.alpha.kubernetes.io/")}  # the TTL controller's, set once
        return (node["metadata"].get("labels"), annotations, role_taints(node),
                {c["metadata"]["name"]: c["metadata"]["resourceVersion"] for c in classes})


@pytest.fixture
def role(kube_cluster, kube_job_kubeconfig, run_playbook, tmp_path):
    """Return (cluster, run(vars, args=())) with the role's common variables set."""
    node_name = "gpu-node-1-" + secrets.token_hex(3)
    kube_cluster.request("DELETE", RUNTIMECLASS)

    def make(seed_objects):
        for obj in seed_objects:
            obj = copy.deepcopy(obj)
            if obj["kind"] == "Node":
                obj["metadata"]["name"] = node_name
                kube_cluster.api("POST", "/api/v1/nodes", obj)
            else:
                kube_cluster.api("POST", "/apis/node.k8s.io/v1/runtimeclasses", obj)
        kubeconfig = kube_job_kubeconfig("onboarding")  # the role runs as the onboarding job, not as admin

        def run(extra=None, args=()):
            variables = {"runtime_class_kubeconfig": kubeconfig, "runtime_class_node_name": node_name,
                         "runtime_class_nvidia_smi": NVIDIA_SMI, "capture": H100_CAPTURE}
            variables.update(extra or {})
            return run_playbook(PLAYBOOK, args=["-e", json.dumps(variables)] + list(args))
        return Cluster(kube_cluster, node_name), run
    yield make
    kube_cluster.request("DELETE", "/api/v1/nodes/" + node_name)
    kube_cluster.request("DELETE", RUNTIMECLASS)


def test_converge_idempotence_check_mode_and_absent(role):
    cluster, run = role(seed())
    first = run({"runtime_class_overhead": {"cpu": "250m", "memory": "120Mi"}})
    assert first.returncode == 0, first.stdout[-4000:]
    assert recap(first.stdout)["changed"] == 3  # RuntimeClass, labels, taint

    rc = cluster.get(RUNTIMECLASS)
    assert rc["handler"] == "nvidia"
    assert rc["scheduling"] == {"nodeSelector": {"accelerator": "nvidia-gpu"},
                                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                 "effect": "NoSchedule"}]}
    assert rc["overhead"] == {"podFixed": {"cpu": "250m", "memory": "120Mi"}}
    node = cluster.get("/api/v1/nodes/gpu-node-1")
    assert node["metadata"]["labels"] == {"team": "ml-platform", "accelerator": "nvidia-gpu",
                                          "gpu.nvidia.com/model": "NVIDIA-H100-80GB-HBM3",
                                          "gpu.nvidia.com/memory": "80Gi"}
    assert role_taints(node) == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                                 {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]

    before = cluster.snapshot()
    again = run({"runtime_class_overhead": {"cpu": "250m", "memory": "120Mi"}})
    assert again.returncode == 0 and recap(again.stdout)["changed"] == 0, again.stdout[-4000:]
    check = run({"runtime_class_overhead": {"cpu": "250m", "memory": "120Mi"}}, ["--check"])
    assert check.returncode == 0 and recap(check.stdout)["changed"] == 0, check.stdout[-4000:]
    assert cluster.snapshot() == before

    # dropping the overhead removes it (client-side apply), nothing else moves
    dropped = run()
    assert dropped.returncode == 0 and recap(dropped.stdout)["changed"] == 1, dropped.stdout[-4000:]
    assert "overhead" not in cluster.get(RUNTIMECLASS)

    # a foreign taint with our key but another effect, added later, must survive absent
    absent = run({"runtime_class_state": "absent"})
    assert absent.returncode == 0, absent.stdout[-4000:]
    node = cluster.get("/api/v1/nodes/gpu-node-1")
    assert node["metadata"]["labels"] == {"team": "ml-platform"}
    assert role_taints(node) == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    assert not cluster.exists(RUNTIMECLASS)


def test_check_mode_on_a_fresh_cluster_reports_changes_and_changes_nothing(role):
    cluster, run = role(seed())
    before = cluster.snapshot()
    result = run(args=["--check"])
    assert result.returncode == 0, result.stdout[-4000:]
    assert recap(result.stdout)["changed"] == 3
    assert cluster.snapshot() == before
    assert "nvidia.com/gpu" not in json.dumps(cluster.get("/api/v1/nodes/gpu-node-1")["spec"])
    assert not cluster.exists(RUNTIMECLASS)


def test_absent_keeps_a_foreign_accelerator_value(role):
    cluster, run = role(seed(accelerator_label="tpu"))
    result = run({"runtime_class_state": "absent", "runtime_class_manage_runtimeclass": False})
    assert result.returncode == 0, result.stdout[-4000:]
    assert cluster.get("/api/v1/nodes/gpu-node-1")["metadata"]["labels"]["accelerator"] == "tpu"


def test_handler_change_replaces_the_runtimeclass_only_when_allowed(role):
    legacy = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
              "handler": "nvidia-legacy"}
    cluster, run = role(seed() + [legacy])
    before = cluster.snapshot()
    refused = run()
    assert refused.returncode != 0
    message = " ".join(failure_message(refused.stdout).split())
    assert message.startswith("RuntimeClass nvidia exists with handler nvidia-legacy, but runtime_class_handler "
                              "is nvidia")
    assert "Fix: set runtime_class_replace_on_handler_change: true" in message
    assert cluster.snapshot() == before
    replaced = run({"runtime_class_replace_on_handler_change": True})
    assert replaced.returncode == 0, replaced.stdout[-4000:]
    assert cluster.get(RUNTIMECLASS)["handler"] == "nvidia"


BAD_INPUT = [
    pytest.param({"runtime_class_kubeconfig": "UNREACHABLE"},
                 ["Cannot reach the Kubernetes API with runtime_class_kubeconfig", "Fix: point runtime_class_kubeconfig"],
                 id="unreachable-kubeconfig"),
    pytest.param({"runtime_class_kubeconfig": "WRONG_TOKEN"},
                 ["Cannot reach the Kubernetes API with runtime_class_kubeconfig", "Reason: Unauthorized"],
                 id="rejected-credentials"),
    pytest.param({"containerd_nvidia_runtime_name": "nvidia-cdi", "runtime_class_handler": "nvidia"},
                 ["runtime_class_handler (nvidia) differs from containerd_nvidia_runtime_name (nvidia-cdi)",
                  "Fix: give both variables the same value"],
                 id="handler-mismatch"),
    pytest.param({"runtime_class_node_name": "gpu-node-9"},
                 ["Node gpu-node-9 (runtime_class_node_name, for host localhost) does not exist"],
                 id="unknown-node"),
    pytest.param({"runtime_class_gpu_model": "NVIDIA H100 80GB HBM3"},
                 ["runtime_class_gpu_model.gpu.nvidia.com/model: value 'NVIDIA H100 80GB HBM3' must be empty or"],
                 id="model-not-a-label-value"),
    pytest.param({"runtime_class_gpu_memory": "80GB"},
                 ["runtime_class_gpu_memory: '80GB' must be a whole number of GiB written as <n>Gi"],
                 id="memory-format"),
    pytest.param({"runtime_class_taint": {"key": "nvidia.com/gpu", "value": "present", "effect": "Never"}},
                 ["runtime_class_taint: effect 'Never' must be one of NoSchedule, PreferNoSchedule, NoExecute"],
                 id="taint-effect"),
    pytest.param({"runtime_class_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "value": "x"}]},
                 ["runtime_class_tolerations[0]: operator Exists takes no value (got 'x')"],
                 id="toleration"),
    pytest.param({"runtime_class_handler": "Nvidia_CDI", "containerd_nvidia_runtime_name": "Nvidia_CDI"},
                 ["runtime_class_handler: 'Nvidia_CDI' must be a lowercase DNS label"],
                 id="handler-not-a-dns-label"),
    pytest.param({"runtime_class_overhead": {"cpu": "250m", "memory": "120 MB"}},
                 ["runtime_class_overhead.memory: '120 MB' is not a Kubernetes quantity"],
                 id="overhead-quantity"),
    pytest.param({"runtime_class_node_selector": {"gpu": ["a"]}},
                 ["runtime_class_node_selector.gpu: value a label value must be a string, got list"],
                 id="selector-value-type-named-plainly"),
    pytest.param({"runtime_class_nvidia_smi": "/nonexistent/nvidia-smi"},
                 ["The GPU labels of localhost cannot be derived: nvidia-smi was not found (/nonexistent/nvidia-smi)",
                  "or set runtime_class_gpu_model and runtime_class_gpu_memory for this host"],
                 id="no-nvidia-smi"),
]


@pytest.mark.parametrize("extra,messages", BAD_INPUT)
def test_bad_input_fails_early_naming_the_variable_and_changes_nothing(role, tmp_path, extra, messages):
    cluster, run = role(seed())
    extra = dict(extra)
    if extra.get("runtime_class_kubeconfig") == "UNREACHABLE":
        path = tmp_path / "unreachable"
        path.write_text(open(cluster.plane.write_kubeconfig(str(tmp_path / "x"))).read()
                        .replace(cluster.plane.url, "https://127.0.0.1:9"))
        extra["runtime_class_kubeconfig"] = str(path)
    elif extra.get("runtime_class_kubeconfig") == "WRONG_TOKEN":
        extra["runtime_class_kubeconfig"] = cluster.plane.write_kubeconfig(str(tmp_path / "wrong-token"), token="nope")
    before = cluster.snapshot()
    result = run(extra)
    assert result.returncode != 0
    output = " ".join(failure_message(result.stdout).split())
    for message in messages:
        assert message in output, output
    assert recap(result.stdout)["changed"] == 0
    assert cluster.snapshot() == before
