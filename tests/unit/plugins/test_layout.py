# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The folder a shared file sits in tells where it runs (docs/DEVELOPING.md, Layout).

plugins/module_utils/<subpackage>/ is managed-node code; plugins/plugin_utils/ is controller-only code that no
module and no node agent may import. Each shared file declares itself private to the collection.
"""
import ast
import os
import re

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODULE_UTILS = os.path.join(REPO, "plugins", "module_utils")
PLUGIN_UTILS = os.path.join(REPO, "plugins", "plugin_utils")
PRIVATE = "# Private to the gpu_native.fleet collection: not a public API; it may change in any release.\n"
NODE = "# Runs on managed nodes"
CONTROLLER = "# Runs on the controller only"


def python_files(*folders):
    found = []
    for folder in folders:
        for base, _dirs, files in os.walk(folder):
            found.extend(os.path.join(base, name) for name in sorted(files) if name.endswith(".py"))
    return sorted(found)


def imported_modules(path):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_module_utils_holds_subpackages_only():
    flat = [name for name in os.listdir(MODULE_UTILS) if name.endswith(".py")]
    assert flat == []
    for name in sorted(os.listdir(MODULE_UTILS)):
        if os.path.isdir(os.path.join(MODULE_UTILS, name)) and name != "__pycache__":
            # AnsiballZ requires a package __init__.py below module_utils
            assert os.path.isfile(os.path.join(MODULE_UTILS, name, "__init__.py")), name


@pytest.mark.parametrize("path", [p for p in python_files(MODULE_UTILS, PLUGIN_UTILS) if not p.endswith("__init__.py")],
                         ids=lambda p: os.path.relpath(p, REPO))
def test_each_shared_file_says_it_is_private_and_where_it_runs(path):
    with open(path, encoding="utf-8") as handle:
        head = "".join(handle.readline() for _line in range(8))
    assert PRIVATE in head
    assert (CONTROLLER if path.startswith(PLUGIN_UTILS + os.sep) else NODE) in head


@pytest.mark.parametrize("path", python_files(os.path.join(REPO, "plugins", "modules"), MODULE_UTILS,
                                              os.path.join(REPO, "roles", "gpu_readiness", "files")),
                         ids=lambda p: os.path.relpath(p, REPO))
def test_node_code_never_imports_controller_code(path):
    assert not [name for name in imported_modules(path) if ".plugin_utils" in name or ".plugins.filter" in name]


TABLE_RULE = re.compile(r"""["']-["']\s*\*""")  # the dashed rule under a table's header


def test_one_table_renderer():
    """Every text table is drawn by module_utils/_common/text.py's fixed_width_table (issue 24, 6: there were
    three renderers, each with its own widths)."""
    owner = os.path.join(MODULE_UTILS, "_common", "text.py")
    drawing = [os.path.relpath(path, REPO)
               for path in python_files(os.path.join(REPO, "plugins"), os.path.join(REPO, "tools"))
               if path != owner and TABLE_RULE.search(open(path, encoding="utf-8").read())]
    assert drawing == [], "these draw a table of their own; use fixed_width_table: %s" % drawing


def test_fixed_width_table():
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import fixed_width_table
    assert fixed_width_table([["node", "verdict"], ["gpu-a", "pass"], ["gpu-long-name", ""]]) == (
        "node           verdict\n"
        "-------------  -------\n"
        "gpu-a          pass\n"
        "gpu-long-name")
    assert fixed_width_table([]) == ""
