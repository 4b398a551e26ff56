# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Parsers for the ``nvidia-smi mig`` tables: ``-lgip``, ``-lgipp``, ``-lgi``, ``-lci``.

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

# |   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
_LGIP_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<memory>[\d.]+)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|$")
_LGIP_CONT = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|$")
# GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1   (also "Placement :")
_LGIPP_ROW = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile\s+ID\s+(?P<id>\d+)\s+Placements?\s*:\s*\{(?P<starts>[\d,\s]*)\}:(?P<size>\d+)")
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


def parse_lgip(text):
    """Parse ``nvidia-smi mig -lgip``: one dict per GPU and profile."""
    rows = []
    for line in (text or "").splitlines():
        line = line.strip()
        match = _LGIP_ROW.match(line)
        if match:
            rows.append({
                "gpu": int(match.group("gpu")),
                "profile": match.group("name"),
                "profile_id": int(match.group("id")),
                "instances_free": int(match.group("free")),
                "instances_total": int(match.group("total")),
                "memory_gib": float(match.group("memory")),
                "p2p": match.group("p2p"),
                "sm": int(match.group("sm")),
                "dec": int(match.group("dec")),
                "enc": int(match.group("enc")),
            })
            continue
        cont = _LGIP_CONT.match(line)
        if cont and rows and "ce" not in rows[-1]:
            rows[-1].update({"ce": int(cont.group("ce")), "jpeg": int(cont.group("jpeg")), "ofa": int(cont.group("ofa"))})
    _check_unparsed(text, rows, "-lgip")
    return rows


def parse_lgipp(text):
    """Parse ``nvidia-smi mig -lgipp``: ``{gpu, profile_id, starts, size}``.

    Both spellings, ``Placements:`` and ``Placement :``, are accepted, and
    anything after the ``{..}:size`` field is ignored.
    """
    rows = []
    for line in (text or "").splitlines():
        match = _LGIPP_ROW.match(line.strip())
        if match:
            starts = [int(s) for s in match.group("starts").replace(" ", "").split(",") if s != ""]
            rows.append({
                "gpu": int(match.group("gpu")),
                "profile_id": int(match.group("id")),
                "starts": starts,
                "size": int(match.group("size")),
            })
    if not rows:
        lowered = (text or "").lower()
        if lowered.strip() and not any(marker in lowered for marker in EMPTY_MARKERS) and "profile id" in lowered:
            raise MigParseError("nvidia-smi mig -lgipp output not recognised")
    return rows


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
