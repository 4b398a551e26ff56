# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Expected device-plugin resources (issue #12 section 3): time-slicing, renameByDefault, MPS, MIG single and mixed."""
import os

import pytest
import yaml

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import device_counts as dc
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health as gh
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import device_plugin_config

from gpu_fixtures import REPO, text

FULL = {"mig_enabled": False, "mig_devices": 0}


def mig(count):
    return {"mig_enabled": True, "mig_devices": count}


def rendered_config(**settings):
    """The config roles/device_plugin_config publishes for these class settings (its own renderer, read back)."""
    values = {"mig_strategy": "none", "fail_on_init_error": True, "allocation_policy": "packed",
              "device_list_strategy": "volume-mounts", "time_slicing_resources": [], "time_slicing_rename_by_default": False}
    values.update(settings)
    result = device_plugin_config.render_all(values)
    assert result["problems"] == []
    return yaml.safe_load(result["configs"]["default"])


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
    assert dc.expected_resources(rendered_config(mig_strategy="single"), [mig(7), mig(7)])["expected"] == {
        "nvidia.com/gpu": 14}
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


# Constructed GPU list, modelled on a real node in this state: NVIDIA/gpu-operator issue #603 (mig-parted log of an
# A100 80GB PCIe node, GPU 0 "Current MIG mode: Enabled", GPU 1 "Current MIG mode: Disabled").  The refusal is
# NVIDIA/k8s-device-plugin v0.20.0 internal/rm/device_map.go, buildDeviceMapFromConfigResources.
def test_mig_single_with_mig_on_and_off_gpus_is_a_refusal_not_a_total():
    expectation = dc.expected_resources(rendered_config(mig_strategy="single"), [mig(7), FULL])
    assert expectation["expected"] == {} and expectation["unknown"] == {}
    assert dc.MIXED_MIG_MODES_ERROR in expectation["refused"]
    assert "1 GPU(s) in MIG mode and 1 not" in expectation["refused"] and "Fix:" in expectation["refused"]
    # whatever the node still shows (8 stale, 0, 1+7): no count is right
    for actual in ({"nvidia.com/gpu": 8}, {}, {"nvidia.com/gpu": 1}):
        rows = dc.compare(expectation, actual)
        assert [(r["resource"], r["expected"], r["matches"]) for r in rows] == [("nvidia.com/gpu", None, False)]
        assert rows[0]["why_refused"] == expectation["refused"]
    # mixed and none have no such rule
    assert dc.expected_resources(rendered_config(mig_strategy="mixed"), [mig(7), FULL])["refused"] is None
    assert dc.expected_resources(rendered_config(mig_strategy="none"), [mig(7), FULL])["refused"] is None


def test_mig_single_with_undescribed_gpus_is_unknown_not_guessed():
    """attached_gpus 4 with one GPU described (the real telegraf fixture 01): their MIG mode is unknown."""
    expectation = dc.expected_resources(rendered_config(mig_strategy="single"),
                                        [mig(4)] + [{"mig_enabled": None, "mig_devices": 0}] * 3)
    assert expectation["refused"] is None and expectation["expected"] == {}
    assert "3 GPU(s) nvidia-smi counts but does not describe" in expectation["unknown"]["nvidia.com/gpu"]


def test_gpu_health_mig_single_refusal_is_a_clear_reason():
    xml = text("01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt")  # real: 1 GPU described (MIG on, 4 devices) of 4
    config = rendered_config(mig_strategy="single")
    result = gh.evaluate({"nvidia_smi_xml": xml, "device_plugin_resources": {"nvidia.com/gpu": 4}},
                         device_plugin_config=config)
    assert result["checks"]["device_plugin_count_matches"] is not True
    assert any("does not describe" in note for note in result["notes"])
    # constructed from that real output: a second, described GPU with MIG off (same A100, another bus id and uuid)
    mixed = _with_a_mig_off_gpu(xml)
    refused = gh.evaluate({"nvidia_smi_xml": mixed, "device_plugin_resources": {"nvidia.com/gpu": 5}},
                          device_plugin_config=config)
    assert not refused["gpu_ready"]
    assert refused["checks"]["device_plugin_count_matches"] is False
    assert any(dc.MIXED_MIG_MODES_ERROR in reason for reason in refused["reasons"])
    assert refused["device_plugin_resources"] == [
        {"resource": "nvidia.com/gpu", "expected": None, "actual": 5, "matches": False,
         "why_refused": refused["device_plugin_resources"][0]["why_refused"]}]
    assert "1 GPU(s) in MIG mode and 1 not" in refused["device_plugin_resources"][0]["why_refused"]
    # under mixed the same node is counted (1 whole GPU + 4 MIG devices)
    counted = gh.evaluate({"nvidia_smi_xml": mixed, "device_plugin_resources": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 4}},
                          device_plugin_config=rendered_config(mig_strategy="mixed"))
    assert counted["checks"]["device_plugin_count_matches"] is True, counted["reasons"]


def _with_a_mig_off_gpu(xml):
    """Fixture 01 with attached_gpus 2 and a copy of its GPU, MIG disabled and without MIG devices (constructed)."""
    import re
    body = xml[xml.index("<gpu id="):xml.index("</gpu>") + len("</gpu>")]
    second = re.sub(r"<mig_devices>.*?</mig_devices>", "<mig_devices>\n</mig_devices>", body, flags=re.S)
    second = second.replace("<current_mig>Enabled</current_mig>", "<current_mig>Disabled</current_mig>")
    second = second.replace("<pending_mig>Enabled</pending_mig>", "<pending_mig>Disabled</pending_mig>")
    second = second.replace('<gpu id="00000000:01:00.0">', '<gpu id="00000000:41:00.0">')
    second = second.replace("00000000:01:00.0", "00000000:41:00.0").replace("GPU-513536b6", "GPU-613536b6")
    second = second.replace("<minor_number>1</minor_number>", "<minor_number>2</minor_number>")
    xml = xml.replace("<attached_gpus>4</attached_gpus>", "<attached_gpus>2</attached_gpus>")
    return xml.replace("</gpu>", "</gpu>\n    " + second, 1)
