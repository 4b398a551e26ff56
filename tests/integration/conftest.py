"""Integration suite order: the heaviest test files first.

`make integration` runs two pytest-xdist workers with --dist loadfile --no-loadscope-reorder: each worker takes
the next whole file in collection order when it is free. In xdist's own order (most tests first) a long file with
few tests came last, and one worker ran it alone for minutes (stop 40: about 6 of 53 minutes). Heaviest first,
the two workers end together.

FILE_SECONDS: each file's setup + call + teardown time in one whole run (stop 40, `--durations=0`, at a load of 6
to 12: only the ratios matter). tests/unit/tools/test_integration_order.py fails when a test file has no line.
"""

FILE_SECONDS = {
    "roles/test_mig_role.py": 995,
    "roles/test_preflight_role.py": 872,
    "roles/test_gpu_policies_role.py": 511,
    "roles/test_preflight_serving_pod.py": 441,
    "roles/test_runtime_class_role.py": 311,
    "roles/test_preflight_batches_real_api.py": 298,
    "plugins/modules/test_gpu_pod_eviction.py": 257,
    "roles/test_node_stack_role_checks.py": 255,
    "roles/test_preflight_bandwidth.py": 253,
    "playbooks/test_awx_configure_standin.py": 213,
    "roles/test_signed_repository_keys.py": 195,
    "playbooks/test_driver_upgrade_playbook.py": 181,
    "roles/test__node_cordon_role.py": 143,
    "plugins/test_dra_gate_real_api.py": 130,
    "roles/test_preflight_serving_dra.py": 129,
    "roles/test_device_plugin_config.py": 100,
    "roles/test_preflight_counting.py": 90,
    "roles/test_node_sysctl_role.py": 90,
    "test_execution_environment.py": 86,
    "roles/test_preflight_progress.py": 81,
    "playbooks/test_compliance_playbook.py": 77,
    "test_kubelet_standin_process.py": 73,
    "playbooks/test_compliance_publish.py": 65,
    "test_kubernetes_core.py": 58,
    "roles/test_gpu_readiness_rules_file.py": 42,
    "playbooks/test_fleet_report_tool.py": 41,
    "plugins/modules/test_gpu_pod_eviction_real_api.py": 36,
    "playbooks/test_playbook_variables.py": 33,
    "playbooks/test_onboard_variables.py": 32,
    "playbooks/test_onboard_playbook.py": 28,
    "roles/test_container_toolkit_isolation.py": 17,
    "meta/test_action_groups.py": 17,
    "test_preflight_report_chromium.py": 14,
    "test_kube_control_plane.py": 14,
    "roles/test_gpu_readiness_dashboards.py": 12,
    "playbooks/test_preflight_summary_report.py": 10,
    "playbooks/test_example_inventory.py": 7,
    "plugins/modules/test_gpu_health_adhoc.py": 7,
    "playbooks/test_preflight_playbook.py": 6,
    "playbooks/test_awx_playbooks_syntax.py": 4,
}


def pytest_collection_modifyitems(session, config, items):
    """Stable sort by file weight, heaviest first; the tests of a file keep their order."""
    def weight(item):
        path = item.nodeid.split("::", 1)[0]
        return -FILE_SECONDS.get(path.split("tests/integration/", 1)[-1], 0)
    items.sort(key=weight)
