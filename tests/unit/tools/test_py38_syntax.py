"""tests/tools/check-py38-syntax.py: the Python 3.8 stand-in check for managed-node code."""
import os
import subprocess
import sys

from testlib import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "tests", "tools", "check-py38-syntax.py")


def run(root):
    return subprocess.run([sys.executable, SCRIPT, str(root)], capture_output=True, text=True, check=False)


def test_collection_modules_parse_as_python38():
    result = run(REPO_ROOT)
    assert result.returncode == 0, result.stdout


def test_newer_syntax_and_methods_are_reported(tmp_path):
    (tmp_path / "plugins" / "modules").mkdir(parents=True)
    (tmp_path / "plugins" / "module_utils").mkdir(parents=True)
    (tmp_path / "plugins" / "modules" / "m.py").write_text("match x:\n    case 1:\n        pass\n")
    (tmp_path / "plugins" / "module_utils" / "u.py").write_text("y = 'ab'.removeprefix('a')\n")
    result = run(tmp_path)
    assert result.returncode == 1
    assert "m.py:3: not Python 3.8 syntax: Pattern matching" in result.stdout
    assert "u.py:1: .removeprefix() needs Python 3.9" in result.stdout
