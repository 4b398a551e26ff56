# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the playbooks' validated variables (issue 27, reproducer 9): onboard.yml's first play.

Its checks are evaluated in-process as the play evaluates them: the ``validate_argument_spec`` spec through
ansible-core's own ArgumentSpecValidator (what that action runs), then the ``assert`` conditions through a Templar.
The property is the bug's opposite: any value the checks accept is one the play keywords can take (``serial``
through ansible-core's ``pct_to_int``, which raised "Unexpected Exception" on ``abc``, ``1.5`` and ``""``), and
the values they refuse include every one ansible-core would crash on. No playbook runs here (that is the
integration test's job); no test measures time.
"""
import os

import yaml
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
                "onboard.yml:onboard_mig")


def _checks():
    with open(PLAYBOOK, encoding="utf-8") as handle:
        first = yaml.safe_load(handle)[0]
    spec = first["tasks"][0]["ansible.builtin.validate_argument_spec"]["argument_spec"]
    that = first["tasks"][1]["ansible.builtin.assert"]["that"]
    return spec, that


SPEC, THAT = _checks()
VALUE = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10 ** 6, max_value=10 ** 7),
                  # ansible-core's own int check raises OverflowError on a float infinity (2.19.14): not ours to fuzz
                  st.floats(allow_nan=True, allow_infinity=False), st.text(max_size=12),
                  st.from_regex(r"[0-9]{1,7}%?", fullmatch=True), st.sampled_from(["100%", "0%", "1%", "101%", " 5"]),
                  st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def accepted(variables):
    """The validated variables when the first play accepts ``variables``, else None."""
    result = ArgumentSpecValidator(SPEC).validate(variables)
    if result.error_messages:
        return None
    templar = Templar(loader=DataLoader(), variables=result.validated_parameters)
    if all(templar.evaluate_conditional(trust_as_template(condition)) for condition in THAT):
        return result.validated_parameters
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
