# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role's defaults/main.yml and meta/argument_specs.yml say the same thing (docs/DEVELOPING.md, Roles).

ansible-core takes a role variable's default from defaults/main.yml only; the ``default`` in the argument spec is
what ansible-doc and validate_argument_spec show users. So for every role:
- each variable in defaults/main.yml is documented by at least one entry point (no public variable without a spec);
- each entry point that documents a variable from defaults/main.yml gives the same default (a ``null`` default is
  an option without ``default``);
- a ``default`` in a spec is the one in defaults/main.yml (a spec cannot promise a default that nothing sets);
- a required option has no ``default`` in its spec (ansible-core refuses a required option with a default).
"""
import glob
import os

import pytest
import yaml

import testlib

ROLES = sorted(os.path.dirname(os.path.dirname(path))
               for path in glob.glob(os.path.join(testlib.REPO_ROOT, "roles", "*", "meta", "argument_specs.yml")))


def load(path):
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def role_id(role):
    return os.path.basename(role)


def entry_points(role):
    return load(os.path.join(role, "meta", "argument_specs.yml"))["argument_specs"]


def test_every_role_has_an_argument_spec():
    roles = sorted(os.path.dirname(path) for path in glob.glob(os.path.join(testlib.REPO_ROOT, "roles", "*", "")))
    assert [role_id(r.rstrip(os.sep)) for r in roles] == [role_id(r) for r in ROLES]


@pytest.mark.parametrize("role", ROLES, ids=role_id)
def test_every_default_is_documented(role):
    defaults = load(os.path.join(role, "defaults", "main.yml"))
    documented = set()
    for spec in entry_points(role).values():
        documented |= set(spec.get("options") or {})
    assert sorted(set(defaults) - documented) == []


@pytest.mark.parametrize("role", ROLES, ids=role_id)
def test_each_entry_point_documents_the_defaults_of_defaults_main(role):
    defaults = load(os.path.join(role, "defaults", "main.yml"))
    wrong = []
    for entry_point, spec in entry_points(role).items():
        for name, option in (spec.get("options") or {}).items():
            if option.get("required"):
                if "default" in option:
                    wrong.append("%s %s: required and a default" % (entry_point, name))
                continue
            if name not in defaults:
                if option.get("default") is not None:
                    wrong.append("%s %s: spec default %r, none in defaults/main.yml"
                                 % (entry_point, name, option["default"]))
                continue
            if option.get("default") != defaults[name]:
                wrong.append("%s %s: spec default %r, defaults/main.yml %r"
                             % (entry_point, name, option.get("default"), defaults[name]))
    assert wrong == []
