# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the filters that had no fuzz target (issue 27): any value in any argument gives a result or
the filter's own AnsibleFilterError (cause and fix, one line), never a raw Python error (TypeError, KeyError,
RecursionError ...), which Ansible would print as a template error without saying what to fix.

Where a filter's result has a shape, it is checked too (booleans, lists of strings, one row per input row).
Inputs are bounded (max_size, max_leaves); no test measures time.
"""
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.filter import cordon_decision as cordon_filter
from ansible_collections.gpu_native.fleet.plugins.filter import device_plugin_config as device_plugin_filter
from ansible_collections.gpu_native.fleet.plugins.filter import gpu_policy_objects as policy_filter
from ansible_collections.gpu_native.fleet.plugins.filter import k8s_label_problems as label_filters
from ansible_collections.gpu_native.fleet.plugins.filter import nvidia_driver_kernel_module as driver_filters
from ansible_collections.gpu_native.fleet.plugins.filter import preflight as preflight_filters
from ansible_collections.gpu_native.fleet.plugins.filter import upgrade as upgrade_filters

FUZZ_TARGETS = ("cordon_decision", "device_plugin_configs", "node_joined", "gpu_policy_objects", "k8s_label_problems", "k8s_problems",
                "nvidia_driver_kernel_module", "nvidia_driver_ubuntu_prebuilt_packages", "preflight_pod_problem",
                "upgrade_at_version", "upgrade_budget_spent", "upgrade_max_unavailable", "upgrade_summary")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10 ** 30, max_value=10 ** 30),
                    st.floats(allow_nan=True), st.text(max_size=20),
                    st.sampled_from(["", "50%", "100%", "0", "1", "550.54.15", "1:550.54.15-0ubuntu1", "nvidia.com/gpu",
                                     "6.8.0-45-generic", "generic", "true", "open", "proprietary", "auto", "9" * 5000]))
KEYS = st.one_of(st.text(max_size=8), st.sampled_from([
    "metadata", "spec", "status", "labels", "annotations", "name", "taints", "key", "value", "effect",
    "unschedulable", "phase", "conditions", "containerStatuses", "state", "waiting", "reason", "type",
    "host", "status", "version", "device_id", "pci_device_id", "check", "node"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)


def own_error_only(function, *args, **kwargs):
    """Call ``function``; return its result, or None when it raised AnsibleFilterError (checked to be one line)."""
    try:
        return function(*args, **kwargs)
    except AnsibleFilterError as exc:
        assert str(exc).strip(), "an empty AnsibleFilterError"
        return None


@given(node=VALUES, owner=SCALARS, step=st.one_of(st.sampled_from(["take", "release", "check"]), SCALARS),
       run_id=SCALARS, now=SCALARS, take_over=VALUES)
def test_cordon_decision(node, owner, step, run_id, now, take_over):
    result = own_error_only(cordon_filter.cordon_decision, node, owner, step=step, run_id=run_id, now=now,
                            take_over=take_over)
    assert result is None or isinstance(result, dict)


PLUGIN_KEYS = st.sampled_from(["mig_strategy", "allocation_policy", "device_list_strategy", "fail_on_init_error",
                               "time_slicing_resources", "time_slicing_rename_by_default", "name", "replicas", "rename",
                               "devices", "default", "typo"])
PLUGIN_VALUES = st.recursive(
    st.one_of(SCALARS, st.sampled_from(["none", "single", "mixed", "packed", "distributed", "cdi-cri", "nvidia.com/gpu",
                                        "all", "4"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(PLUGIN_KEYS, inner, max_size=4)),
    max_leaves=16)


@given(settings=st.one_of(st.dictionaries(PLUGIN_KEYS, PLUGIN_VALUES, max_size=6), PLUGIN_VALUES),
       classes=st.one_of(st.dictionaries(st.text(max_size=8), PLUGIN_VALUES, max_size=3), PLUGIN_VALUES),
       default_name=SCALARS, node_classes=PLUGIN_VALUES)
def test_device_plugin_configs(settings, classes, default_name, node_classes):
    result = own_error_only(device_plugin_filter.device_plugin_configs, settings, classes, default_name, node_classes)
    if result is not None:
        assert set(result) == {"configs", "packed", "problems"}
        assert bool(result["configs"]) != bool(result["problems"])  # something is published, or it says why not
        for text in result["configs"].values():
            assert isinstance(yaml.safe_load(text), dict)


@given(node=VALUES, label_key=SCALARS, taint=SCALARS)
def test_node_joined(node, label_key, taint):
    result = own_error_only(cordon_filter.node_joined, node, label_key, taint)
    assert result is None or isinstance(result, bool)


CEL = None


def cel_data():
    global CEL  # pylint: disable=global-statement
    if CEL is None:
        with open(os.path.join(REPO, "roles", "gpu_policies", "vars", "main.yml")) as handle:
            CEL = yaml.safe_load(handle)["__gpu_policies_cel"]
    return CEL


@given(engine=st.one_of(st.sampled_from(["vap", "kyverno", "both"]), SCALARS), name=SCALARS,
       runtime_class_name=SCALARS, gpu_resources=VALUES, excluded_namespaces=VALUES,
       action=st.one_of(st.sampled_from(["Enforce", "Audit"]), SCALARS), failure_policy=SCALARS,
       extra_rules=VALUES, mangle=st.booleans())
def test_gpu_policy_objects(engine, name, runtime_class_name, gpu_resources, excluded_namespaces, action,
                            failure_policy, extra_rules, mangle):
    data = extra_rules if mangle else cel_data()
    result = own_error_only(policy_filter.gpu_policy_objects, data, engine=engine, name=name,
                            runtime_class_name=runtime_class_name, gpu_resources=gpu_resources,
                            excluded_namespaces=excluded_namespaces, action=action, failure_policy=failure_policy,
                            extra_rules=None if mangle else extra_rules)
    assert result is None or isinstance(result, (list, dict))


@given(labels=VALUES, name=SCALARS,
       kind=st.one_of(st.sampled_from(["labels", "label_key", "label_value", "dns_subdomain", "dns_label", "taint",
                                       "tolerations", "resources", "gpu_memory"]), SCALARS))
def test_label_filters(labels, name, kind):
    result = own_error_only(label_filters.k8s_label_problems, labels, name=name)
    assert result is None or (isinstance(result, list) and all(isinstance(line, str) for line in result))
    result = own_error_only(label_filters.k8s_problems, labels, kind, name=name)
    assert result is None or (isinstance(result, list) and all(isinstance(line, str) for line in result))


@given(gpus=VALUES, requested=st.one_of(st.sampled_from(["auto", "open", "proprietary"]), SCALARS), branch=SCALARS,
       open_offered=VALUES, installed=VALUES, kernel=SCALARS, flavour=SCALARS)
def test_driver_filters(gpus, requested, branch, open_offered, installed, kernel, flavour):
    own_error_only(driver_filters.nvidia_driver_kernel_module, gpus, requested=requested, branch=branch,
                   open_offered=open_offered, installed=installed)
    result = own_error_only(driver_filters.nvidia_driver_ubuntu_prebuilt_packages, kernel, branch, flavour)
    assert result is None or isinstance(result, (list, dict, str))


@given(pod=VALUES, timeout_s=SCALARS)
def test_preflight_pod_problem(pod, timeout_s):
    result = own_error_only(preflight_filters.preflight_pod_problem, pod, timeout_s)
    assert result is None or isinstance(result, str)


@given(installed=VALUES, requested=VALUES, failed=VALUES, total=VALUES, percentage=VALUES, value=VALUES,
       rows=VALUES)
def test_upgrade_filters(installed, requested, failed, total, percentage, value, rows):
    result = own_error_only(upgrade_filters.upgrade_at_version, installed, requested)
    assert result is None or isinstance(result, bool)
    result = own_error_only(upgrade_filters.upgrade_budget_spent, failed, total, percentage)
    assert result is None or isinstance(result, bool)
    own_error_only(upgrade_filters.upgrade_max_unavailable, value)
    own_error_only(upgrade_filters.upgrade_summary, rows)


@pytest.mark.parametrize("rows", [[None, 5, "x", [], {"host": None}], [{"host": ["a"], "status": {"x": 1}}]])
def test_upgrade_summary_bad_rows(rows):
    own_error_only(upgrade_filters.upgrade_summary, rows)
