"""mig-parted schema, evaluation against a node, drift and nvidia-smi MIG parsers."""
import copy

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_placement as mpl
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_plan as mplan
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_tables as mt

from mig_fixtures import config_doc, mig_tables, parse_lgip, parse_lgipp


def gpus(device_id, count=8):
    resolved, errors = mpl.resolve_gpus([{"index": i, "device_id": device_id} for i in range(count)])
    assert errors == []
    return resolved


H100_X8 = "0x233010DE"
A100_40 = "0x20B010DE"
H200 = "0x233510DE"


# ---------------------------------------------------------------- fixture 12

def test_m1_examples_are_valid_on_an_a100_40gb_node():
    result = mplan.evaluate(config_doc("M1"), gpus(A100_40))
    assert result["errors"] == []
    assert result["valid"] is True
    assert sorted(result["configs"]) == sorted(config_doc("M1")["mig-configs"])
    custom = result["configs"]["custom-config"]["placements"]
    # entry 4 (GPU 7): 1g.5gb x2 + 2g.10gb + 3g.20gb, concrete starts
    assert [(i["profile"], i["start"]) for i in custom[4][0]["instances"]] == [
        ("2g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3), ("3g.20gb", 4)]
    assert custom[0][0] == {"index": 0, "model": "A100-40GB", "mig_enabled": False, "instances": []}
    assert [item["index"] for item in custom[0]] == [0, 1, 2, 3]


def test_m1_a100_40gb_profiles_do_not_exist_on_h100():
    result = mplan.evaluate(config_doc("M1"), gpus(H100_X8))
    assert result["valid"] is False
    assert result["configs"]["all-disabled"]["valid"] is True
    assert result["configs"]["all-enabled"]["valid"] is True
    bad = result["configs"]["all-1g.5gb"]
    assert bad["valid"] is False
    assert bad["errors"][0].startswith("config all-1g.5gb entry 0: GPU 0 (H100-80GB, 0x233010DE): profile 1g.5gb does not exist")
    assert len(bad["errors"]) == 8  # one per GPU


def test_m2_config_default_on_h100_and_h200():
    document = config_doc("M2")
    on_h100 = mplan.evaluate(document, gpus(H100_X8))
    assert on_h100["configs"]["all-1g.10gb"]["valid"] is True
    assert on_h100["configs"]["all-balanced"]["valid"] is True
    # all-7g.141gb has no device-filter: on an H100 node it cannot apply
    assert on_h100["configs"]["all-7g.141gb"]["valid"] is False
    assert "7g.141gb does not exist" in on_h100["configs"]["all-7g.141gb"]["errors"][0]
    on_h200 = mplan.evaluate(document, gpus(H200))
    assert on_h200["valid"] is True
    balanced = on_h200["configs"]["all-balanced"]["placements"]
    assert [i["index"] for i in balanced[0]] == list(range(8))     # the H200 entry applies
    # the other entries name models no GPU of this node has: checked per model
    assert [(i["index"], i["model"]) for i in balanced[1]] == [(None, "H100-NVL")]
    assert [(i["index"], i["model"]) for i in balanced[4]] == [(None, "A30")]
    assert [(p["profile"], p["start"]) for p in balanced[0][0]["instances"]] == [
        ("2g.35gb", 0), ("1g.18gb", 2), ("1g.18gb", 3), ("3g.71gb", 4)]


def test_impossible_two_7g_80gb_is_rejected_with_the_reason():
    # Constructed after the published example that asks for two 7g.80gb on one GPU.
    document = {"version": "v1", "mig-configs": {"all-7g.80gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 2}}]}}
    result = mplan.evaluate(document, gpus(H100_X8, 2))
    assert result["valid"] is False
    assert result["errors"] == [
        "config all-7g.80gb entry 0: GPU %d (H100-80GB, 0x233010DE): 7g.80gb: 2 requested but at most 1 fit "
        "on one GPU (starts {0}, size 8 of 8 memory slots)" % i for i in (0, 1)]


def test_device_filter_model_is_checked_even_without_such_a_gpu():
    document = {"version": "v1", "mig-configs": {"h200": [
        {"device-filter": "0x233510DE", "devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 3}}]}}
    result = mplan.evaluate(document, gpus(H100_X8, 1))
    assert result["valid"] is False
    assert result["errors"][0].startswith("config h200 entry 0: model H200-141GB (device-filter): 3g.71gb: 3 requested")


# ---------------------------------------------------------------- schema

def _doc(entry, extra=None):
    document = {"version": "v1", "mig-configs": {"c": [entry]}}
    document.update(extra or {})
    return document


GOOD = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}


@pytest.mark.parametrize("document,message", [
    (_doc(GOOD, {"mig-config": {}}), "mig-config: unknown key (allowed: version, mig-configs)"),
    ({"mig-configs": {"c": [GOOD]}}, "version: required (v1)"),
    (_doc(GOOD, {"version": "v2"}), "version: 'v2' is not supported (v1)"),
    ({"version": "v1"}, "mig-configs: required"),
    ({"version": "v1", "mig-configs": {}}, "mig-configs: must be a non-empty mapping"),
    ({"version": "v1", "mig-configs": {"c": []}}, "mig-configs.c: must be a non-empty list of device entries"),
    (_doc("all"), "mig-configs.c[0]: a device entry must be a mapping"),
    (_doc(dict(GOOD, migdevices={})), "mig-configs.c[0].migdevices: unknown key"),
    (_doc({"mig-enabled": False}), "mig-configs.c[0].devices: required"),
    (_doc({"devices": "some", "mig-enabled": False}), "mig-configs.c[0].devices: 'some' must be 'all' or a list"),
    (_doc({"devices": [], "mig-enabled": False}), "mig-configs.c[0].devices: the list of GPU indexes is empty"),
    (_doc({"devices": [0, -1], "mig-enabled": False}), "mig-configs.c[0].devices[1]: -1 is not a GPU index"),
    (_doc({"devices": ["0"], "mig-enabled": False}), "mig-configs.c[0].devices[0]: '0' is not a GPU index"),
    (_doc({"devices": [1, 1], "mig-enabled": False}), "mig-configs.c[0].devices[1]: GPU index 1 is listed twice"),
    (_doc({"devices": "all"}), "mig-configs.c[0].mig-enabled: required"),
    (_doc({"devices": "all", "mig-enabled": "yes"}), "mig-configs.c[0].mig-enabled: 'yes' must be true or false"),
    (_doc({"devices": "all", "mig-enabled": True}), "mig-configs.c[0].mig-devices: required when mig-enabled is true"),
    (_doc({"devices": "all", "mig-enabled": False, "mig-devices": {}}),
     "mig-configs.c[0].mig-devices: forbidden when mig-enabled is false"),
    (_doc(dict(GOOD, **{"mig-devices": ["1g.10gb"]})), "mig-configs.c[0].mig-devices: must be a mapping"),
    (_doc(dict(GOOD, **{"mig-devices": {"1g.10gb": -1}})), "mig-configs.c[0].mig-devices.1g.10gb: count -1 must be a non-negative"),
    (_doc(dict(GOOD, **{"mig-devices": {"1g.10gb": "7"}})), "mig-configs.c[0].mig-devices.1g.10gb: count '7' must be"),
    (_doc(dict(GOOD, **{"mig-devices": {"1g.10gb": True}})), "mig-configs.c[0].mig-devices.1g.10gb: count True must be"),
    (_doc(dict(GOOD, **{"mig-devices": {"1g.10gb": 0, "2g.20gb": 0}})),
     "mig-configs.c[0].mig-devices: every count is 0"),
    (_doc(dict(GOOD, **{"mig-devices": {"1g10gb": 1}})), "mig-configs.c[0].mig-devices.1g10gb: '1g10gb' is not a MIG profile name"),
    (_doc(dict(GOOD, **{"mig-devices": {"1c.2g.20gb": 1}})), "compute-instance profiles (1c.2g.20gb) are not supported"),
    (_doc(dict(GOOD, **{"device-filter": 0x2330})), "mig-configs.c[0].device-filter: 9008 must be a string"),
    (_doc(dict(GOOD, **{"device-filter": []})), "mig-configs.c[0].device-filter: the list is empty"),
    (_doc(dict(GOOD, **{"device-filter": ["0x233010DE", "H100"]})),
     "mig-configs.c[0].device-filter[1]: 'H100' is not a PCI device id"),
    ("version: v1", "config: the document must be a mapping"),
])
def test_every_schema_error_names_its_path(document, message):
    before = copy.deepcopy(document)
    result = mplan.evaluate(document, gpus(H100_X8, 1))
    assert result["valid"] is False
    assert any(message in error for error in result["errors"]), result["errors"]
    assert document == before  # nothing changed


def test_empty_mig_devices_is_valid_when_enabled():
    result = mplan.evaluate(_doc({"devices": "all", "mig-enabled": True, "mig-devices": {}}), gpus(H100_X8, 1))
    assert result["valid"] is True


def test_zero_counts_beside_a_real_count_are_fine():
    result = mplan.evaluate(_doc(dict(GOOD, **{"mig-devices": {"1g.10gb": 7, "2g.20gb": 0}})), gpus(H100_X8, 1))
    assert result["valid"] is True


def test_device_filter_scalar_and_list_both_work():
    for device_filter, checked in (("0x233010DE", [(0, "H100-80GB"), (1, "H100-80GB")]),
                                   (["0x20B210DE", "0x2330"], [(0, "H100-80GB"), (1, "H100-80GB"), (None, "A100-80GB")])):
        result = mplan.evaluate(_doc(dict(GOOD, **{"device-filter": device_filter})), gpus(H100_X8, 2))
        assert result["valid"] is True
        assert [(i["index"], i["model"]) for i in result["configs"]["c"]["placements"][0]] == checked
    result = mplan.evaluate(_doc(dict(GOOD, **{"device-filter": "0x20B710DE"})), gpus(H100_X8, 2))
    assert "model A30 (device-filter): profile 1g.10gb does not exist" in result["errors"][0]


# ---------------------------------------------------------------- node checks

def test_devices_index_missing_on_the_node():
    result = mplan.evaluate(_doc({"devices": [0, 5], "mig-enabled": False}), gpus(H100_X8, 2))
    assert result["errors"] == ["config c entry 0: devices lists GPU 5 but the node has GPUs 0, 1"]


def test_overlapping_entries_are_reported():
    document = {"version": "v1", "mig-configs": {"c": [
        {"devices": "all", "mig-enabled": False},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]}}
    result = mplan.evaluate(document, gpus(H100_X8, 2))
    assert result["errors"] == [
        "config c entry 1: GPU 1 (H100-80GB, 0x233010DE) is already configured by entry 0; entries must not overlap"]


def test_mig_on_a_gpu_without_mig_support():
    resolved, errors = mpl.resolve_gpus([{"index": 0, "product": "NVIDIA A40"}])
    assert errors == [] and resolved[0]["model"] is None
    result = mplan.evaluate(_doc(GOOD), resolved)
    assert "GPU 0 (not MIG-capable, NVIDIA A40): MIG is not supported on this GPU" in result["errors"][0]
    assert mplan.evaluate(_doc({"devices": "all", "mig-enabled": False}), resolved)["valid"] is True


def test_select_unknown_config():
    result = mplan.evaluate(config_doc("M1"), gpus(A100_40), select="all-1g.10gb")
    assert result["valid"] is False
    assert result["errors"][0].startswith("select: config 'all-1g.10gb' is not in mig-configs (configs: all-1g.5gb")


@pytest.mark.parametrize("gpu_list,message", [
    ([{"index": 0}], "gpus[0]: give device_id"),
    ([{"index": -1, "device_id": H100_X8}], "gpus[0].index: -1 must be a non-negative integer"),
    ([{"index": 0, "device_id": H100_X8}, {"index": 0, "device_id": H100_X8}], "gpus[1].index: GPU index 0 is given twice"),
    ([{"index": 0, "device_id": "h100"}], "gpus[0].device_id: 'h100' is not a PCI device id"),
    ([{"index": 0, "device_id": H100_X8, "model": "x"}], "gpus[0].model: unknown key"),
    ([{"index": 0, "device_id": H100_X8, "product": "NVIDIA A30"}], "gpus[0]: device_id 0x233010DE (H100-80GB) and product"),
])
def test_bad_gpu_lists(gpu_list, message):
    _resolved, errors = mpl.resolve_gpus(gpu_list)
    assert any(message in e for e in errors), errors


def test_single_strategy_needs_one_profile_everywhere():
    document = config_doc("M1")
    single = mplan.evaluate(document, gpus(A100_40), mig_strategy="single")
    assert single["configs"]["all-1g.5gb"]["valid"] is True
    assert single["configs"]["all-disabled"]["valid"] is True
    balanced = single["configs"]["all-balanced"]["errors"]
    assert "needs exactly one profile per GPU, found 1g.5gb, 2g.10gb, 3g.20gb" in balanced[0]
    custom = single["configs"]["custom-config"]["errors"]
    assert any("every MIG-enabled GPU must use the same profile, found 1g.5gb on GPU 4; 2g.10gb on GPU 5; 3g.20gb on GPU 6"
               in e for e in custom), custom
    assert any("GPUs 0,1,2,3 have MIG disabled while GPUs 4,5,6,7 have it enabled" in e for e in custom), custom
    mixed = mplan.evaluate(document, gpus(A100_40), mig_strategy="mixed")
    assert mixed["valid"] is True


# ---------------------------------------------------------------- parsers (fixture 09)

def test_parse_lgip_a100_40gb():
    rows = parse_lgip(mig_tables("A100-40GB", "-lgip"))
    assert [(r["profile"], r["profile_id"], r["instances_total"]) for r in rows] == [
        ("1g.5gb", 19, 7), ("1g.5gb+me", 20, 1), ("1g.10gb", 15, 4), ("2g.10gb", 14, 3),
        ("3g.20gb", 9, 2), ("4g.20gb", 5, 1), ("7g.40gb", 0, 1)]
    assert rows[-1]["memory_gib"] == 39.50 and rows[-1]["sm"] == 98
    assert (rows[-1]["ce"], rows[-1]["jpeg"], rows[-1]["ofa"]) == (7, 1, 1)


def test_parse_lgip_h100_matches_geometry_totals_and_ids():
    from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_geometry import GEOMETRY
    rows = parse_lgip(mig_tables("H100-80GB", "-lgip"))
    profiles = GEOMETRY["H100-80GB"]["profiles"]
    assert len(rows) == 7
    for row in rows:
        assert profiles[row["profile"]]["id"] == row["profile_id"]
        assert mpl.max_instances(profiles[row["profile"]], 8) == row["instances_total"]
        assert profiles[row["profile"]]["memory_gib"] == row["memory_gib"]
    assert rows[-1]["sm"] == 132


def test_parse_lgip_a100_80gb_old_driver_has_no_1g_20gb():
    rows = parse_lgip(mig_tables("A100-80GB", "-lgip"))
    assert [r["profile"] for r in rows] == ["1g.10gb", "1g.10gb+me", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert rows[0]["memory_gib"] == 9.50


def test_parse_lgipp_both_spellings_and_annotations():
    from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_geometry import GEOMETRY
    rows = parse_lgipp(mig_tables("H100-80GB", "-lgipp"))
    assert len(rows) == 7
    by_id = dict((r["profile_id"], (r["starts"], r["size"])) for r in rows)
    for profile in GEOMETRY["H100-80GB"]["profiles"].values():
        assert by_id[profile["id"]] == (profile["starts"], profile["size"])
    a30 = parse_lgipp(mig_tables("-lgipp A30"))
    assert [(r["profile_id"], r["starts"], r["size"]) for r in a30] == [
        (14, [0, 1, 2, 3], 1), (21, [0, 1, 2, 3], 1), (5, [0, 2], 2), (6, [0, 2], 2), (0, [0], 4)]
    for profile in GEOMETRY["A30"]["profiles"].values():
        assert (profile["starts"], profile["size"]) in [(r["starts"], r["size"]) for r in a30 if r["profile_id"] == profile["id"]]


def test_parse_lgi_and_lci():
    gis = mt.parse_lgi(mig_tables("H100-80GB", "-lgi"))
    assert [(g["profile"], g["profile_id"], g["instance_id"], g["start"], g["size"]) for g in gis] == [
        ("1g.10gb", 19, 7 + n, n, 1) for n in range(7)]
    cis = mt.parse_lci(mig_tables("H100-80GB", "-lci"))
    assert [(c["gpu_instance_id"], c["profile_id"], c["instance_id"]) for c in cis] == [(7 + n, 0, 0) for n in range(7)]
    state = mplan.actual_state([{"index": 0, "mig_mode": "Enabled", "mig_mode_pending": "Enabled"}], gis, cis)
    assert len(state[0]["instances"]) == 7
    assert all(len(i["compute_instances"]) == 1 for i in state[0]["instances"])


@pytest.mark.parametrize("parser,text", [
    (mt.parse_lgi, "No GPU instances found: Not Found\n"),
    (mt.parse_lci, "No compute instances found: Not Found\n"),
    (parse_lgip, "No MIG-enabled devices found.\n"),
    (mt.parse_lgi, ""),
])
def test_empty_answers_parse_to_no_rows(parser, text):
    assert parser(text) == []


@pytest.mark.parametrize("parser", [mt.parse_lgi, mt.parse_lci, parse_lgip])
def test_unrecognised_output_raises(parser):
    with pytest.raises(mt.MigParseError, match="not recognised"):
        parser("Failed to initialize NVML: Driver/library version mismatch\n")


# ---------------------------------------------------------------- drift

def _one_h100_config(layout):
    document = _doc({"devices": "all", "mig-enabled": True, "mig-devices": layout})
    resolved = gpus(H100_X8, 1)
    return mplan.evaluate(document, resolved, select="c")["configs"]["c"], resolved


def test_no_drift_when_the_actual_layout_matches():
    config, resolved = _one_h100_config({"1g.10gb": 7})
    gis = mt.parse_lgi(mig_tables("H100-80GB", "-lgi"))
    cis = mt.parse_lci(mig_tables("H100-80GB", "-lci"))
    actual = mplan.actual_state([{"index": 0, "mig_mode": "Enabled", "mig_mode_pending": "Enabled"}], gis, cis)
    assert mplan.compare(config, actual, resolved) == ([], [])


def test_drift_from_disabled_mode_gives_a_plan_with_placements():
    config, resolved = _one_h100_config({"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1})
    actual = mplan.actual_state([{"index": 0, "mig_mode": "Disabled", "mig_mode_pending": "Disabled"}], [], [])
    drift, plan = mplan.compare(config, actual, resolved)
    assert [d["kind"] for d in drift] == ["mig_mode", "instances"]
    assert plan == [{
        "index": 0, "pci_bus_id": None, "model": "H100-80GB", "mig_enabled": True, "mode_change": True,
        "destroy": False, "create": "5:0,14:4,19:6", "instances": config["placements"][0][0]["instances"]}]


def test_drift_when_instances_differ_and_when_compute_instances_are_missing():
    config, resolved = _one_h100_config({"1g.10gb": 7})
    gis = mt.parse_lgi(mig_tables("H100-80GB", "-lgi"))
    enabled = [{"index": 0, "mig_mode": "Enabled", "mig_mode_pending": "Enabled"}]
    drift, plan = mplan.compare(config, mplan.actual_state(enabled, gis, []), resolved)
    assert [d["kind"] for d in drift] == ["compute_instances"]
    assert plan[0]["destroy"] is True and plan[0]["mode_change"] is False
    config, resolved = _one_h100_config({"7g.80gb": 1})
    drift, plan = mplan.compare(config, mplan.actual_state(enabled, gis, []), resolved)
    assert drift[0]["message"] == "GPU 0: instances 1g.10gb x7, the config wants 7g.80gb x1"
    assert plan[0]["create"] == "0:0"


def test_pending_mode_change_is_drift():
    config, resolved = _one_h100_config({})
    actual = mplan.actual_state([{"index": 0, "mig_mode": "Disabled", "mig_mode_pending": "Enabled"}], [], [])
    drift, plan = mplan.compare(config, actual, resolved)
    assert [d["kind"] for d in drift] == ["mig_mode", "mig_mode_pending"]
    assert plan[0]["mode_change"] is True and plan[0]["create"] == ""


def test_expected_resources_follow_the_device_plugin_strategy():
    gpus = mpl.resolve_gpus([{"index": i, "device_id": "0x2330"} for i in range(3)])[0]
    document = {"version": "v1", "mig-configs": {"c": [
        {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
        {"devices": [2], "mig-enabled": False}]}}
    config = mplan.evaluate(document, gpus)["configs"]["c"]
    assert mplan.expected_resources(config, "mixed") == {
        "nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "2", "nvidia.com/mig-4g.40gb": "2"}
    # single with MIG on GPUs 0-1 and off on GPU 2: the device plugin refuses to start (k8s-device-plugin
    # internal/rm/device_map.go "all devices on the node must be configured with the same migEnabled value")
    assert mplan.expected_resources(config, "single") is None
    assert "same migEnabled value" in mplan.single_strategy_refusal(config)
    assert mplan.expected_resources(config, None) is None
    uniform = mplan.evaluate({"version": "v1", "mig-configs": {"c": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}, gpus)["configs"]["c"]
    assert mplan.expected_resources(uniform, "single") == {"nvidia.com/gpu": "21"}
    assert mplan.single_strategy_refusal(uniform) is None
