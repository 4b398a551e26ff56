# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every module (plugins/modules/*.py) and every filter has a fuzz target (issue 27), by construction.

Each fuzz file names what it fuzzes in ``FUZZ_TARGETS``. A module or filter that no file names fails this test,
unless it is in ``STILL_MISSING`` below: that list only shrinks (an entry that gained a target fails too, so it
is removed when its target lands; a new module or filter is never added to it).
"""
import ast
import importlib
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# Entry points without a fuzz target yet. Only ever remove names from this list.
STILL_MISSING = frozenset([
    # modules
    "cuda_smoke",  # needs the fake libcuda built with cc; its bounds are unit-tested (test_hostile_inputs.py, 15)
    "gpu_node_labels",
    "gpu_pod_eviction",  # needs the hostile HTTP server (issue 27, reproducer 11)
    "llm_smoke",  # needs the hostile HTTP server (issue 27, reproducers 3 and 10)
    # filters
    "cordon_decision",
    "k8s_label_problems",
    "k8s_problems",
    "nvidia_driver_kernel_module",
    "nvidia_driver_ubuntu_prebuilt_packages",
    "preflight_pod_problem",
    "upgrade_at_version",
    "upgrade_budget_spent",
    "upgrade_max_unavailable",
    "upgrade_summary",
])


def declared_targets():
    """``{name: fuzz file}`` from each file's ``FUZZ_TARGETS`` tuple (read with ast, nothing imported)."""
    found = {}
    for name in sorted(os.listdir(HERE)):
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        with open(os.path.join(HERE, name), encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), name)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FUZZ_TARGETS" for t in node.targets):
                for target in ast.literal_eval(node.value):
                    found.setdefault(target, name)
    return found


def entry_points():
    modules = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "plugins", "modules"))
                     if name.endswith(".py") and name != "__init__.py")
    filters = set()
    folder = os.path.join(REPO, "plugins", "filter")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and name != "__init__.py":
            plugin = importlib.import_module("ansible_collections.gpu_native.fleet.plugins.filter." + name[:-3])
            filters.update(plugin.FilterModule().filters())
    return modules, sorted(filters)


def test_the_entry_points_are_found():
    modules, filters = entry_points()
    assert "dcgm_diag" in modules and len(modules) >= 13
    assert "compliance_summary" in filters and len(filters) >= 19


def test_every_module_and_filter_has_a_fuzz_target():
    declared = declared_targets()
    modules, filters = entry_points()
    missing = [name for name in modules + filters if name not in declared and name not in STILL_MISSING]
    assert missing == [], "no fuzz target names %s: add it to a tests/fuzz file's FUZZ_TARGETS" % ", ".join(missing)


def test_the_missing_list_only_shrinks():
    declared = declared_targets()
    modules, filters = entry_points()
    covered = sorted(name for name in STILL_MISSING if name in declared)
    assert covered == [], "%s now has a fuzz target: remove it from STILL_MISSING" % ", ".join(covered)
    gone = sorted(STILL_MISSING - set(modules) - set(filters))
    assert gone == [], "%s is no module or filter any more: remove it from STILL_MISSING" % ", ".join(gone)


def test_every_declared_target_exists():
    modules, filters = entry_points()
    unknown = sorted(set(declared_targets()) - set(modules) - set(filters))
    assert unknown == [], "FUZZ_TARGETS names %s, which is no module or filter" % ", ".join(unknown)
