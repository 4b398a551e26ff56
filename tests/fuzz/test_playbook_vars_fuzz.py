# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the playbooks' validated variables (issue 27, reproducer 9): every playbook's check.

Each playbook checks its playbook-level (survey) variables before the first play needs them: an
``ansible.builtin.validate_argument_spec`` task, then (where the play keywords need more than a type) an ``assert``.
Both are evaluated in-process as the play evaluates them: the spec through ansible-core's own ArgumentSpecValidator
(what that action runs), then the ``assert`` conditions through a Templar. The property is the bug's opposite: any
value the checks accept is one its consumer can take -- ``serial`` through ansible-core's ``pct_to_int`` (which
raised "Unexpected Exception" on ``abc``, ``1.5`` and ``""``), ``max_fail_percentage`` 0 to 100, a non-empty host
pattern, a switch a boolean, every other variable the type its spec names. No playbook runs here (that is the
integration tests' job: tests/integration/playbooks/test_playbook_variables.py); no test measures time.
"""
import os
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.utils.helpers import pct_to_int
from ansible_collections.gpu_native.fleet.plugins.filter.upgrade import upgrade_max_unavailable
from hypothesis import given
from hypothesis import strategies as st

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLAYBOOKS = os.path.join(REPO, "playbooks")

FUZZ_TARGETS = ("awx_configure.yml:awx_controller_host", "awx_configure.yml:awx_controller_token",
                "awx_configure.yml:awx_controller_username", "awx_configure.yml:awx_controller_password",
                "awx_configure.yml:awx_controller_validate_certs", "awx_configure.yml:awx_fleet_organization",
                "awx_configure.yml:awx_fleet_inventory", "awx_configure.yml:awx_fleet_project_name",
                "awx_configure.yml:awx_fleet_project_url", "awx_configure.yml:awx_fleet_project_scm_branch",
                "awx_configure.yml:awx_fleet_ee_name", "awx_configure.yml:awx_fleet_ee_image",
                "awx_configure.yml:awx_fleet_machine_credential", "awx_configure.yml:awx_fleet_machine_username",
                "awx_configure.yml:awx_fleet_machine_ssh_key", "awx_configure.yml:awx_fleet_job_slice_count",
                "awx_configure.yml:awx_fleet_forks", "awx_configure.yml:awx_fleet_profiles",
                "awx_configure.yml:awx_fleet_schedule_rrule", "awx_configure.yml:awx_fleet_approval_timeout",
                "awx_configure.yml:awx_fleet_kube_credential", "awx_configure.yml:awx_fleet_kube_host",
                "awx_configure.yml:awx_fleet_kube_bearer_token", "awx_configure.yml:awx_fleet_kube_verify_ssl",
                "awx_configure.yml:awx_fleet_kube_ca_cert", "awx_configure.yml:awx_fleet_operator_team",
                "awx_configure.yml:awx_fleet_approver_team",
                "compliance.yml:compliance_hosts", "driver_upgrade.yml:upgrade_component",
                "driver_upgrade.yml:upgrade_hosts", "driver_upgrade.yml:upgrade_become",
                "driver_upgrade.yml:upgrade_gather_facts", "driver_upgrade.yml:upgrade_max_unavailable",
                "mig_reconfigure.yml:mig_hosts", "mig_reconfigure.yml:mig_serial",
                "mig_reconfigure.yml:mig_max_fail_percentage", "node_runtime.yml:node_runtime_hosts",
                "node_runtime.yml:node_runtime_serial", "node_runtime.yml:node_runtime_max_fail_percentage",
                "node_runtime.yml:node_runtime_become", "node_runtime.yml:node_runtime_kubernetes",
                "node_runtime.yml:node_runtime_sysctl",
                "onboard.yml:onboard_hosts", "onboard.yml:onboard_serial", "onboard.yml:onboard_max_fail_percentage",
                "onboard.yml:onboard_become", "onboard.yml:onboard_gather_facts", "onboard.yml:onboard_sysctl",
                "onboard.yml:onboard_driver",
                "onboard.yml:onboard_toolkit", "onboard.yml:onboard_containerd", "onboard.yml:onboard_readiness",
                "onboard.yml:onboard_mig", "onboard.yml:onboard_runtime_class", "preflight.yml:preflight_hosts",
                "preflight.yml:preflight_serial", "preflight.yml:preflight_max_fail_percentage",
                "preflight.yml:preflight_become", "preflight.yml:preflight_gather_facts",
                "preflight_summary.yml:preflight_summary_hosts", "preflight_summary.yml:preflight_summary_title")

# The one collection filter a check calls (driver_upgrade.yml: the serial keyword's own filter); the Templar here has
# no collection loader, so the condition is evaluated with the filter's Python function instead.
_UPGRADE_FILTER = re.compile(r"^\(upgrade_max_unavailable \| default\(1\) \| gpu_native\.fleet\.upgrade_max_unavailable"
                             r" \| string\) != ''$")


def _checks(name):
    """(spec, assert conditions) of the playbook's check: its validate_argument_spec task and the assert after it."""
    with open(os.path.join(PLAYBOOKS, name), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle) or []
    for play in plays:
        tasks = (play.get("pre_tasks") or []) + (play.get("tasks") or [])
        for index, task in enumerate(tasks):
            action = task.get("ansible.builtin.validate_argument_spec")
            if action:
                following = tasks[index + 1] if index + 1 < len(tasks) else {}
                that = (following.get("ansible.builtin.assert") or {}).get("that") or []
                return action["argument_spec"], [that] if isinstance(that, str) else that
    return None


CHECKS = dict((name, _checks(name)) for name in sorted(os.listdir(PLAYBOOKS))
              if name.endswith(".yml") and _checks(name) is not None)
VALUE = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10 ** 6, max_value=10 ** 7),
                  # ansible-core's own int check raises OverflowError on a float infinity (2.19.14): not ours to fuzz
                  st.floats(allow_nan=True, allow_infinity=False), st.text(max_size=12),
                  st.from_regex(r"[0-9]{1,7}%?", fullmatch=True), st.sampled_from(["100%", "0%", "1%", "101%", " 5"]),
                  st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=2),
                  st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
