# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rolling upgrade filters (logic in plugin_utils/upgrade.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import upgrade
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.plain_data import to_plain


def upgrade_summary(rows):
    """The summary table of a rolling upgrade."""
    if not isinstance(rows, list):
        raise AnsibleFilterError("upgrade_summary expects a list of rows, got %s" % type(rows).__name__)
    try:
        return upgrade.summary_table(to_plain(rows))
    except upgrade.UpgradeError as exc:
        raise AnsibleFilterError("upgrade_summary: %s" % exc)


def upgrade_at_version(installed, requested):
    """Whether the installed package version is the requested one (exact or its upstream version)."""
    return upgrade.at_version(to_plain(installed), to_plain(requested))


def upgrade_budget_spent(failed, total, max_fail_percentage=0, name="upgrade_max_fail_percentage"):
    """Whether the failed nodes spent the failure budget (more than max_fail_percentage percent of total)."""
    name = str(to_plain(name))[:64]
    try:
        return upgrade.budget_spent(to_plain(failed), to_plain(total), to_plain(max_fail_percentage), name)
    except upgrade.UpgradeError as exc:
        raise AnsibleFilterError("upgrade_budget_spent: %s. Fix: set %s to 0-100." % (exc, name))


def upgrade_max_unavailable(value, name="upgrade_max_unavailable"):
    """upgrade_max_unavailable (or ``name``: preflight_serial, onboard_serial) checked and returned as Ansible's
    serial takes it (count or percentage)."""
    name = str(to_plain(name))[:64]
    try:
        return upgrade.max_unavailable(to_plain(value), name)
    except upgrade.UpgradeError as exc:
        raise AnsibleFilterError("%s. Fix: set %s to e.g. 1 or 25%%." % (exc, name))


class FilterModule(object):
    """gpu_native.fleet rolling upgrade filters."""

    def filters(self):
        return {
            "upgrade_summary": upgrade_summary,
            "upgrade_at_version": upgrade_at_version,
            "upgrade_budget_spent": upgrade_budget_spent,
            "upgrade_max_unavailable": upgrade_max_unavailable,
        }
