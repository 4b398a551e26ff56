# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Expected device-plugin resources (issue #12 section 3): time-slicing, renameByDefault, MPS, MIG single and mixed."""
import json
import os

import jinja2
import pytest
import yaml

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import device_counts as dc
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health as gh

from gpu_fixtures import REPO, text

FULL = {"mig_enabled": False, "mig_devices": 0}


def mig(count):
    return {"mig_enabled": True, "mig_devices": count}


def rendered_config(**settings):
    """The config roles/device_plugin_config renders for these class settings (its own template)."""
    values = {"mig_strategy": "none", "fail_on_init_error": True, "allocation_policy": "packed",
              "device_list_strategy": "volume-mounts", "time_slicing_resources": [], "time_slicing_rename_by_default": False}
    values.update(settings)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = bool
    with open(os.path.join(REPO, "roles", "device_plugin_config", "templates", "config.yaml.j2")) as handle:
        template = env.from_string(handle.read())
    return yaml.safe_load(template.render(__device_plugin_config_class=values))


def test_device_list_strategy_is_rendered_where_the_plugin_reads_it():
    # flags.plugin.deviceListStrategy (NVIDIA/k8s-device-plugin api/config/v1/flags.go); volume-mounts matches
    # container_toolkit's accept-nvidia-visible-devices-as-volume-mounts (issue 26)
    assert rendered_config()["flags"]["plugin"]["deviceListStrategy"] == "volume-mounts"
    assert rendered_config(device_list_strategy="cdi-cri")["flags"]["plugin"]["deviceListStrategy"] == "cdi-cri"


def fixture_12_block(tag):
    """One YAML block of tests/fixtures/mig/12_mig_parted_and_device_plugin_configs.yaml.txt (real configs)."""
    with open(os.path.join(REPO, "tests", "fixtures", "mig", "12_mig_parted_and_device_plugin_configs.yaml.txt")) as handle:
        body = handle.read()
    start = body.index("# ---- [%s]" % tag)
    start = body.index("\n", start) + 1
    end = body.find("# ----", start)
    return yaml.safe_load(body[start:end if end >= 0 else None])


def test_plain_gpus():
    assert dc.expected_resources(rendered_config(), [FULL] * 8)["expected"] == {"nvidia.com/gpu": 8}


def test_time_slicing_multiplies_by_replicas():
    config = rendered_config(time_slicing_resources=[{"name": "nvidia.com/gpu", "replicas": 4}])
    expectation = dc.expected_resources(config, [FULL] * 8)
    assert expectation["expected"] == {"nvidia.com/gpu": 32}
    assert dc.compare(expectation, {"nvidia.com/gpu": 32, "cpu": 96}) == [
        {"resource": "nvidia.com/gpu", "expected": 32, "actual": 32, "matches": True}]


def test_rename_by_default_moves_the_count_to_shared():
    config = rendered_config(time_slicing_resources=[{"name": "nvidia.com/gpu", "replicas": 4}],
                             time_slicing_rename_by_default=True)
    expectation = dc.expected_resources(config, [FULL] * 8)
    assert expectation["expected"] == {"nvidia.com/gpu.shared": 32}
    rows = dc.compare(expectation, {"nvidia.com/gpu.shared": 28})
    assert rows == [{"resource": "nvidia.com/gpu.shared", "expected": 32, "actual": 28, "matches": False}]


@pytest.mark.parametrize("tag, expected", [
    ("D1", {"nvidia.com/gpu": 2}),
    ("D2a", {"nvidia.com/gpu": 20}),
    ("D2b", {"nvidia.com/gpu.shared": 20}),
    ("D2c", {"nvidia.com/gpu": 20}),
])
def test_device_plugin_readme_configs_from_fixture_12(tag, expected):
    assert dc.expected_resources(fixture_12_block(tag), [FULL] * 2)["expected"] == expected


