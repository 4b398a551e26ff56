# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the playbooks' validated variables (issue 27, reproducer 9): onboard.yml's and preflight.yml's
first play.

Its checks are evaluated in-process as the play evaluates them: the ``validate_argument_spec`` spec through
ansible-core's own ArgumentSpecValidator (what that action runs), then the ``assert`` conditions through a Templar.
The property is the bug's opposite: any value the checks accept is one the play keywords can take (``serial``
through ansible-core's ``pct_to_int``, which raised "Unexpected Exception" on ``abc``, ``1.5`` and ``""``), and
the values they refuse include every one ansible-core would crash on. No playbook runs here (that is the
integration test's job); no test measures time.
"""
import os

import yaml
from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.utils.helpers import pct_to_int
from hypothesis import given
from hypothesis import strategies as st

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLAYBOOK = os.path.join(REPO, "playbooks", "onboard.yml")

FUZZ_TARGETS = ("onboard.yml:onboard_hosts", "onboard.yml:onboard_serial", "onboard.yml:onboard_max_fail_percentage",
                "onboard.yml:onboard_become", "onboard.yml:onboard_gather_facts", "onboard.yml:onboard_driver",
                "onboard.yml:onboard_toolkit", "onboard.yml:onboard_containerd", "onboard.yml:onboard_readiness",
                "onboard.yml:onboard_mig", "preflight.yml:preflight_hosts", "preflight.yml:preflight_serial",
                "preflight.yml:preflight_max_fail_percentage", "preflight.yml:preflight_become",
                "preflight.yml:preflight_gather_facts")


def _checks(playbook=PLAYBOOK):
    with open(playbook, encoding="utf-8") as handle:
        first = yaml.safe_load(handle)[0]
    spec = first["tasks"][0]["ansible.builtin.validate_argument_spec"]["argument_spec"]
    that = first["tasks"][1]["ansible.builtin.assert"]["that"]
    return spec, that


SPEC, THAT = _checks()
PREFLIGHT_SPEC, PREFLIGHT_THAT = _checks(os.path.join(REPO, "playbooks", "preflight.yml"))
VALUE = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10 ** 6, max_value=10 ** 7),
                  # ansible-core's own int check raises OverflowError on a float infinity (2.19.14): not ours to fuzz
                  st.floats(allow_nan=True, allow_infinity=False), st.text(max_size=12),
                  st.from_regex(r"[0-9]{1,7}%?", fullmatch=True), st.sampled_from(["100%", "0%", "1%", "101%", " 5"]),
                  st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def accepted(variables, spec=None, that=None):
    """The validated variables when the first play accepts ``variables``, else None (a check that fails or
    raises the collection's own error, as upgrade_max_unavailable does on a bad serial, refuses them)."""
    result = ArgumentSpecValidator(spec or SPEC).validate(variables)
    if result.error_messages:
        return None
    templar = Templar(loader=DataLoader(), variables=result.validated_parameters)
    try:
        if all(templar.evaluate_conditional(trust_as_template(condition)) for condition in that or THAT):
            return result.validated_parameters
    except AnsibleError as exc:
        assert "Fix:" in str(exc) or "give a" in str(exc), exc
        return None
    return None


@given(serial=VALUE, max_fail=VALUE, hosts=VALUE)
def test_what_the_checks_accept_the_play_keywords_can_take(serial, max_fail, hosts):
    given_values = (("onboard_serial", serial), ("onboard_max_fail_percentage", max_fail), ("onboard_hosts", hosts))
    validated = accepted(dict((name, value) for name, value in given_values if value is not None))
    if validated is None:
        return

    def value(name, default):  # unset options are None in validated_parameters; the play's default() applies
        return default if validated.get(name) is None else validated[name]
    batch = pct_to_int(value("onboard_serial", "100%"), 50)  # raised ValueError on 'abc', '1.5', ''
    assert 1 <= batch <= 10 ** 6
    assert 0 <= int(value("onboard_max_fail_percentage", 100)) <= 100
    assert str(value("onboard_hosts", "gpu_nodes")).strip()


@given(name=st.sampled_from(sorted(n for n, s in SPEC.items() if s.get("type") == "bool")), value=VALUE)
def test_switches_are_booleans_or_refused(name, value):
    validated = accepted({name: value})
    assert validated is None or isinstance(validated[name], bool)


@given(serial=VALUE, max_fail=VALUE, hosts=VALUE)
def test_preflight_what_the_checks_accept_the_play_keywords_can_take(serial, max_fail, hosts):
    given_values = (("preflight_serial", serial), ("preflight_max_fail_percentage", max_fail),
                    ("preflight_hosts", hosts))
    validated = accepted(dict((name, value) for name, value in given_values if value is not None),
                         PREFLIGHT_SPEC, PREFLIGHT_THAT)
    if validated is None:
        return

    def value(name, default):
        return default if validated.get(name) is None else validated[name]
    batch = pct_to_int(value("preflight_serial", 1), 50)
    assert 1 <= batch <= 10 ** 6
    assert 0 <= int(value("preflight_max_fail_percentage", 100)) <= 100
    assert str(value("preflight_hosts", "gpu_nodes")).strip()


@given(serial=VALUE)
def test_the_checks_and_upgrade_max_unavailable_agree_on_serial(serial):
    """The first play's assert and the filter the play's serial goes through (plugin_utils/upgrade.py) are one rule."""
    from ansible_collections.gpu_native.fleet.plugins.filter import upgrade as upgrade_filters  # pylint: disable=import-outside-toplevel
    try:
        filtered = upgrade_filters.upgrade_max_unavailable(serial, "preflight_serial")
    except AnsibleError as exc:
        assert "Fix: set preflight_serial" in str(exc)
        filtered = None
    for spec, that, name in ((SPEC, THAT, "onboard_serial"), (PREFLIGHT_SPEC, PREFLIGHT_THAT, "preflight_serial")):
        if serial is not None and accepted({name: serial}, spec, that) is not None:
            # what the first play lets through never stops the play's serial later
            assert filtered is not None, (name, serial)
            assert pct_to_int(filtered, 50) >= 1
        if isinstance(serial, str) and filtered is None:
            assert accepted({name: serial}, spec, that) is None, (name, serial)


def test_preflight_serial_refuses_what_upgrade_max_unavailable_refuses():
    for bad in ("abc", "0", "1.5", "", "101%", "0%"):
        assert accepted({"preflight_serial": bad}, PREFLIGHT_SPEC, PREFLIGHT_THAT) is None, bad
    for good in (1, "2", "25%", "100%"):
        assert accepted({"preflight_serial": good}, PREFLIGHT_SPEC, PREFLIGHT_THAT) is not None, good
