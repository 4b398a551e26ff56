"""MIG geometry: every model against the brief, and an independent placement oracle."""
import copy
import itertools

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_geometry as mg
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_placement as mpl

# The brief's geometry, written out independently of the module's table:
# per model, profile -> (allowed starts, size in memory slots).
SEVEN = {
    "1g": ([0, 1, 2, 3, 4, 5, 6], 1),
    "1g-double": ([0, 2, 4, 6], 2),
    "2g": ([0, 2, 4], 2),
    "3g": ([0, 4], 4),
    "4g": ([0], 4),
    "7g": ([0], 8),
}
BRIEF_PROFILES = {
    "A100-40GB": ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "A100-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-NVL": ["1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"],
    "H200-141GB": ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
    "B200": ["1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
}
BRIEF_DEVICE_IDS = {
    "A100-40GB": ["0x20B010DE"],
    "A100-80GB": ["0x20B210DE", "0x20B510DE"],
    "H100-80GB": ["0x233010DE", "0x233110DE", "0x232210DE"],
    "H100-NVL": ["0x232110DE", "0x233A10DE"],
    "H200-141GB": ["0x233510DE"],
    "B200": ["0x290110DE"],
    "A30": ["0x20B710DE"],
}
# -lgip "Total" per profile, from the brief's placements.
BRIEF_TOTALS = {"1g": 7, "1g-double": 4, "2g": 3, "3g": 2, "4g": 1, "7g": 1}


def brief_table(model):
    """profile name -> (starts, size, is_me) as the brief states it."""
    if model == "A30":
        return {
            "1g.6gb": ([0, 1, 2, 3], 1, False), "1g.6gb+me": ([0, 1, 2, 3], 1, True),
            "2g.12gb": ([0, 2], 2, False), "2g.12gb+me": ([0, 2], 2, True),
            "4g.24gb": ([0], 4, False),
        }
    one, one_double, two, three, four, seven = BRIEF_PROFILES[model]
    kinds = {one: "1g", one_double: "1g-double", two: "2g", three: "3g", four: "4g", seven: "7g"}
    table = dict((name, SEVEN[kind] + (False,)) for name, kind in kinds.items())
    table[one + "+me"] = SEVEN["1g"] + (True,)
    return table


def oracle_packings(table, slots):
    """Every set of non-overlapping instances, by a plain slot-by-slot walk (no pruning, no memo)."""
    found = set()

    def walk(slot, counts):
        if slot >= slots:
            found.add(tuple(sorted(counts.items())))
            return
        walk(slot + 1, counts)  # leave this slot empty
        for name, (starts, size, _me) in table.items():
            if slot in starts and slot + size <= slots:
                counts[name] = counts.get(name, 0) + 1
                # later instances start after this one ends
                walk(slot + size, counts)
                counts[name] -= 1
                if not counts[name]:
                    del counts[name]

    walk(0, {})
    return [dict(p) for p in found]


def oracle_closure(packings, table):
    """Every layout some packing holds (the downward closure), with at most one +me instance."""
    names = sorted(table)
    closure = set()
    for packing in packings:
        for counts in itertools.product(*[range(packing.get(n, 0) + 1) for n in names]):
            if sum(c for n, c in zip(names, counts) if table[n][2]) <= 1:
                closure.add(counts)
    return names, closure


def oracle_feasible(layout, oracle):
    names, closure = oracle
    return tuple(layout.get(n, 0) for n in names) in closure


ALL_MODELS = ["A100-40GB", "A100-80GB", "H100-80GB", "H100-NVL", "H200-141GB", "B200", "A30"]


def test_every_model_of_the_brief_is_present():
    assert sorted(mg.GEOMETRY) == sorted(ALL_MODELS)


@pytest.mark.parametrize("model", ALL_MODELS)
def test_profiles_starts_and_sizes_match_the_brief(model):
    table = brief_table(model)
    data = mg.GEOMETRY[model]
    assert sorted(data["profiles"]) == sorted(table)
    for name, (starts, size, media) in table.items():
        profile = data["profiles"][name]
        assert (profile["starts"], profile["size"], profile["media_extensions"]) == (starts, size, media), name
    assert data["memory_slots"] == (4 if model == "A30" else 8)
    assert data["slices"] == (4 if model == "A30" else 7)


@pytest.mark.parametrize("model", ALL_MODELS)
def test_device_ids_of_the_brief_map_to_the_model(model):
    index = mg.GeometryIndex()
    for device_id in BRIEF_DEVICE_IDS[model]:
        assert index.model_for_device_id(device_id) == model
        short = "0x" + device_id[2:6]
        assert index.model_for_device_id(short) == model
        assert index.model_for_device_id("10de:" + device_id[2:6].lower()) == model


@pytest.mark.parametrize("model", [m for m in ALL_MODELS if m != "A30"])
def test_single_profile_totals_match_the_brief(model):
    one, one_double, two, three, four, seven = BRIEF_PROFILES[model]
    data = mg.GEOMETRY[model]
    for name, kind in ((one, "1g"), (one_double, "1g-double"), (two, "2g"), (three, "3g"), (four, "4g"), (seven, "7g")):
        total = BRIEF_TOTALS[kind]
        assert mpl.max_instances(data["profiles"][name], 8) == total
        placement, reason = mpl.find_placement({name: total}, data)
        assert reason is None and len(placement) == total
        placement, reason = mpl.find_placement({name: total + 1}, data)
        assert placement is None and reason.kind == mpl.Infeasible.TOO_MANY, name
    placement, reason = mpl.find_placement({one + "+me": 2}, data)
    assert placement is None and reason.kind == mpl.Infeasible.TOO_MANY and "+me" in reason.message


def test_a30_totals_and_one_media_extension_per_gpu():
    data = mg.GEOMETRY["A30"]
    assert mpl.find_placement({"1g.6gb": 4}, data)[1] is None
    assert mpl.find_placement({"2g.12gb": 2}, data)[1] is None
    assert mpl.find_placement({"1g.6gb": 5}, data)[1].kind == mpl.Infeasible.TOO_MANY
    reason = mpl.find_placement({"1g.6gb+me": 1, "2g.12gb+me": 1}, data)[1]
    assert reason.kind == mpl.Infeasible.TOO_MANY and "+me" in reason.message


def _check_placement(placement, layout, table, slots):
    used = 0
    counts = {}
    for item in placement:
        starts, size, _me = table[item["profile"]]
        assert item["start"] in starts
        assert item["size"] == size
        mask = ((1 << size) - 1) << item["start"]
        assert not used & mask, "overlap at %s" % item
        assert item["start"] + size <= slots
        used |= mask
        counts[item["profile"]] = counts.get(item["profile"], 0) + 1
    assert counts == dict((n, c) for n, c in layout.items() if c)


@pytest.mark.parametrize("model", ALL_MODELS)
def test_every_layout_up_to_capacity_agrees_with_the_oracle(model):
    """All count vectors up to each profile's total: feasible exactly when the oracle packs them."""
    table = brief_table(model)
    slots = 4 if model == "A30" else 8
    oracle = oracle_closure(oracle_packings(table, slots), table)
    data = mg.GEOMETRY[model]
    names = sorted(table)
    # up to each profile's total (+me one beyond it, so two +me are tried)
    ranges = [range(0, mpl.max_instances(data["profiles"][n], slots) + (2 if n.endswith("+me") else 1)) for n in names]
    feasible = at_capacity = 0
    for counts in itertools.product(*ranges):
        layout = dict(zip(names, counts))
        placement, reason = mpl.find_placement(layout, data)
        expected = oracle_feasible(layout, oracle)
        assert (placement is not None) == expected, (layout, reason and reason.message)
        if placement is None:
            assert reason.kind in (mpl.Infeasible.TOO_MANY, mpl.Infeasible.SLOTS_EXHAUSTED, mpl.Infeasible.CONFLICT)
            continue
        feasible += 1
        _check_placement(placement, layout, table, slots)
        # At capacity: no single further instance of any profile fits.
        if all(not oracle_feasible(dict(layout, **{n: layout[n] + 1}), oracle) for n in names):
            at_capacity += 1
            for name in names:
                grown = dict(layout)
                grown[name] += 1
                assert mpl.find_placement(grown, data)[0] is None
    assert feasible > 0 and at_capacity > 0


def test_placement_order_matters_4g_2g_1g():
    data = mg.GEOMETRY["H100-80GB"]
    placement, reason = mpl.find_placement({"1g.10gb": 1, "2g.20gb": 1, "4g.40gb": 1}, data)
    assert reason is None
    assert [(p["profile"], p["start"]) for p in placement] == [("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]
    # 3g + 2g + 2g fits only with 3g at slot 4
    placement, reason = mpl.find_placement({"3g.40gb": 1, "2g.20gb": 2}, data)
    assert reason is None
    assert dict((p["profile"], p["start"]) for p in placement)["3g.40gb"] == 4


def test_3g_3g_1g_looks_fine_by_compute_slices_but_cannot_be_placed():
    data = mg.GEOMETRY["A100-80GB"]
    placement, reason = mpl.find_placement({"3g.40gb": 2, "1g.10gb": 1}, data)
    assert placement is None
    assert reason.kind == mpl.Infeasible.SLOTS_EXHAUSTED
    assert "9 memory slots" in reason.message and "has 8" in reason.message


def test_conflict_reason_names_the_profile_and_start():
    """A geometry where the sums fit but the starts collide (a user override)."""
    geometry = mg.merge_geometry({"TEST-GPU": {
        "device_ids": ["0xFFFF10DE"], "slices": 7, "memory_slots": 8,
        "profiles": {
            "2g.20gb": {"id": 14, "starts": [2], "size": 2},
            "1g.10gb": {"id": 19, "starts": [2, 3], "size": 1},
        }}})
    placement, reason = mpl.find_placement({"2g.20gb": 1, "1g.10gb": 1}, geometry["TEST-GPU"])
    assert placement is None
    assert reason.kind == mpl.Infeasible.CONFLICT
    assert "start 2 overlaps 2g.20gb at 2" in reason.message and "start 3 overlaps" in reason.message


def test_unknown_profile_lists_the_model_profiles():
    reason = mpl.find_placement({"1g.5gb": 1}, mg.GEOMETRY["H100-80GB"])[1]
    assert reason.kind == mpl.Infeasible.UNKNOWN_PROFILE
    assert "1g.5gb" in reason.message and "1g.10gb" in reason.message


@pytest.mark.parametrize("text,expected", [
    ("0x2330", "0x233010DE"), ("0x233010de", "0x233010DE"), ("233010DE", "0x233010DE"),
    ("10de:2330", "0x233010DE"), (" 0x20B710DE ", "0x20B710DE"),
])
def test_device_id_spellings(text, expected):
    assert mg.normalize_device_id(text) == expected


@pytest.mark.parametrize("text", ["2330", "0x23", "nvidia", "10de-2330", ""])
def test_bad_device_ids_are_rejected(text):
    with pytest.raises(mg.GeometryError, match="not a PCI device id"):
        mg.normalize_device_id(text)


def test_products_match_case_and_prefix_insensitively():
    index = mg.GeometryIndex()
    assert index.model_for_product("NVIDIA H100 80GB HBM3") == "H100-80GB"
    assert index.model_for_product("nvidia  a100-sxm4-80gb") == "A100-80GB"
    assert index.model_for_product("A100-SXM4-40GB") == "A100-40GB"
    assert index.model_for_product("NVIDIA A40") is None


def test_merge_geometry_extends_without_touching_the_builtin_table():
    before = copy.deepcopy(mg.GEOMETRY)
    merged = mg.merge_geometry({"H100-80GB": {"device_ids": ["0x233010DE", "0x2339"],
                                              "profiles": {"1g.20gb+me": {"id": 21, "starts": [0, 2, 4, 6], "size": 2}}}})
    assert mg.GEOMETRY == before
    assert merged["H100-80GB"]["device_ids"] == ["0x233010DE", "0x233910DE"]
    assert merged["H100-80GB"]["profiles"]["1g.20gb+me"]["media_extensions"] is True
    assert merged["H100-80GB"]["profiles"]["1g.20gb+me"]["slices"] == 1


@pytest.mark.parametrize("overrides,message", [
    ({"H100-80GB": {"profile": {}}}, r"geometry.H100-80GB.profile is not a known key"),
    ({"H100-80GB": {"profiles": {"1g.10gb": {"start": [0]}}}}, r"profiles.1g.10gb.start is not a known key"),
    ({"NEW": {"slices": 7, "memory_slots": 8, "profiles": {"1g.5gb": {"id": 1, "size": 1}}}}, r"1g.5gb.starts is required"),
    ({"NEW": {"slices": 7, "memory_slots": 8, "profiles": {"1g.5gb": {"id": 1, "starts": [8], "size": 1}}}},
     r"1g.5gb.starts\[0\]: 8 must be a slot with start \+ size <= 8"),
    ({"NEW": {"profiles": {}}}, r"geometry.NEW.memory_slots: None must be an integer from 1 to 32"),
    ({"H100-80GB": {"device_ids": ["bogus"]}}, r"device_ids\[0\]: 'bogus' is not a PCI device id"),
    # issue #10 item 7: these raised TypeError/AttributeError before the strict schema
    ({"H100-80GB": {"profiles": [1, 2]}}, r"^geometry.H100-80GB.profiles must be a mapping"),
    ({"H100-80GB": {"device_ids": [{"a": 1}]}}, r"^geometry.H100-80GB.device_ids\[0\]: \{'a': 1\} must be a non-empty string"),
    ({"H100-80GB": {"profiles": {"1g.10gb": {"slices": "abc"}}}}, r"^geometry.H100-80GB.profiles.1g.10gb.slices: 'abc' must be an integer"),
    ({"H100-80GB": {"profiles": {"1g.10gb": {"id": "19"}}}}, r"^geometry.H100-80GB.profiles.1g.10gb.id: '19' must be an integer"),
    ({"H100-80GB": {"profiles": {"1g.10gb": {"starts": ["0"]}}}}, r"1g.10gb.starts\[0\]: '0' must be a slot"),
    ({"H100-80GB": {"profiles": {"1g.10gb": {"id": 14}}}}, r"id: 14 is also the id of (1g.10gb|2g.20gb)"),
    ({"H100-80GB": {"profiles": {"1g.10gb": {"media_extensions": "yes"}}}}, r"media_extensions: 'yes' must be true or false"),
    ({"H100-80GB": {"slices": True}}, r"H100-80GB.slices: True must be an integer"),
    # beyond what any GPU has: refused up front, before any placement search
    ({"BIG": {"slices": 7, "memory_slots": 40, "profiles": {"1g.1gb": {"id": 1, "starts": [0], "size": 1}}}},
     r"^geometry.BIG.memory_slots: 40 must be an integer from 1 to 32"),
    ({"BIG": {"slices": 64, "memory_slots": 8, "profiles": {"1g.1gb": {"id": 1, "starts": [0], "size": 1}}}},
     r"^geometry.BIG.slices: 64 must be an integer from 1 to 32"),
    (dict(("M%d" % i, {}) for i in range(65)), r"65 models given, at most 64"),
    ({"H100-80GB": {"profiles": {"big": {"id": 1, "starts": [0], "size": 1}}}}, r"profile names look like"),
    ("nope", r"must be a mapping"),
])
def test_merge_geometry_rejects_bad_overrides_with_their_path(overrides, message):
    """One GeometryError naming the input path, never a TypeError, and the table untouched."""
    before = copy.deepcopy(mg.GEOMETRY)
    with pytest.raises(mg.GeometryError, match=message):
        mg.merge_geometry(overrides)
    assert mg.GEOMETRY == before


def test_the_built_in_table_passes_the_schema_that_overrides_must_pass():
    for model, data in mg.GEOMETRY.items():
        mg.check_model(model, data)


# Real `nvidia-smi mig -lgip` captures (tests/fixtures/nvidia/09_nvsmi_mig_tables_part.txt, sources in its header).
LGIP_CAPTURES = {"A100-40GB": ("A100-40GB", "-lgip"), "A100-80GB": ("A100-80GB", "-lgip"),
                 "H100-80GB": ("H100-80GB", "-lgip")}


@pytest.mark.parametrize("model", sorted(LGIP_CAPTURES))
def test_captured_memory_figures_are_what_nvidia_smi_prints(model):
    """memory_source "capture" is true: every profile the capture shows has the capture's GiB and profile id."""
    from mig_fixtures import mig_tables as capture, parse_lgip

    data = mg.GEOMETRY[model]
    assert data["memory_source"] == "capture"
    rows = parse_lgip(capture(*LGIP_CAPTURES[model]))
    assert len(rows) >= 6
    for row in rows:
        profile = data["profiles"][row["profile"]]
        assert (profile["id"], profile["memory_gib"]) == (row["profile_id"], row["memory_gib"]), row["profile"]


def test_models_without_a_capture_say_their_memory_figures_are_derived():
    """The MIG user guide gives fractions of memory, not GiB: a model with no capture must not claim a source."""
    derived = sorted(model for model, data in mg.GEOMETRY.items() if data["memory_source"] == "derived")
    assert derived == sorted(set(ALL_MODELS) - set(LGIP_CAPTURES))
    assert "B200" in derived
    for model in derived:
        assert "fractions" in mg.GEOMETRY[model]["memory_note"], model
    assert mg.GEOMETRY["B200"]["memory_note"].startswith("derived GiB, unconfirmed")


def test_memory_source_is_validated_and_overridable():
    merged = mg.merge_geometry({"B200": {"memory_source": "capture", "memory_note": "site capture 2026-11"}})
    assert merged["B200"]["memory_source"] == "capture" and mg.GEOMETRY["B200"]["memory_source"] == "derived"
    with pytest.raises(mg.GeometryError, match=r"^geometry.B200.memory_source: 'guide' must be one of capture, derived"):
        mg.merge_geometry({"B200": {"memory_source": "guide"}})
