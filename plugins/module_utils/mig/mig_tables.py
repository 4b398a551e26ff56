# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Parsers for the ``nvidia-smi mig`` tables the modules read: ``-lgi`` and ``-lci``.

The profile tables (``-lgip``, ``-lgipp``) are read only by the tests that check the MIG geometry catalog
against real captures (tests/unit/plugins/module_utils/mig/mig_fixtures.py); the modules plan from the
catalog (mig_geometry).

``EMPTY_MARKERS`` are the texts nvidia-smi prints (with a non-zero exit) when
there is nothing to list or destroy; every MIG caller reads them from here.

Standard library only; Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError


class MigParseError(FleetError, ValueError):
    """nvidia-smi MIG output that cannot be read."""


# --------------------------------------------------------------------------
# nvidia-smi MIG table parsers
# --------------------------------------------------------------------------

EMPTY_MARKERS = (
    "no gpu instances found",
    "no compute instances found",
    "no mig-enabled devices found",
    "no mig-supported devices found",
    "no devices were found",
    "no gpu instance profiles found",
)

# |   0  MIG 1g.10gb         19        7          0:1     |
_LGI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<instance>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s*\|$")
# |   0      7       MIG 1g.10gb          0         0          0:1     |
_LCI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<instance>\d+)\s+"
    r"(?P<start>\d+):(?P<size>\d+)\s*\|$")


def is_empty_answer(text):
    """True when nvidia-smi said there is nothing (no instances, no MIG-enabled GPU)."""
    lowered = (text or "").lower()
    return any(marker in lowered for marker in EMPTY_MARKERS)


def _check_unparsed(text, rows, what):
    if rows:
        return
    lowered = (text or "").lower()
    if not lowered.strip() or any(marker in lowered for marker in EMPTY_MARKERS):
        return
    if re.search(r"^\|\s*(gpu|compute) instance", lowered, re.M) or "gpu instance profiles" in lowered:
        return  # a table header with no rows
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    raise MigParseError("nvidia-smi mig %s output not recognised (first line: %r)" % (what, first[:120]))


def parse_lgi(text):
    """Parse ``nvidia-smi mig -lgi``: ``{gpu, profile, profile_id, instance_id, start, size}``."""
    rows = []
    for line in (text or "").splitlines():
        match = _LGI_ROW.match(line.strip())
        if match:
            rows.append({
                "gpu": int(match.group("gpu")),
                "profile": match.group("name"),
                "profile_id": int(match.group("id")),
                "instance_id": int(match.group("instance")),
                "start": int(match.group("start")),
                "size": int(match.group("size")),
            })
    _check_unparsed(text, rows, "-lgi")
    return rows


def parse_lci(text):
    """Parse ``nvidia-smi mig -lci``: ``{gpu, gpu_instance_id, profile, profile_id, instance_id, start, size}``."""
    rows = []
    for line in (text or "").splitlines():
        match = _LCI_ROW.match(line.strip())
        if match:
            rows.append({
                "gpu": int(match.group("gpu")),
                "gpu_instance_id": int(match.group("gi")),
                "profile": match.group("name"),
                "profile_id": int(match.group("id")),
                "instance_id": int(match.group("instance")),
                "start": int(match.group("start")),
                "size": int(match.group("size")),
            })
    _check_unparsed(text, rows, "-lci")
    return rows