TYPES = {"str": str, "bool": bool, "int": int, "dict": dict, "list": list}
# compliance.yml has no controller play before its node play (AWX's host list and job stats stay the fleet's): a blank
# compliance_hosts is ansible-core's own one-line refusal ("Keyword 'hosts' is required, and cannot have empty
# values"), before any task; its check types the variable.
BLANK_HOSTS_REFUSED_BY_CORE = frozenset(["compliance.yml"])


def _holds(condition, templar, validated):
    if _UPGRADE_FILTER.match(condition):
        value = validated.get("upgrade_max_unavailable")
        try:
            return str(upgrade_max_unavailable(1 if value is None else value)) != ""
        except AnsibleFilterError:
            return False
    return templar.evaluate_conditional(trust_as_template(condition))


def accepted(playbook, variables):
    """The validated variables when the playbook's check accepts ``variables``, else None."""
    spec, that = CHECKS[playbook]
    result = ArgumentSpecValidator(spec).validate(variables)
    if result.error_messages:
        return None
    templar = Templar(loader=DataLoader(), variables=result.validated_parameters)
    if all(_holds(condition, templar, result.validated_parameters) for condition in that):
        return result.validated_parameters
    return None


def _consumable(playbook, name, kind, value):
    """True when ``value``, accepted for ``name`` (spec type ``kind``), is one its consumer can take."""
    if name.endswith("_serial") or name == "upgrade_max_unavailable":
        return 1 <= pct_to_int(value, 50) <= 10 ** 6  # raised ValueError on 'abc', '1.5', ''
    if name.endswith("_max_fail_percentage"):
        return 0 <= int(value) <= 100
    if name.endswith("_hosts"):
        return isinstance(value, str) and (bool(value.strip()) or playbook in BLANK_HOSTS_REFUSED_BY_CORE)
    return kind not in TYPES or isinstance(value, TYPES[kind])


def test_every_target_is_a_validated_variable():
    found = sorted("%s:%s" % (name, variable) for name, (spec, _that) in CHECKS.items() for variable in spec)
    assert sorted(FUZZ_TARGETS) == found


@pytest.mark.parametrize("playbook", sorted(CHECKS))
@given(data=st.data())
def test_what_the_checks_accept_the_plays_can_take(playbook, data):
    spec = CHECKS[playbook][0]
    given_values = data.draw(st.dictionaries(st.sampled_from(sorted(spec)), VALUE, max_size=3))
    validated = accepted(playbook, dict((name, value) for name, value in given_values.items() if value is not None))
    if validated is None:
        return
    for name, value in validated.items():
        if value is not None:  # unset options are None in validated_parameters; the play's default() applies
            assert _consumable(playbook, name, spec[name].get("type", "str"), value), (name, value)


@pytest.mark.parametrize("playbook", sorted(CHECKS))
@given(data=st.data())
def test_what_the_play_keywords_crash_on_is_refused(playbook, data):
    spec = CHECKS[playbook][0]
    keywords = sorted(name for name in spec if name.endswith(("_serial", "_max_fail_percentage"))
                      or name == "upgrade_max_unavailable"
                      or (name.endswith("_hosts") and playbook not in BLANK_HOSTS_REFUSED_BY_CORE))
    if not keywords:
        return
    name = data.draw(st.sampled_from(keywords))
    if name.endswith("_hosts"):
        bad = ["", " ", "\t"]
    elif name.endswith("_max_fail_percentage"):
        bad = ["abc", "1.5", "", "-1", "101", "50%"]
    else:
        bad = ["abc", "1.5", "", "0", "101%", "-1", " ", "1" * 7]
    value = data.draw(st.sampled_from(bad))
    assert accepted(playbook, {name: value}) is None, (name, value)


def test_onboard_switches_are_booleans_or_refused():
    spec = CHECKS["onboard.yml"][0]
    for name in sorted(n for n, s in spec.items() if s.get("type") == "bool"):
        for value in ("yes", "off", 1, "abc", 2, [True]):
            validated = accepted("onboard.yml", {name: value})
            assert validated is None or isinstance(validated[name], bool)


@pytest.mark.parametrize("playbook, name", [("onboard.yml", "onboard_serial"), ("preflight.yml", "preflight_serial")])
@given(serial=VALUE)
def test_the_checks_and_upgrade_max_unavailable_agree_on_serial(playbook, name, serial):
    """The first play's assert and the filter the play's serial goes through (plugin_utils/upgrade.py) are one rule."""
    try:
        filtered = upgrade_max_unavailable(serial, name)
    except AnsibleFilterError as exc:
        assert "Fix: set %s" % name in str(exc)
        filtered = None
    if serial is not None and accepted(playbook, {name: serial}) is not None:
        # what the first play lets through never stops the play's serial later
        assert filtered is not None, (name, serial)
        assert pct_to_int(filtered, 50) >= 1
    if isinstance(serial, str) and filtered is None:
        assert accepted(playbook, {name: serial}) is None, (name, serial)


def test_preflight_serial_refuses_what_upgrade_max_unavailable_refuses():
    for bad in ("abc", "0", "1.5", "", "101%", "0%"):
        assert accepted("preflight.yml", {"preflight_serial": bad}) is None, bad
    for good in (1, "2", "25%", "100%"):
        assert accepted("preflight.yml", {"preflight_serial": good}) is not None, good
