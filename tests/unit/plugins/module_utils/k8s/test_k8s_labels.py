# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_labels: label syntax, taints, and GPU labels derived from real nvidia-smi -q -x captures."""
import os

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s.k8s_labels import (
    K8sLabelError,
    gpu_node_labels,
    label_key_problem,
    label_value_from_text,
    label_value_problem,
    memory_label,
    taint_problem,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_smi import parse_query_xml

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "nvidia")
MARKER = "# ---- BEGIN VERBATIM ----\n"


def capture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        text = handle.read()
    return text.split(MARKER, 1)[1] if MARKER in text else text


@pytest.mark.parametrize("key", ["accelerator", "gpu.nvidia.com/model", "nvidia.com/gpu", "a_b.c-d"])
def test_valid_keys(key):
    assert label_key_problem(key) is None


@pytest.mark.parametrize("key,fragment", [
    ("", "non-empty"), ("GPU.nvidia.com/model", "prefix"), ("/model", "prefix"), ("a" * 64, "longer than 63"),
    ("gpu.nvidia.com/-model", "start and end"), (7, "non-empty"),
])
def test_invalid_keys(key, fragment):
    assert fragment in label_key_problem(key)


@pytest.mark.parametrize("value,ok", [
    ("", True), ("NVIDIA-H100-80GB-HBM3", True), ("80Gi", True), ("NVIDIA H100", False), ("-x", False),
    ("x" * 64, False), (80, False),
])
def test_label_values(value, ok):
    assert (label_value_problem(value) is None) is ok


@pytest.mark.parametrize("text,expected", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
    ("  Tesla P100-PCIE-16GB (rev a1) ", "Tesla-P100-PCIE-16GB-rev-a1"),
    ("NVIDIA GeForce RTX 4090 D", "NVIDIA-GeForce-RTX-4090-D"),
    ("???", ""),
])
def test_label_value_from_text(text, expected):
    assert label_value_from_text(text) == expected
    assert label_value_problem(label_value_from_text(text)) is None


@pytest.mark.parametrize("mib,expected", [(81559, "80Gi"), (81920, "80Gi"), (46068, "45Gi"), (143771, "140Gi"),
                                          (16384, "16Gi"), (100, "1Gi")])
def test_memory_label(mib, expected):
    assert memory_label(mib) == expected


@pytest.mark.parametrize("taint,fragment", [
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, None),
    ({"key": "nvidia.com/gpu", "effect": "NoExecute"}, None),
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "Never"}, "effect 'Never' must be one of"),
    ({"key": "Bad Key", "value": "present", "effect": "NoSchedule"}, "key:"),
    ({"key": "nvidia.com/gpu", "value": "a b", "effect": "NoSchedule"}, "value:"),
    ({"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Exists"}, "unknown taint field(s) operator"),
    ("nvidia.com/gpu=present:NoSchedule", "must be a dict"),
])
def test_taint_problem(taint, fragment):
    problem = taint_problem(taint)
    assert problem is None if fragment is None else fragment in problem


def test_labels_from_h100_capture():
    inventory = parse_query_xml(capture("constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt"))
    labels, details = gpu_node_labels(inventory, "nvidia-gpu")
    assert labels == {"accelerator": "nvidia-gpu", "gpu.nvidia.com/model": "NVIDIA-H100-80GB-HBM3",
                      "gpu.nvidia.com/memory": "80Gi"}
    assert details["gpu_count"] == 8 and details["product"] == "NVIDIA H100 80GB HBM3"


def test_labels_from_a100_mig_capture_use_the_whole_gpu():
    inventory = parse_query_xml(capture("01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt"))
    labels, details = gpu_node_labels(inventory, "nvidia-gpu")
    assert labels["gpu.nvidia.com/model"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["gpu.nvidia.com/memory"] == "80Gi" and details["memory_mib"] == 81920


def test_explicit_values_win_and_need_no_gpus():
    labels, details = gpu_node_labels({"gpus": []}, "nvidia-gpu", "NVIDIA-L40S", "48Gi")
    assert labels["gpu.nvidia.com/model"] == "NVIDIA-L40S" and labels["gpu.nvidia.com/memory"] == "48Gi"
    assert details["product"] is None


@pytest.mark.parametrize("inventory,args,fragment", [
    ({"gpus": []}, ("nvidia-gpu",), "lists no GPU"),
    ({"gpus": [{"product": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920},
               {"product": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}]}, ("nvidia-gpu",),
     "mixes GPU models (NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3)"),
    ({"gpus": [{"product": "NVIDIA\nA100", "memory_total_mib": 81920},  # found by the fuzz target: one line only
               {"product": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}]}, ("nvidia-gpu",),
     "mixes GPU models (NVIDIA A100, NVIDIA H100 80GB HBM3)"),
    ({"gpus": [{"product": "NVIDIA H100 80GB HBM3", "memory_total_mib": None}]}, ("nvidia-gpu",),
     "no GPU memory size"),
    ({"gpus": []}, ("nvidia gpu", "M", "8Gi"), "accelerator:"),
    ({"gpus": []}, ("nvidia-gpu", "NVIDIA H100", "80Gi"), "model:"),
    ({"gpus": []}, ("nvidia-gpu", "NVIDIA-H100", "80GB"), "memory: '80GB' must be a whole number of GiB"),
])
def test_bad_input_names_the_problem(inventory, args, fragment):
    with pytest.raises(K8sLabelError) as err:
        gpu_node_labels(inventory, *args)
    assert fragment in str(err.value) and "\n" not in str(err.value)
