# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubernetes gate counts the expected allocatable from the node's facts (preflight role, ansible-playbook, the
real control plane: the allocatable is what the nodes' kubelet stand-in reports).

A MIG node (the real A100-SXM4-80GB capture with 4 MIG devices, its layout assigned, device plugin migStrategy
mixed) passes with nvidia.com/mig-1g.20gb: 4 and fails with 3; an 8-GPU node time-sliced 4 ways passes with
nvidia.com/gpu: 32 and fails with 8.  A failing node stays cordoned, with the resource, the expected count and the
allocatable in its reasons.
"""
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_preflight_role import CAPTURES, GFD, libcuda, node_object, run_fleet  # noqa: E402,F401  # pylint: disable=unused-import

A100_CAPTURE = "a100-sxm4-80gb-mig"
A100_GFD = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "1",
            "nvidia.com/cuda.driver-version.full": "535.54.03"}
MIG_CONFIG = {"version": "v1", "mig-configs": {"all-1g.20gb": [
    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.20gb": 4}}]}}
TIME_SLICING = [{"name": "nvidia.com/gpu", "replicas": 4}]
# Only the counting is under test here: the CUDA gate has its own tests (test_preflight_role.py).
SKIP = dict(preflight_skip_gates=["cuda", "serving"], preflight_skip_reasons={"cuda": "not under test",
                                                                              "serving": "not under test"})


def a100_node(allocatable):
    node = node_object(labels=A100_GFD)
    node["status"]["allocatable"] = dict(allocatable, cpu="64")
    return node


def h100_node(gpus, labels=None):
    return node_object(allocatable=str(gpus), labels=labels)


# What GFD writes on a node time-sliced 4 ways (k8s-device-plugin v0.20.0 internal/lm/resource.go): the product gets
# -SHARED, gpu.replicas is the replicas, gpu.count stays the physical count.
SLICED_GFD = dict(GFD, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.replicas": "4"})


def mig_case(folder, name, allocatable):
    """A MIG node: the capture's MIG state (GPU instances 3-6, 1g.20gb) in a state file of its own."""
    state = folder / (name + "-mig")
    state.mkdir()
    shutil.copy(os.path.join(CAPTURES, A100_CAPTURE, "mig-state.json"), str(state / "mig-state.json"))
    return dict(capture=A100_CAPTURE, node=a100_node(allocatable),
                env={"NVIDIA_SMI_STANDIN_MIG_STATE": str(state / "mig-state.json")},
                preflight_expected_gpus=1, mig_config=MIG_CONFIG, mig_config_name="all-1g.20gb",
                device_plugin_config_mig_strategy="mixed", **SKIP)


@pytest.fixture(scope="module")
def fleet(kube_cluster, tmp_path_factory, libcuda):  # noqa: F811
    folder = tmp_path_factory.mktemp("counting")
    cases = {
        "mig_mixed": mig_case(folder, "mig_mixed", {"nvidia.com/mig-1g.20gb": "4", "nvidia.com/gpu": "0"}),
        "mig_short": mig_case(folder, "mig_short", {"nvidia.com/mig-1g.20gb": "3", "nvidia.com/gpu": "0"}),
        "sliced": dict(node=h100_node(32, SLICED_GFD), device_plugin_config_time_slicing_resources=TIME_SLICING,
                       **SKIP),
        "sliced_short": dict(node=h100_node(8, SLICED_GFD), device_plugin_config_time_slicing_resources=TIME_SLICING,
                             **SKIP),
    }
    _result, fleet = run_fleet(kube_cluster, folder, libcuda, cases)
    yield fleet
    fleet.close()


def reasons(fleet, case):
    return fleet.node(case)["metadata"].get("annotations", {}).get("gpu-native.io/preflight-reasons", "")


@pytest.mark.parametrize("case", ["mig_mixed", "sliced"])
def test_counted_allocatable_passes(fleet, case):
    node = fleet.node(case)
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "passed", reasons(fleet, case)
    assert not node["spec"].get("unschedulable")


@pytest.mark.parametrize("case,reason", [
    ("mig_short", "kubernetes: allocatable nvidia.com/mig-1g.20gb is 3, expected 4 (counted from 1 GPU(s), 4 MIG "
                  "device(s) (4x 1g.20gb), migStrategy mixed"),
    ("sliced_short", "kubernetes: allocatable nvidia.com/gpu is 8, expected 32 (counted from 8 GPU(s), migStrategy "
                     "none, time-slicing"),
])
def test_a_count_mismatch_keeps_the_node_cordoned_with_the_counts(fleet, case, reason):
    node = fleet.node(case)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["gpu-native.io/preflight"] == "failed"
    assert reason in reasons(fleet, case)
    assert 'gate="kubernetes"} 0' in fleet.metrics(case)
