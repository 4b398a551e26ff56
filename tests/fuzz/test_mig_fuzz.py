# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fuzz the MIG planning code with hypothesis: mig-parted configs and geometry overrides.

Whatever the input, the code answers with a result or its own error type
(``GeometryError``), never another exception; every placement search ends
within its step bound.
"""
import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_geometry as mg
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_placement as mpl
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_plan as mplan

#: The entry points this file fuzzes (tests/fuzz/test_fuzz_targets.py).
FUZZ_TARGETS = ("mig_config", "mig_layout")

SETTINGS = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
PROFILES = sorted(set(n for m in mg.GEOMETRY.values() for n in m["profiles"])) + ["9g.1gb", "1c.1g.10gb", "x", ""]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.text(max_size=6), st.sampled_from(PROFILES),
                    st.floats(allow_nan=True))
junk = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                    max_leaves=8)

layouts = st.dictionaries(st.sampled_from(PROFILES), st.one_of(st.integers(0, 9), junk), max_size=4)
entries = st.fixed_dictionaries(
    {"devices": st.one_of(st.just("all"), st.lists(st.integers(-1, 9), max_size=4), junk),
     "mig-enabled": st.one_of(st.booleans(), junk)},
    optional={"mig-devices": st.one_of(layouts, junk),
              "device-filter": st.one_of(st.sampled_from(["0x2330", "0x20B2", "10de:2901", "bogus"]), junk),
              "extra": junk})
documents = st.one_of(
    st.fixed_dictionaries({"version": st.one_of(st.just("v1"), junk),
                           "mig-configs": st.dictionaries(st.text(min_size=1, max_size=5),
                                                          st.one_of(st.lists(entries, max_size=3), junk), max_size=3)}),
    junk)
GPUS = mpl.resolve_gpus([{"index": i, "device_id": d} for i, d in
                         enumerate(["0x2330", "0x2330", "0x20B2", "0x20B7", "0x2901", "0x1234"])])[0]


@SETTINGS
@given(documents, st.sampled_from([None, "single", "mixed"]))
def test_any_config_gives_a_result(document, strategy):
    before = copy.deepcopy(document)
    result = mplan.evaluate(document, GPUS, mig_strategy=strategy)
    assert isinstance(result["valid"], bool)
    assert all(isinstance(e, str) and "\n" not in e for e in result["errors"])
    assert result["valid"] == (not result["errors"])
    assert document == before


profile_junk = st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.integers(0, 30), junk), "starts": st.one_of(st.lists(st.integers(-1, 33), max_size=33), junk),
    "size": st.one_of(st.integers(0, 33), junk), "slices": st.one_of(st.integers(0, 33), junk),
    "memory_gib": st.one_of(st.floats(0, 100), junk), "media_extensions": st.one_of(st.booleans(), junk),
    "bogus": junk})
models = st.fixed_dictionaries({}, optional={
    "slices": st.one_of(st.integers(0, 40), junk), "memory_slots": st.one_of(st.integers(0, 40), junk),
    "device_ids": st.one_of(st.lists(st.sampled_from(["0x1234", "0x2330", "bad", ""]), max_size=3), junk),
    "products": st.one_of(st.lists(st.text(max_size=8), max_size=3), junk),
    "profiles": st.one_of(st.dictionaries(st.sampled_from(PROFILES), profile_junk, max_size=4), junk),
    "description": junk})
overrides = st.one_of(st.dictionaries(st.sampled_from(["H100-80GB", "A30", "NEW", "X"]), st.one_of(models, junk),
                                      max_size=2), junk)


@SETTINGS
@given(overrides, layouts)
def test_any_geometry_override_is_merged_or_refused_with_geometry_error(override, layout):
    before = copy.deepcopy(mg.GEOMETRY)
    try:
        geometry = mg.merge_geometry(override)
    except mg.GeometryError as exc:
        assert "\n" not in str(exc)
        assert mg.GEOMETRY == before
        return
    assert mg.GEOMETRY == before
    for model, data in geometry.items():
        mg.check_model(model, data)  # what was accepted passes the built-in table's schema
        clean = dict((n, c) for n, c in layout.items() if isinstance(c, int) and not isinstance(c, bool) and c >= 0)
        placement, reason = mpl.find_placement(clean, data, max_steps=2000)
        assert (placement is None) != (reason is None)
        if placement is not None:
            used = 0
            for item in placement:
                mask = ((1 << item["size"]) - 1) << item["start"]
                assert not used & mask and item["start"] in data["profiles"][item["profile"]]["starts"]
                used |= mask
