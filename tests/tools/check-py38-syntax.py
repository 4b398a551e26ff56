# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for `ansible-test sanity --test compile --python 3.8` where no Python 3.8 exists.

Managed-node code (plugins/modules, plugins/module_utils) promises Python 3.8+.
No Python 3.8 interpreter can be had on this project's Debian 12 hosts (not in
the archive; interpreters cannot be downloaded), so ansible-test's compile test
only runs for the Pythons that exist.  This check parses every managed-node
file with the 3.8 grammar (``ast.parse(feature_version=(3, 8))``: no ``match``,
no parenthesised context managers, no ``except*``...) and flags the 3.9+ calls
the grammar cannot see (``str.removeprefix``/``removesuffix``).  It is weaker
than a real 3.8 compile (``dict | dict`` and new stdlib names pass); say so
wherever it is used.  Exit 1 with one line per finding.
"""
import ast
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FOLDERS = ("plugins/modules", "plugins/module_utils")
NEWER_METHODS = {"removeprefix": "3.9", "removesuffix": "3.9"}


def findings(path):
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    try:
        tree = ast.parse(source, path, feature_version=(3, 8))
    except SyntaxError as exc:
        return ["%s:%s: not Python 3.8 syntax: %s" % (path, exc.lineno, exc.msg)]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in NEWER_METHODS:
            found.append("%s:%s: .%s() needs Python %s" % (path, node.lineno, node.attr, NEWER_METHODS[node.attr]))
    return found


def main(argv):
    root = argv[1] if len(argv) > 1 else ROOT
    problems = []
    count = 0
    for folder in FOLDERS:
        for base, _dirs, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if name.endswith(".py"):
                    count += 1
                    problems.extend(findings(os.path.join(base, name)))
    for line in problems:
        print(line)
    print("python 3.8 syntax check: %d files, %d problem(s)" % (count, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
