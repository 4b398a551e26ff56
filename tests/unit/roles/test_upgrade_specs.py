# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The upgrade and _gpu_clients roles: defaults equal their argument specs, every variable their tasks (and
the upgrade playbooks) read is in a spec, and no role or upgrade playbook reads another role's __ variables."""
import glob
import os
import re

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLES = os.path.join(REPO, "roles")
UPGRADE_PLAYBOOKS = [os.path.join(REPO, "playbooks", name) for name in ("driver_upgrade.yml", "toolkit_upgrade.yml")]


def load(*parts):
    with open(os.path.join(*parts)) as handle:
        return yaml.safe_load(handle)


def specs(role):
    return load(ROLES, role, "meta", "argument_specs.yml")["argument_specs"]


def texts(paths):
    for path in paths:
        with open(path) as handle:
            yield path, handle.read()


def role_files(role):
    return sorted(glob.glob(os.path.join(ROLES, role, "**", "*.yml"), recursive=True))


@pytest.mark.parametrize("role, entry_points", [
    ("upgrade", {"main", "summary"}),
    ("_gpu_clients", {"pause", "resume"}),
])
def test_defaults_equal_the_argument_specs(role, entry_points):
    entries = specs(role)
    assert set(entries) == entry_points
    defaults = load(ROLES, role, "defaults", "main.yml")
    documented = set()
    for name, entry in entries.items():
        for option, spec in entry["options"].items():
            documented.add(option)
            if "default" in spec:
                assert defaults.get(option) == spec["default"], (name, option)
            else:
                assert option not in defaults, (name, option)
    assert set(defaults) <= documented, set(defaults) - documented


def names_read(pattern, paths):
    """Variable names matching pattern in paths (not filter or module names, which follow 'fleet.')."""
    found = set()
    for _path, text in texts(paths):
        found.update(match.group(1) for match in re.finditer(r"(?<![\w.])(%s)" % pattern, text))
    return found


def test_every_upgrade_variable_read_is_in_the_role_spec():
    documented = set(specs("upgrade")["main"]["options"]) | set(specs("upgrade")["summary"]["options"])
    read = names_read(r"upgrade_[a-z_]+", role_files("upgrade") + UPGRADE_PLAYBOOKS)
    # upgrade_summary is the stat published for AWX (set_stats) and upgrade_report the per-node fact the flow
    # sets for it: neither is a variable anyone sets.
    assert read - documented == {"upgrade_summary", "upgrade_report"}


def test_every_gpu_clients_variable_read_is_in_an_entry_point_spec():
    entries = specs("_gpu_clients")
    for entry_point in ("pause", "resume"):
        documented = set(entries[entry_point]["options"])
        read = names_read(r"_gpu_clients_[a-z_]+", [os.path.join(ROLES, "_gpu_clients", "tasks", entry_point + ".yml")])
        # pause sets _gpu_clients_paused, its output; label.yml is shared by both and reads the common options.
        assert read - documented <= {"_gpu_clients_paused"}, (entry_point, read - documented)
    shared = names_read(r"_gpu_clients_[a-z_]+", [os.path.join(ROLES, "_gpu_clients", "tasks", "label.yml")])
    assert shared <= set(entries["pause"]["options"]) & set(entries["resume"]["options"])


def test_no_role_or_upgrade_playbook_reads_another_roles_internal_variables():
    roles = sorted(os.listdir(ROLES))
    seen = []
    for role in roles:
        others = ["__%s_" % other.lstrip("_") for other in roles if other != role]
        for path, text in texts(role_files(role) + (UPGRADE_PLAYBOOKS if role == "upgrade" else [])):
            for prefix in others:
                if re.search(r"(?<![\w])%s" % re.escape(prefix), text):
                    seen.append((os.path.relpath(path, REPO), prefix))
    assert seen == []


def test_the_upgrade_playbooks_hold_plays_and_role_calls_only():
    for path in UPGRADE_PLAYBOOKS:
        for play in load(path):
            assert set(play) <= {"name", "hosts", "become", "gather_facts", "serial", "max_fail_percentage", "roles",
                                 "tasks", "vars", "ansible.builtin.import_playbook"}, path
            for task in play.get("tasks", []):
                # role calls, and the first play's check of the playbook-level variables (issue 27, 9): a spec and
                # an assert, no other task
                assert set(task) in ({"name", "ansible.builtin.include_role"},
                                     {"name", "ansible.builtin.validate_argument_spec"},
                                     {"name", "ansible.builtin.assert"}), (path, task)
