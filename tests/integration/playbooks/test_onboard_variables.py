# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""onboard.yml checks its play-level variables before any play uses them (issue 27, reproducer 9).

``-e onboard_serial=abc`` (or ``1.5``, or ``""``) was ansible-core's "Unexpected Exception, this is probably a bug"
with a traceback: ``serial`` is templated before any task runs. Now the first play (on the controller) refuses it
with one message naming the variable and the fix, and no node play starts.
"""
import pytest

import testlib

PLAYBOOK = "playbooks/onboard.yml"


def run(*extra):
    args = []
    for item in extra:
        args += ["-e", item]
    return testlib.run_ansible_playbook(PLAYBOOK, args=args + ["-e", "onboard_hosts=no_such_group", "--check"],
                                        timeout=300)


@pytest.mark.parametrize("value", ["abc", "1.5", "", "0", "101%"])
def test_a_bad_onboard_serial_is_a_clean_validation_error(value):
    result = run("onboard_serial=" + value)
    assert result.returncode == 2, result.stdout
    assert "Unexpected Exception" not in result.stdout and "Traceback" not in result.stdout
    assert 'onboard_serial is "%s"' % value in result.stdout and "Fix: onboard_serial is a count" in result.stdout
    assert "Onboard GPU nodes" not in result.stdout  # no node play started


def test_a_bad_type_is_refused_by_the_spec():
    result = run("onboard_max_fail_percentage=abc")
    assert result.returncode == 2 and "Unexpected Exception" not in result.stdout
    assert "onboard_max_fail_percentage" in result.stdout and "int" in result.stdout


@pytest.mark.parametrize("value", ["10", "30%"])
def test_good_values_pass_the_check(value):
    result = run("onboard_serial=" + value)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "Check the playbook's variables" in result.stdout


def test_a_bad_switch_is_refused_by_the_spec():
    result = run("onboard_sysctl=maybe")
    assert result.returncode == 2 and "Unexpected Exception" not in result.stdout
    assert "onboard_sysctl" in result.stdout and "bool" in result.stdout
    assert "Onboard GPU nodes" not in result.stdout
