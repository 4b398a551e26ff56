# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pytest plugin for tests/tools/core-range.sh: the unit tests' two ansible-core 2.19 imports, for 2.16 to 2.18.

The module tests feed arguments with ``ansible.module_utils.testing.patch_module_args`` (new in 2.19), and
tests/conftest.py resets ``ansible.module_utils._internal.is_controller`` (2.19's process-wide flag; earlier
releases do not have it, and ``AnsibleModule.warn`` always returns the warning in the result). On an older core this
plugin provides both, the first as 2.19 does it (the arguments as ``basic._ANSIBLE_ARGS``), so the same tests
run the modules' ``main()`` through that release's AnsibleModule. On 2.19 it does nothing.
"""
import contextlib
import json
import sys
import types
from unittest import mock

import ansible.module_utils
from ansible.module_utils import basic

try:
    from ansible.module_utils import testing as _testing  # noqa: F401  (2.19 and later)
except ImportError:
    _testing = types.ModuleType("ansible.module_utils.testing")

    @contextlib.contextmanager
    def patch_module_args(args=None):
        if not isinstance(args, (dict, type(None))):
            raise TypeError("The `args` arg must be a dict or None.")
        payload = json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}).encode()
        with mock.patch.object(basic, "_ANSIBLE_ARGS", payload):
            yield

    _testing.patch_module_args = patch_module_args
    sys.modules[_testing.__name__] = _testing
    ansible.module_utils.testing = _testing

try:
    from ansible.module_utils import _internal as _internal_module  # 2.18 has the package, 2.19 the flag
except ImportError:
    _internal_module = types.ModuleType("ansible.module_utils._internal")
    sys.modules[_internal_module.__name__] = _internal_module
    ansible.module_utils._internal = _internal_module
if not hasattr(_internal_module, "is_controller"):
    _internal_module.is_controller = False  # read by nothing before 2.19; conftest.py only resets it
