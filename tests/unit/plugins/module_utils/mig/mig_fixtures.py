"""Load the MIG captures (tests/fixtures/mig/ and the nvidia-smi MIG tables in tests/fixtures/nvidia/)."""
import os
import re

import yaml

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
