# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""Rolling upgrades (playbooks/driver_upgrade.yml): batch size, failure budget, version match, summary table."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import fixed_width_table

_COUNT = re.compile(r"^[1-9][0-9]{0,5}$")
_PERCENT = re.compile(r"^([1-9][0-9]?|100)%$")
_EPOCH = re.compile(r"^[0-9]+:")


class UpgradeError(FleetError, ValueError):
    """A bad upgrade setting; the message names it and the fix."""


def max_unavailable(value, name="upgrade_max_unavailable"):
    """``upgrade_max_unavailable`` (or ``name``: preflight_serial, onboard_serial) as Ansible's ``serial``: a count
    (int) or a percentage ("25%")."""
    text = str(value).strip()
    if isinstance(value, bool) or not (_COUNT.match(text) or _PERCENT.match(text)):
        raise UpgradeError("%s is %r: give a node count (1, 2, ...) or a percentage of the "
                           "nodes (1%% to 100%%)" % (name, value))
    return int(text) if _COUNT.match(text) else text


def budget_spent(failed, total, max_fail_percentage, name="upgrade_max_fail_percentage"):
    """True when more than max_fail_percentage percent of the fleet (``total`` nodes) failed."""
    try:
        failed, total, percent = int(failed), int(total), float(max_fail_percentage)
    except (TypeError, ValueError):
        raise UpgradeError("%s is %r: give a number from 0 to 100" % (name, max_fail_percentage))
    if not 0 <= percent <= 100:
        raise UpgradeError("%s is %r: give a number from 0 to 100" % (name, max_fail_percentage))
    if total <= 0:
        return False
    return failed * 100.0 / total > percent


def at_version(installed, requested):
    """True when the installed package version is the requested one: exact, or the upstream version of it
    (``535.261.03`` matches ``535.261.03-1`` and ``535.261.03-1~deb12u1``; an epoch is ignored)."""
    installed = _EPOCH.sub("", str(installed or "").strip())
    requested = _EPOCH.sub("", str(requested or "").strip())
    if not installed or not requested:
        return False
    if installed == requested:
        return True
    return installed.startswith(requested) and installed[len(requested)] in "-+~"


def _cell(value, limit=90):
    text = " ".join(str(value if value is not None else "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _pod(pod):
    """``{pod, namespace}`` (gpu_pod_eviction's result) as namespace/pod; anything else as text."""
    if isinstance(pod, dict):
        return "%s/%s" % (pod.get("namespace", "?"), pod.get("pod", pod.get("name", "?")))
    return str(pod)


COLUMNS = (("node", "node"), ("from", "from"), ("to", "to"), ("cordon", "cordon"), ("evicted", "evicted"),
           ("reboot", "reboot"), ("verdict", "verdict"), ("why", "reason"))
CELL_LIMITS = {"evicted": 60, "reboot": 40}


def summary_table(rows):
    """A fixed-width table of ``[{node, from, to, cordon, evicted (list), reboot, verdict, reason}]``.

    The reboot column (how the new driver was loaded) appears only when a row is a driver upgrade
    (``component: driver``): a toolkit change never needs one."""
    for row in rows:
        if not isinstance(row, dict):
            raise UpgradeError("a summary row is not a mapping: %r" % (row,))
    with_reboot = any(row.get("component") == "driver" for row in rows)
    columns = [column for column in COLUMNS if with_reboot or column[1] != "reboot"]
    table = [[title for title, _key in columns]]
    for row in rows:
        evicted = row.get("evicted")
        if isinstance(evicted, (list, tuple)):
            evicted = ", ".join(_pod(pod) for pod in evicted) if evicted else "-"
        line = []
        for _title, key in columns:
            value = evicted if key == "evicted" else row.get(key)
            line.append(_cell(value if value not in (None, "") else "-", CELL_LIMITS.get(key, 110)))
        line[1] = "%s -> %s" % (line[1], line[2])
        table.append(line)
    table = [line[:2] + line[3:] for line in table]
    table[0][1] = "version"
    return fixed_width_table(table)
