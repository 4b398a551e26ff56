"""Make the repo importable as ``ansible_collections.gpu_native.fleet``.

``pytest tests/unit`` runs from a plain checkout, where the collection does
not sit under an ``ansible_collections/<ns>/<name>`` tree.  We link it into
``.cache/collections`` and put that on ``sys.path``; ansible-test's own
``units`` run places the collection itself and skips this link.
"""
import os
import sys

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures")


def _link_collection():
    parts = REPO_ROOT.split(os.sep)
    if len(parts) >= 3 and parts[-3] == "ansible_collections":
        base = os.sep.join(parts[:-3])
    else:
        base = os.path.join(REPO_ROOT, ".cache", "collections")
        namespace_dir = os.path.join(base, "ansible_collections", "gpu_native")
        os.makedirs(namespace_dir, exist_ok=True)
        link = os.path.join(namespace_dir, "fleet")
        if not os.path.islink(link):
            if os.path.exists(link):
                raise RuntimeError("%s exists and is not a link" % link)
            try:
                os.symlink(REPO_ROOT, link)
            except FileExistsError:
                pass  # another test process made it first
    if base not in sys.path:
        sys.path.insert(0, base)


_link_collection()


@pytest.fixture(autouse=True)
def _modules_run_as_on_a_managed_node(request, monkeypatch):
    """Module tests see module behaviour, whatever ran before them.

    Importing controller code (filter plugins, ansible-playbook helpers) flips
    ansible-core's process-wide ``is_controller`` flag, after which
    ``AnsibleModule.warn`` prints through Display instead of returning the
    warning in the result.  A module always runs on a managed node.
    """
    if os.sep + os.path.join("plugins", "modules") + os.sep in str(request.node.path):
        from ansible.module_utils import _internal
        monkeypatch.setattr(_internal, "is_controller", False)
