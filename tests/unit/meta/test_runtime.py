# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""meta/runtime.yml's action groups and the modules' ``attributes`` say the same thing (docs/DEVELOPING.md).

An action group is only useful when ``module_defaults: {group/gpu_native.fleet.<group>: ...}`` can hand its
options to every member: the members must share them (a module given an option it lacks fails with "Unsupported
parameters"). Each module declares its groups in ``attributes.action_group.membership``; this test checks that
the declarations and meta/runtime.yml agree, that the group's shared options are in every member's
documentation, and that every module documents check mode, diff mode and its platform.

The documentation is read as ansible-doc reads it (fragments merged by ansible-core's own loader), in a
subprocess so that the collection loader it installs does not leak into other tests.
"""
import json
import os
import subprocess
import sys

import pytest
import yaml

import testlib

REPO = testlib.REPO_ROOT
MODULES_DIR = os.path.join(REPO, "plugins", "modules")
MODULES = sorted(name[:-3] for name in os.listdir(MODULES_DIR) if name.endswith(".py") and name != "__init__.py")

# The options a group exists for: every member takes them.
SHARED_OPTIONS = {
    "node_tools": {"nvidia_smi", "command_timeout"},
    "k8s": {"kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert"},
}

_READ_DOCS = r"""
import json, os, sys
from ansible.plugins.loader import fragment_loader, init_plugin_loader
init_plugin_loader()
from ansible.utils.plugin_docs import get_docstring
out = {}
for path in sys.argv[1:]:
    doc = get_docstring(path, fragment_loader, is_module=True, collection_name="gpu_native.fleet")[0]
    out[os.path.basename(path)[:-3]] = {"attributes": doc.get("attributes", {}), "options": sorted(doc["options"])}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def docs():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=testlib.link_collection())
    done = subprocess.run([sys.executable, "-c", _READ_DOCS] + [os.path.join(MODULES_DIR, m + ".py") for m in MODULES],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def groups():
    with open(os.path.join(REPO, "meta", "runtime.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle).get("action_groups", {})


def declared_members(docs):
    found = {}
    for module, doc in docs.items():
        for group in doc["attributes"].get("action_group", {}).get("membership", []):
            found.setdefault(group, set()).add(module)
    return found


def test_every_group_is_one_whose_shared_options_the_test_knows(groups):
    assert set(groups) == set(SHARED_OPTIONS)


def test_group_members_in_runtime_yml_equal_the_modules_declaring_the_group(docs, groups):
    in_runtime = {"gpu_native.fleet." + group: set(members) for group, members in groups.items()}
    assert declared_members(docs) == in_runtime


@pytest.mark.parametrize("group", sorted(SHARED_OPTIONS))
def test_every_member_takes_the_groups_shared_options(docs, groups, group):
    for member in groups[group]:
        assert member in docs, "%s lists %s, which is not a module" % (group, member)
        missing = SHARED_OPTIONS[group] - set(docs[member]["options"])
        assert not missing, "%s is in group %s but lacks %s" % (member, group, sorted(missing))


def test_the_collection_wide_group_that_shared_no_option_is_gone(groups):
    # module_defaults for group/gpu_native.fleet.fleet failed containerd_runtime with "Unsupported parameters".
    assert "fleet" not in groups


@pytest.mark.parametrize("module", MODULES)
def test_every_module_documents_check_mode_diff_mode_and_platform(docs, module):
    attributes = docs[module]["attributes"]
    for name in ("check_mode", "diff_mode", "platform"):
        assert attributes.get(name, {}).get("support") in ("full", "partial", "none", "N/A"), (module, name)
        assert attributes[name].get("description"), (module, name)
    assert attributes["platform"].get("platforms"), module
