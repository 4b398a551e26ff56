# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every exception class of the shared code (module_utils, plugin_utils) derives from FleetError and keeps its bases."""
import importlib
import inspect
import os

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
PREFIX = "ansible_collections.gpu_native.fleet."


def shared_modules():
    names = []
    for folder in ("plugins/module_utils", "plugins/plugin_utils"):
        for base, _dirs, files in os.walk(os.path.join(REPO, folder)):
            for name in sorted(files):
                if name.endswith(".py") and name != "__init__.py":
                    relative = os.path.relpath(os.path.join(base, name[:-3]), REPO)
                    names.append(PREFIX + relative.replace(os.sep, "."))
    return sorted(names)


def own_exceptions():
    found = []
    for name in shared_modules():
        module = importlib.import_module(name)
        for _attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found.append(value)
    return found


def test_the_shared_code_is_found():
    assert len(shared_modules()) >= 34
    assert len(own_exceptions()) >= 34  # FleetError and the 33 classes it became the base of


# The one exception that must not be an Exception (so not a FleetError), and why.
NOT_FLEET_ERRORS = {
    # SIGALRM raises it wherever the task blocks; a BaseException like KeyboardInterrupt, so that a library that
    # catches Exception (kubernetes.core) or OSError and retries (urllib3) cannot swallow the task's deadline.
    "http_deadline.TaskDeadlineExceeded",
}


def _name(cls):
    return "%s.%s" % (cls.__module__.rsplit(".", 1)[1], cls.__name__)


@pytest.mark.parametrize("cls", own_exceptions(), ids=_name)
def test_every_exception_derives_from_fleet_error(cls):
    if _name(cls) in NOT_FLEET_ERRORS:
        assert not issubclass(cls, Exception)
    else:
        assert issubclass(cls, FleetError)


def test_value_errors_stay_value_errors():
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common.versions import VersionError
    from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_smi import NvidiaSmiParseError
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeToolsError

    for cls in (VersionError, NvidiaSmiParseError):
        with pytest.raises(ValueError):
            raise cls("x")
    assert not issubclass(NodeToolsError, ValueError)
    with pytest.raises(FleetError, match="^x$"):
        raise NodeToolsError("x")
