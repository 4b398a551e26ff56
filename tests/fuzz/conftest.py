# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fuzz tests import the collection as tests/unit does: through .cache/collections (``make collection-link``)."""
import os
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BASE = os.path.join(REPO_ROOT, ".cache", "collections")
LINK = os.path.join(BASE, "ansible_collections", "gpu_native", "fleet")
if not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    try:
        os.symlink(REPO_ROOT, LINK)
    except FileExistsError:
        pass
for path in (BASE, os.path.join(REPO_ROOT, "tests", "unit", "plugins", "module_utils")):
    if path not in sys.path:
        sys.path.insert(0, path)
