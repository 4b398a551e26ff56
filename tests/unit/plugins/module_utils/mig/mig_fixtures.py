"""Load the MIG captures (tests/fixtures/mig/ and the nvidia-smi MIG tables in tests/fixtures/nvidia/)."""
import os
import re

import yaml

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_tables import (  # noqa: F401
    EMPTY_MARKERS, MigParseError, _check_unparsed)
from testlib import fixture_text

FIXTURE_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "mig")
# Where each capture lives (one copy of each file under tests/fixtures/).
_FOLDER = {"09_nvsmi_mig_tables_part.txt": "nvidia"}
_BLOCK_RE = re.compile(r"^# ---- \[(?P<tag>[^\]]+)\](?P<rest>.*?)(?: ----)?$")


def blocks(filename):
    """Return [(tag, title, text)] for every '# ---- [tag] ...' block after the BEGIN marker."""
    body = fixture_text(_FOLDER.get(filename, "mig"), filename)
    result = []
    current = None
    for line in body.splitlines():
        match = _BLOCK_RE.match(line)
        if match:
            current = [match.group("tag"), match.group("rest").strip(), []]
            result.append(current)
            continue
        if current is not None:
            current[2].append(line)
    return [(tag, title, "\n".join(lines) + "\n") for tag, title, lines in result]


def block(filename, tag, contains=""):
    """The text of the first block with ``tag`` whose title contains ``contains``."""
    for found_tag, title, text in blocks(filename):
        if found_tag == tag and re.search(re.escape(contains) + r"(\s|$)", title):
            return text
    raise KeyError("%s: no block [%s] %s" % (filename, tag, contains))


def mig_tables(tag, contains=""):
    return block("09_nvsmi_mig_tables_part.txt", tag, contains)


def config_doc(tag):
    return yaml.safe_load(block("12_mig_parted_and_device_plugin_configs.yaml.txt", tag))


# The profile tables, read only here: the tests check the MIG geometry catalog (mig_geometry) and the
# nvidia-smi stand-in against real -lgip / -lgipp captures with them.
# |   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
_LGIP_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<memory>[\d.]+)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|$")
_LGIP_CONT = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|$")
# GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1   (also "Placement :")
_LGIPP_ROW = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile\s+ID\s+(?P<id>\d+)\s+Placements?\s*:\s*\{(?P<starts>[\d,\s]*)\}:(?P<size>\d+)")


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
