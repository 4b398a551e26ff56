# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_readiness role copies exactly the agent's import closure (roles/gpu_readiness/vars/main.yml).

The closure is computed from the code: the agent's imports of the collection (every one, function-level ones
included), then each imported module's, transitively, plus the __init__.py of every package on the way below
plugins/module_utils/. The role's hand-kept list must name the same files: one missing breaks the agent on the node
(ImportError), one too many ships code the agent never runs.
"""
import ast
import os

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
AGENT = os.path.join(REPO, "roles", "gpu_readiness", "files", "gpu_native_readiness_agent.py")
ROLE_VARS = os.path.join(REPO, "roles", "gpu_readiness", "vars", "main.yml")
COLLECTION = "ansible_collections.gpu_native.fleet."
MODULE_UTILS = os.path.join(REPO, "plugins", "module_utils")


def collection_imports(path):
    """Dotted names of the collection's modules that ``path`` imports (``from a.b import c``: ``a.b.c`` if that is a
    module, else ``a.b``)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(COLLECTION))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(COLLECTION):
            for alias in node.names:
                candidate = node.module + "." + alias.name
                found.add(candidate if module_file(candidate) else node.module)
    return found


def module_file(dotted):
    """The source file of a collection module or package, or None."""
    base = os.path.join(REPO, *dotted[len(COLLECTION):].split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def closure(entry):
    """Files below plugins/module_utils/ (relative, '/'-separated) that ``entry`` needs, and imports that resolve
    elsewhere (never allowed on the node)."""
    needed, outside, seen = set(), set(), set()
    todo = sorted(collection_imports(entry))
    while todo:
        dotted = todo.pop()
        if dotted in seen:
            continue
        seen.add(dotted)
        path = module_file(dotted)
        if path is None or not path.startswith(MODULE_UTILS + os.sep):
            outside.add(dotted)
            continue
        needed.add(os.path.relpath(path, MODULE_UTILS).replace(os.sep, "/"))
        # the packages on the way: module_utils itself is a namespace package, its subpackages are not
        folder = os.path.dirname(path)
        while folder != MODULE_UTILS:
            init = os.path.join(folder, "__init__.py")
            if os.path.isfile(init):
                needed.add(os.path.relpath(init, MODULE_UTILS).replace(os.sep, "/"))
            folder = os.path.dirname(folder)
        todo.extend(sorted(collection_imports(path) - seen))
    return needed, outside


def role_list():
    with open(ROLE_VARS, encoding="utf-8") as handle:
        return yaml.safe_load(handle)["__gpu_readiness_module_utils"]


def test_the_role_copies_the_agents_import_closure():
    needed, outside = closure(AGENT)
    listed = role_list()
    assert not outside, "the agent needs code outside plugins/module_utils: %s" % sorted(outside)
    assert len(listed) == len(set(listed)), "listed twice: %s" % sorted(n for n in set(listed) if listed.count(n) > 1)
    missing, extra = sorted(needed - set(listed)), sorted(set(listed) - needed)
    assert not missing and not extra, (
        "roles/gpu_readiness/vars/main.yml __gpu_readiness_module_utils differs from the agent's imports: "
        "missing %s, not imported %s. Fix the list." % (missing, extra))


def test_the_closure_is_the_agents_real_one():
    """Guards the computation itself: the agent's direct imports and a transitive one are in it."""
    needed, _outside = closure(AGENT)
    for name in ("_common/node_tools.py", "gpu/gpu_health.py", "gpu/kernel_log_state.py", "gpu/xid_catalog.py",
                 "_common/errors.py", "gpu/__init__.py", "_common/__init__.py"):
        assert name in needed
    assert not [name for name in needed if name.startswith(("mig/", "spec/", "containerd/", "k8s/", "serving/"))]
