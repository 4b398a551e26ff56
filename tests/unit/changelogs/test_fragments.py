# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The changelog config and fragments are what current antsibull-changelog accepts, and follow Ansible's rules.

antsibull-changelog (pinned in requirements.txt) lints config and fragments; it does not know the rule that a
fragment never announces a new module or plugin (the release lists those from their ``version_added``), nor that
new roles and playbooks go in ``add object.role`` / ``add object.playbook`` sections, so this test checks that too.
"""
import glob
import os
import re
import subprocess
import sys

import yaml

import testlib

REPO = testlib.REPO_ROOT
# the one installed next to the Python running the tests (.venv, from requirements.txt)
ANTSIBULL_CHANGELOG = os.path.join(os.path.dirname(sys.executable), "antsibull-changelog")
FRAGMENTS = sorted(glob.glob(os.path.join(REPO, "changelogs", "fragments", "*.yml")))
# "name - new module ...", "a, b - new filters ...", "name playbook - new role ..."
ANNOUNCEMENT = re.compile(r"^[\w., ]+?( (module|filter|role|playbook))? - new (read-only |private |internal )?"
                          r"(modules?|filters?|plugins?|roles?|playbooks?)\b")


def test_antsibull_changelog_lint_accepts_config_and_fragments():
    done = subprocess.run([ANTSIBULL_CHANGELOG, "lint"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_no_fragment_announces_a_new_module_plugin_role_or_playbook():
    offenders = []
    for path in FRAGMENTS:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
        for section, items in data.items():
            if section.startswith("add "):
                continue
            for item in items if isinstance(items, list) else [items]:
                if isinstance(item, str) and ANNOUNCEMENT.match(item):
                    offenders.append("%s: %s" % (os.path.basename(path), item[:80]))
    assert offenders == []


def test_the_announcement_pattern_catches_the_forms_once_used():
    for text in ("gpu_health - new module that judges", "a, b - new filters that", "mig - new role that",
                 "node_cordon - new private role, the", "onboard - new playbook, the", "x - new read-only module"):
        assert ANNOUNCEMENT.match(text), text
    for text in ("gpu_health - new options ``a``", "cuda_smoke - new ``timeout``", "nvidia_driver - new ``x`` installs"):
        assert not ANNOUNCEMENT.match(text), text
