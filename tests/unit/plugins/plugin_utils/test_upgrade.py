"""Rolling upgrade helpers: batch size, failure budget, version match, the summary table (and their filters)."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter import upgrade as upgrade_filters
from ansible_collections.gpu_native.fleet.plugins.plugin_utils import upgrade


@pytest.mark.parametrize("value, expected", [(1, 1), ("3", 3), ("25%", "25%"), ("100%", "100%"), (" 2 ", 2)])
def test_max_unavailable_as_serial_takes_it(value, expected):
    assert upgrade.max_unavailable(value) == expected


@pytest.mark.parametrize("value", [0, "0", "-1", "0%", "101%", "1.5", "all", "", None, True, "1000000", "25 %"])
def test_bad_max_unavailable_is_refused_with_the_fix(value):
    with pytest.raises(upgrade.UpgradeError, match="upgrade_max_unavailable is"):
        upgrade.max_unavailable(value)
    with pytest.raises(AnsibleFilterError, match="Fix: set upgrade_max_unavailable"):
        upgrade_filters.upgrade_max_unavailable(value)


@pytest.mark.parametrize("failed, total, percent, spent", [
    (0, 3, 0, False), (1, 3, 0, True), (1, 3, 34, False), (2, 3, 34, True), (1, 3, 33.3, True),
    (3, 3, 100, False), (0, 0, 0, False)])
def test_failure_budget(failed, total, percent, spent):
    assert upgrade.budget_spent(failed, total, percent) is spent


@pytest.mark.parametrize("percent", [-1, 101, "many", None])
def test_bad_failure_budget_is_refused(percent):
    with pytest.raises(AnsibleFilterError, match="upgrade_max_fail_percentage is .*Fix: set upgrade_max_fail_percentage"):
        upgrade_filters.upgrade_budget_spent(1, 3, percent)


@pytest.mark.parametrize("installed, requested, match", [
    ("535.261.03-1", "535.261.03", True), ("535.261.03-1~deb12u1", "535.261.03", True),
    ("535.261.03-1", "535.261.03-1", True), ("1:535.261.03-1", "535.261.03", True),
    ("1.18.1-1", "1.18.1-1", True), ("1.17.8-1", "1.18.1-1", False), ("535.261.031-1", "535.261.03", False),
    ("535.261.03-1", "535.261", False), ("", "535.261.03", False), ("535.261.03-1", "", False)])
def test_at_version(installed, requested, match):
    assert upgrade.at_version(installed, requested) is match


def test_summary_table():
    rows = [{"node": "gpu-1", "from": "1.17.8-1", "to": "1.18.1-1", "cordon": "resumed",
             "evicted": [{"pod": "trainer-1", "namespace": "ml"}], "verdict": "upgraded", "reason": ""},
            {"node": "gpu-22", "from": "", "to": "1.18.1-1", "cordon": "skipped", "evicted": [],
             "verdict": "skipped", "reason": "cordoned by   someone\nelse " + "x" * 200}]
    lines = upgrade_filters.upgrade_summary(rows).split("\n")
    assert lines[0].split() == ["node", "version", "cordon", "evicted", "verdict", "why"]
    assert set(lines[1]) == {"-", " "}
    assert lines[2].split() == ["gpu-1", "1.17.8-1", "->", "1.18.1-1", "resumed", "ml/trainer-1", "upgraded", "-"]
    assert lines[3].split()[:7] == ["gpu-22", "-", "->", "1.18.1-1", "skipped", "-", "skipped"]
    assert "cordoned by someone else xxx" in lines[3] and lines[3].endswith("...") and len(lines[3]) < 200
    # Columns line up.
    assert lines[2].index("resumed") == lines[3].index("skipped")


def test_summary_table_of_a_driver_upgrade_says_how_the_driver_was_loaded():
    rows = [{"node": "gpu-1", "component": "driver", "from": "570.148.08-1", "to": "570.172.08", "cordon": "cordoned",
             "evicted": [], "reboot": "no (modules reloaded)", "verdict": "upgraded", "reason": ""},
            {"node": "gpu-2", "component": "driver", "from": "570.148.08-1", "to": "570.172.08", "cordon": "cordoned",
             "evicted": [], "reboot": "needed (old modules in use) " + "y" * 80,
             "verdict": "failed", "reason": "a reboot is needed"}]
    lines = upgrade_filters.upgrade_summary(rows).split("\n")
    assert lines[0].split() == ["node", "version", "cordon", "evicted", "reboot", "verdict", "why"]
    assert "no (modules reloaded)" in lines[2]
    assert lines[2].index("upgraded") == lines[3].index("failed")
    assert "needed (old modules in use)" in lines[3] and "y" * 80 not in lines[3]


def test_summary_refuses_rows_that_are_not_mappings():
    with pytest.raises(AnsibleFilterError, match="upgrade_summary: a summary row is not a mapping"):
        upgrade_filters.upgrade_summary(["gpu-1"])
    with pytest.raises(AnsibleFilterError, match="expects a list of rows"):
        upgrade_filters.upgrade_summary("gpu-1")
