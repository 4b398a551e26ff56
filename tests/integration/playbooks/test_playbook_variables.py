# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every playbook checks its playbook-level (survey) variables before a play needs them (issue 27, reproducer 9).

A bad value for a variable a play keyword reads (serial, max_fail_percentage, become, gather_facts, environment)
was ansible-core's "Unexpected Exception, this is probably a bug" (serial) or a keyword error naming no variable;
a bad type for a variable a task reads was one error per node. Now the playbook's first check (on the controller)
refuses it with one message naming the variable, and no node play starts. onboard.yml has its own file
(test_onboard_variables.py); the property tests are tests/fuzz/test_playbook_vars_fuzz.py.
"""
import pytest

import testlib

NODE_TASK = "TASK [gpu_native.fleet.compliance : Run the node checks"
CASES = [
    ("preflight.yml", "preflight_serial=abc", 'preflight_serial is "abc"', "PLAY [Preflight GPU nodes]"),
    ("preflight.yml", "preflight_max_fail_percentage=x", "preflight_max_fail_percentage", "PLAY [Preflight GPU"),
    # compliance.yml: checked by the role's spec (entry point validate), once, before a node is read
    ("compliance.yml", "compliance_readiness_max_age=x", "compliance_readiness_max_age", NODE_TASK),
    ("compliance.yml", "compliance_become=maybe", "compliance_become", NODE_TASK),
    ("compliance.yml", "compliance_report_name=../x", "compliance_report_name", NODE_TASK),
    ("mig_reconfigure.yml", "mig_serial=1.5", 'mig_serial is "1.5"', "PLAY [Reconfigure MIG"),
    ("node_runtime.yml", "node_runtime_become=abc", "node_runtime_become", "PLAY [Node runtime stack"),
    ("node_runtime.yml", "node_runtime_sysctl=maybe", "node_runtime_sysctl", "PLAY [Node runtime stack"),
    ("driver_upgrade.yml", "upgrade_gather_facts=abc", "upgrade_gather_facts", "PLAY [Rolling upgrade"),
    ("awx_configure.yml", "awx_fleet_forks=many", "awx_fleet_forks", "TASK [Execution environment]"),
    ("preflight_summary.yml", "preflight_summary_hosts=' '", 'preflight_summary_hosts is " "',
     "TASK [Print the fleet summary]"),
]


@pytest.mark.parametrize("playbook, extra, named, not_started", CASES, ids=[c[1] for c in CASES])
def test_a_bad_playbook_variable_is_one_clean_error(tmp_path, playbook, extra, named, not_started):
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu_nodes]\nnode-a ansible_host=192.0.2.1\n")  # never reached: the check stops first
    result = testlib.run_ansible_playbook("playbooks/" + playbook, args=["-i", str(inventory), "-e", extra, "--check"],
                                          timeout=300)
    assert result.returncode == 2, result.stdout[-3000:]
    assert "Unexpected Exception" not in result.stdout and "Traceback" not in result.stdout
    assert "Error processing keyword" not in result.stdout
    assert named in result.stdout, result.stdout[-3000:]
    assert not_started not in result.stdout  # the play (or task) that needs the variable never started
    # no node play started (compliance.yml: the node play's first, run_once check refused it for every host)
    recap = result.stdout.split("PLAY RECAP")[-1]
    assert "node-a" not in recap or (playbook == "compliance.yml" and "changed=0" in recap), recap
