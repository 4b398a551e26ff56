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
import re

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


# The prefix of the variables each playbook reads from its user (README: variables are prefixed with their owner's
# name). A new playbook needs its row here, so it cannot skip the check; None: it only imports other playbooks.
PLAYBOOK_PREFIX = {
    "awx_configure.yml": "awx_",
    "compliance.yml": "compliance_",
    "driver_upgrade.yml": "upgrade_",
    "mig_reconfigure.yml": "mig_",
    "node_runtime.yml": "node_runtime_",
    "onboard.yml": "onboard_",
    "preflight.yml": "preflight_",
    "preflight_summary.yml": "preflight_summary_",
    "toolkit_upgrade.yml": None,
}
_JINJA = re.compile(r"{{(.*?)}}|{%(.*?)%}", re.S)
_NAME = re.compile(r"(?<![\w.'\"])([a-z][a-z0-9_]*)")
_CONDITIONS = ("when", "that", "failed_when", "changed_when", "until")


def _expressions(node, key=None):
    """Every Jinja expression in a play: the templated parts of its strings and its bare conditions."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from _expressions(value, name)
    elif isinstance(node, list):
        for value in node:
            yield from _expressions(value, key)
    elif isinstance(node, str):
        if key in _CONDITIONS:
            yield node
        for match in _JINJA.finditer(node):
            yield match.group(1) or match.group(2)


def _set_by_the_playbook(node):
    """The facts a play sets itself (set_fact keys, register names): results it reads back, not user input."""
    found = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("ansible.builtin.set_fact", "set_fact") and isinstance(value, dict):
                found.update(value)
            elif key == "register" and isinstance(value, str):
                found.add(value)
            found |= _set_by_the_playbook(value)
    elif isinstance(node, list):
        for value in node:
            found |= _set_by_the_playbook(value)
    return found


def _read_variables(name, prefix):
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(REPO, "playbooks", name), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle) or []
    found = set()
    for play in plays:
        if isinstance(play, dict) and "ansible.builtin.import_playbook" not in play:
            for expression in _expressions(play):
                found.update(v for v in _NAME.findall(expression) if v.startswith(prefix))
    return found - _set_by_the_playbook(plays)


def test_every_playbook_validates_the_variables_it_reads():
    """issue 27 (9): each playbook checks every <prefix>_ variable it reads, in a spec, before a play needs it."""
    names = sorted(n for n in os.listdir(os.path.join(REPO, "playbooks")) if n.endswith(".yml"))
    assert sorted(PLAYBOOK_PREFIX) == names, "playbooks/ changed: give each playbook its row in PLAYBOOK_PREFIX"
    validated = set(playbook_variables())
    unchecked = []
    for name in names:
        if PLAYBOOK_PREFIX[name] is None:
            continue
        read = _read_variables(name, PLAYBOOK_PREFIX[name])
        assert read, "%s reads no %s* variable: is its prefix right?" % (name, PLAYBOOK_PREFIX[name])
        unchecked += ["%s:%s" % (name, v) for v in sorted(read) if "%s:%s" % (name, v) not in validated]
    assert unchecked == [], ("read but not validated by the playbook's validate_argument_spec: %s"
                             % ", ".join(unchecked))


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
