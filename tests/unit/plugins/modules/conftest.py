# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every result a check module returns keeps the check-result contract (docs/DEVELOPING.md, "How a check result
looks"): while any test in this folder runs, each ``exit_json`` of a check module, and each ``fail_json`` that
carries a verdict, is validated by ``module_utils/_common/check_result.check``. A module that returns a result
without ``status`` and ``reasons`` fails the test that ran it."""
import sys

import pytest
from ansible.module_utils import basic

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result

CHECK_MODULES = check_result.CHECK_MODULES
#: Keys that mark a fail_json as a verdict (an input error carries none of them).
VERDICT_KEYS = ("status", "reasons", "passed", "gpu_ready", "compliant", "drift")
PREFIX = "ansible_collections.gpu_native.fleet.plugins.modules."


def _caller_module(depth=2):
    frame = sys._getframe(depth)  # pylint: disable=protected-access
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(PREFIX):
            return name[len(PREFIX):]
        frame = frame.f_back
    return None


@pytest.fixture(autouse=True)
def check_result_contract(monkeypatch):
    exit_json = basic.AnsibleModule.exit_json
    fail_json = basic.AnsibleModule.fail_json

    def checked_exit(self, **kwargs):
        if _caller_module() in CHECK_MODULES:
            check_result.check(kwargs)
        return exit_json(self, **kwargs)

    def checked_fail(self, msg=None, **kwargs):
        if _caller_module() in CHECK_MODULES and any(key in kwargs for key in VERDICT_KEYS):
            check_result.check(kwargs)
        return fail_json(self, msg=msg, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", checked_exit)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", checked_fail)
