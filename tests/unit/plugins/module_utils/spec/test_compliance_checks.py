# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compliance check names live in one place, module_utils/spec/compliance_checks.py (issue 24, 6).

The list existed three times (fleet_compliance.py, compliance_report.py, tools/fleet_report.py) and had drifted: the
report order and the tool's table both lacked ``isolation``. Everything now imports the one tuple, and this test
fails when a file spells a list of check names again, so a new check (e.g. ``dra``) is added in one place.
"""
import os
import re
import sys

import yaml

from ansible_collections.gpu_native.fleet.plugins.filter import compliance_report
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import compliance_checks, fleet_compliance

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))


def test_the_report_holds_every_check_once():
    report = compliance_checks.REPORT_CHECKS
    assert len(set(report)) == len(report)
    assert set(report) == set(compliance_checks.NODE_CHECKS) | set(compliance_checks.CONTROLLER_CHECKS)
    assert not set(compliance_checks.NODE_CHECKS) & set(compliance_checks.CONTROLLER_CHECKS)


def test_every_user_reads_the_one_list():
    assert fleet_compliance.CHECKS is compliance_checks.NODE_CHECKS
    assert compliance_report.CHECK_ORDER is compliance_checks.REPORT_CHECKS
    sys.path.insert(0, os.path.join(REPO, "tools"))
    try:
        import fleet_report  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    assert fleet_report.CHECKS == compliance_checks.REPORT_CHECKS


def test_the_compliance_role_runs_every_node_check_by_default():
    with open(os.path.join(REPO, "roles", "compliance", "defaults", "main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["compliance_checks"] is None  # null: the module's own default, NODE_CHECKS


def test_no_other_file_lists_the_check_names():
    """Three or more check names in a row, quoted, outside compliance_checks.py: a second copy of the list."""
    names = "|".join(re.escape(n) for n in compliance_checks.REPORT_CHECKS)
    listed = re.compile(r"""(['"](%s)['"]\s*,\s*){2,}['"](%s)['"]""" % (names, names))
    copies = []
    for folder in ("plugins", "roles", "playbooks", "tools"):
        for root, _dirs, files in os.walk(os.path.join(REPO, folder)):
            for name in files:
                path = os.path.join(root, name)
                if name == "compliance_checks.py" or not name.endswith((".py", ".yml", ".yaml", ".j2")):
                    continue
                with open(path, encoding="utf-8") as handle:
                    if listed.search(handle.read()):
                        copies.append(os.path.relpath(path, REPO))
    assert copies == [], "import the check names from plugins/module_utils/spec/compliance_checks.py: %s" % copies
