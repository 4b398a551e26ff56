"""docs/DEVELOPING.md's time-budget table names every timed step of `make test` and every Molecule scenario.

The suite has a budget (under 40 minutes warm, under 75 on a fresh machine).  A scenario or a timed step
added without its measured line in the table is a cost nobody has looked at, so this test fails then, and
when the table keeps a line for something that no longer exists.
"""
import glob
import os
import re

from testlib import REPO_ROOT

DEVELOPING = os.path.join(REPO_ROOT, "docs", "DEVELOPING.md")
MAKEFILE = os.path.join(REPO_ROOT, "Makefile")
SECTION = "## Time budget"
# a wall time as the suite timer prints it (`12m05s`), optionally with a second figure after a slash
TIME_CELL = re.compile(r"^(\d+m\d\ds|n/a)( / (\d+m\d\ds|n/a))?$")


def _table_rows(text):
    """The `| name | kind | warm | fresh | notes |` rows of the time-budget section, by name."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end != -1 else len(text)]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 4 or set(cells[0]) <= {"-"} or cells[0] == "step":
            continue
        rows[cells[0].strip("`")] = cells
    return rows


def _timed_steps(makefile_text):
    return set(re.findall(r"tests/tools/timed (?!--)([a-z0-9-]+) ", makefile_text))


def _scenarios():
    return {os.path.basename(os.path.dirname(path)) for path in glob.glob(os.path.join(REPO_ROOT, "molecule", "*", "molecule.yml"))}


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def test_every_timed_step_and_scenario_has_a_line():
    rows = _table_rows(_read(DEVELOPING))
    expected = _timed_steps(_read(MAKEFILE)) | _scenarios()
    missing = sorted(expected - set(rows))
    assert not missing, "docs/DEVELOPING.md's time-budget table has no line for %s: measure it and add one" % missing


def test_the_table_lists_nothing_that_is_gone():
    rows = _table_rows(_read(DEVELOPING))
    expected = _timed_steps(_read(MAKEFILE)) | _scenarios() | {"(total)"}
    stale = sorted(set(rows) - expected)
    assert not stale, "docs/DEVELOPING.md's time-budget table lists %s, which neither make test nor molecule/ has" % stale


def test_every_line_carries_measured_times():
    rows = _table_rows(_read(DEVELOPING))
    bad = {name: cells[2:4] for name, cells in rows.items() if not all(TIME_CELL.match(cell) for cell in cells[2:4])}
    assert not bad, "time cells must read like the suite timer's `12m05s` (or n/a): %s" % bad


def test_a_scenario_without_a_line_is_caught(tmp_path):
    """The check itself can fail: a table that lacks a scenario the tree has is reported."""
    text = _read(DEVELOPING)
    rows = _table_rows(text)
    some_scenario = sorted(_scenarios())[0]
    trimmed = "\n".join(line for line in text.splitlines() if not line.startswith("| `%s` |" % some_scenario)
                        and not line.startswith("| %s |" % some_scenario))
    assert some_scenario in rows
    assert some_scenario not in _table_rows(trimmed)


def test_timed_steps_are_read_from_the_makefile():
    steps = _timed_steps(_read(MAKEFILE))
    assert {"host", "venv", "image", "kube-build", "unit", "integration", "molecule"} <= steps