def test_mig_single_and_mixed():
    gpus = [mig(7), mig(7), FULL]
    assert dc.expected_resources(rendered_config(mig_strategy="single"), gpus)["expected"] == {"nvidia.com/gpu": 15}
    mixed = dc.expected_resources(rendered_config(mig_strategy="mixed"), gpus, {"1g.10gb": 12, "2g.20gb": 2})
    assert mixed["expected"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 12, "nvidia.com/mig-2g.20gb": 2}
    rows = dc.compare(mixed, {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 12, "nvidia.com/mig-2g.20gb": 2})
    assert all(row["matches"] for row in rows) and len(rows) == 3
    total_only = dc.expected_resources(rendered_config(mig_strategy="mixed"), gpus)
    assert total_only["expected"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-*": 14}
    rows = dc.compare(total_only, {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 12, "nvidia.com/mig-2g.20gb": 1})
    assert [(r["resource"], r["expected"], r["actual"], r["matches"]) for r in rows] == [
        ("nvidia.com/gpu", 1, 1, True), ("nvidia.com/mig-*", 14, 13, False)]


def test_partial_devices_are_unknown_not_guessed():
    config = {"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 4, "devices": [0, 1]}]}}}
    expectation = dc.expected_resources(config, [FULL] * 8)
    assert expectation["expected"] == {} and "devices" in expectation["unknown"]["nvidia.com/gpu"]
    assert dc.compare(expectation, {"nvidia.com/gpu": 14})[0]["matches"] is None


def test_misindented_flags_fall_back_to_none_with_a_note():
    config = {"version": "v1", "flags": None, "migStrategy": "mixed"}  # fixture 12 [U1]
    expectation = dc.expected_resources(config, [mig(7)])
    assert expectation["strategy"] == "none" and "mis-indented" in expectation["notes"][0]


@pytest.mark.parametrize("config, message", [
    ({"version": "v2"}, r"device_plugin_config\.version is 'v2'"),
    ({"flags": {"migStrategy": "half"}}, r"device_plugin_config\.flags\.migStrategy is 'half'"),
    ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu"}]}}},
     r"sharing\.timeSlicing\.resources\[0\]\.replicas is missing"),
    ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 0}]}}},
     r"resources\[0\]\.replicas is 0"),
    ({"sharing": {"timeSlicing": {"resources": [{"name": "$invalid$", "replicas": 2}]}}}, r"resources\[0\]\.name"),
    ({"sharing": {"timeSlicing": {"renameByDefalt": True}}}, r"sharing\.timeSlicing\.renameByDefalt is not a known key"),
    ({"sharing": {"spacial": {}}}, r"sharing\.spacial is not a sharing kind"),
    ("text", r"device_plugin_config is not a mapping"),
])
def test_bad_configs_name_their_path(config, message):
    with pytest.raises(dc.DeviceCountError, match=message):
        dc.expected_resources(config, [FULL])


H100_XML = "constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt"


def test_gpu_health_time_slicing_node_is_ready_and_real_mismatch_is_not():
    config = rendered_config(time_slicing_resources=[{"name": "nvidia.com/gpu", "replicas": 4}],
                             time_slicing_rename_by_default=True)
    inputs = {"nvidia_smi_xml": text(H100_XML), "device_plugin_resources": {"nvidia.com/gpu.shared": 32}}
    result = gh.evaluate(inputs, device_plugin_config=config)
    assert result["gpu_ready"], result["reasons"]
    assert result["device_plugin_resources"] == [
        {"resource": "nvidia.com/gpu.shared", "expected": 32, "actual": 32, "matches": True}]
    assert result["checks"]["device_plugin_count_matches"] is True
    # today's comparison (nvidia.com/gpu against the GPU count) called this node broken
    assert not gh.evaluate(dict(inputs, device_plugin_count=0))["gpu_ready"]
    broken = gh.evaluate({"nvidia_smi_xml": text(H100_XML), "device_plugin_resources": {"nvidia.com/gpu.shared": 28}},
                         device_plugin_config=config)
    assert not broken["gpu_ready"] and "exposes 28 nvidia.com/gpu.shared" in broken["reasons"][0]


def test_gpu_health_mig_mixed_counts_per_profile():
    xml = text("01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt")  # 1 GPU described, 4 MIG devices (GI 3-6)
    config = rendered_config(mig_strategy="mixed")
    good = gh.evaluate({"nvidia_smi_xml": xml, "device_plugin_resources": {"nvidia.com/mig-1g.20gb": 4}},
                       device_plugin_config=config, mig_layout={"1g.20gb": 4})
    rows = dict((r["resource"], r) for r in good["device_plugin_resources"])
    assert rows["nvidia.com/mig-1g.20gb"]["matches"] is True
    bad = gh.evaluate({"nvidia_smi_xml": xml, "device_plugin_resources": {"nvidia.com/mig-1g.20gb": 3}},
                      device_plugin_config=config, mig_layout={"1g.20gb": 4})
    assert bad["checks"]["device_plugin_count_matches"] is False


def test_gpu_health_bad_config_is_its_error():
    with pytest.raises(gh.GpuHealthError, match=r"device_plugin_config\.flags\.migStrategy"):
        gh.evaluate({"nvidia_smi_xml": text(H100_XML), "device_plugin_resources": {"nvidia.com/gpu": 8}},
                    device_plugin_config={"flags": {"migStrategy": "nope"}})
