"""The example inventory's matrix is valid and consistent with the compatibility table."""
import os

import pytest
import yaml

from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import spec_matrix as sm
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.versions import Version

from spec_matrix_support import REPO

EXAMPLE = os.path.join(REPO, "inventories", "example")


def load(*parts):
    with open(os.path.join(EXAMPLE, *parts)) as handle:
        return yaml.safe_load(handle)


MATRIX = load("group_vars", "gpu_nodes", "spec_matrix.yml")["gpu_native_spec_matrix"]


def test_matrix_is_valid_with_three_node_classes():
    matrix = sm.validate_matrix(MATRIX)
    assert list(matrix["profiles"]) == ["h100-serving", "a100-training", "h200"]
    for group, profile in (("h100_serving", "h100-serving"), ("a100_training", "a100-training"), ("h200", "h200")):
        assert load("group_vars", group, "spec_matrix.yml")["gpu_native_spec_profile"] == profile


def _rows_for(profile, table):
    """Rows whose Kubernetes series the profile's kubernetes.version admits."""
    constraint = profile["kubernetes"]["version"]
    return [row for row in table if constraint.matches(row["row"]["kubernetes"] + ".0")]


@pytest.mark.parametrize("name", ["h100-serving", "a100-training", "h200"])
def test_profile_versions_satisfy_the_compatibility_rows(name):
    matrix = sm.validate_matrix(MATRIX)
    profile = matrix["profiles"][name]
    rows = _rows_for(profile, matrix["compatibility"])
    assert rows, "no compatibility row for %s" % name
    declared = {
        "driver": profile["driver"]["version"].text,
        "container_toolkit": profile["container_toolkit"]["version"].text,
        "device_plugin": profile["device_plugin"]["version"].text,
    }
    for row in rows:
        for component, version in declared.items():
            Version(version)  # declared versions are exact
            assert row["constraints"][component].matches(version), (name, row["row"], component, version)


def test_fabric_manager_matches_driver_version():
    for name, profile in MATRIX["profiles"].items():
        driver = profile["driver"]["version"]
        branch = driver.split(".")[0]
        assert profile["packages"]["nvidia-fabricmanager-%s" % branch] == driver, name
