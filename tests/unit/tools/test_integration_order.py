"""Every integration test file has a weight in tests/integration/conftest.py (FILE_SECONDS), so that the two
xdist workers start with the heaviest files and end together, and the hook sorts by it."""
import glob
import importlib.util
import os

from testlib import REPO_ROOT

INTEGRATION = os.path.join(REPO_ROOT, "tests", "integration")


def load_conftest():
    spec = importlib.util.spec_from_file_location("integration_conftest", os.path.join(INTEGRATION, "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_integration_test_file_has_a_weight_and_no_weight_is_stale():
    files = set(os.path.relpath(path, INTEGRATION)
                for path in glob.glob(os.path.join(INTEGRATION, "**", "test_*.py"), recursive=True))
    weights = set(load_conftest().FILE_SECONDS)
    assert sorted(files - weights) == [], "add a line to FILE_SECONDS (its seconds in a whole run)"
    assert sorted(weights - files) == [], "remove the lines of files that are gone"


class Item(object):
    def __init__(self, nodeid):
        self.nodeid = nodeid


def test_the_heaviest_files_come_first_and_a_files_tests_keep_their_order():
    conftest = load_conftest()
    heavy, light = sorted(conftest.FILE_SECONDS, key=conftest.FILE_SECONDS.get)[-1], "playbooks/test_example_inventory.py"
    items = [Item("tests/integration/%s::test_a" % light), Item("tests/integration/%s::test_one" % heavy),
             Item("tests/integration/unknown/test_new.py::test_x"), Item("tests/integration/%s::test_two" % heavy)]
    conftest.pytest_collection_modifyitems(None, None, items)
    assert [item.nodeid.split("::")[1] for item in items] == ["test_one", "test_two", "test_a", "test_x"]
