# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every module (plugins/modules/*.py), every filter and every variable a playbook validates
(``ansible.builtin.validate_argument_spec`` in playbooks/*.yml, named ``<playbook>:<variable>``) has a fuzz target
(issue 27), by construction.

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


def playbook_variables():
    """``<playbook>:<variable>`` for every key of every validate_argument_spec argument_spec in playbooks/*.yml."""
    import yaml  # pylint: disable=import-outside-toplevel
    found = []
    folder = os.path.join(REPO, "playbooks")
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".yml"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            plays = yaml.safe_load(handle) or []
        todo = [task for play in plays if isinstance(play, dict) for key in ("pre_tasks", "tasks")
                for task in play.get(key) or []]
        while todo:
            task = todo.pop()
            if not isinstance(task, dict):
                continue
            todo.extend(task.get("block") or [])
            for action in ("ansible.builtin.validate_argument_spec", "validate_argument_spec"):
                spec = (task.get(action) or {}).get("argument_spec") if isinstance(task.get(action), dict) else None
                found.extend("%s:%s" % (name, variable) for variable in spec or {})
    return sorted(found)


def test_every_validated_playbook_variable_has_a_fuzz_target():
    declared = declared_targets()
    variables = playbook_variables()
    assert "onboard.yml:onboard_serial" in variables
    missing = [name for name in variables if name not in declared]
    assert missing == [], "no fuzz target names %s: add it to a tests/fuzz file's FUZZ_TARGETS" % ", ".join(missing)


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
    unknown = sorted(set(declared_targets()) - set(modules) - set(filters) - set(playbook_variables()))
    assert unknown == [], "FUZZ_TARGETS names %s, which is no module, filter or validated playbook variable" % (
        ", ".join(unknown))
