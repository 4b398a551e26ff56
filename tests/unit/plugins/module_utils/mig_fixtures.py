"""Load the MIG fixtures under tests/fixtures/mig/ (real captures, source headers kept)."""
import os
import re

import yaml

FIXTURE_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "mig")
BEGIN = "# ---- BEGIN VERBATIM ----"
_BLOCK_RE = re.compile(r"^# ---- \[(?P<tag>[^\]]+)\](?P<rest>.*?)(?: ----)?$")


def blocks(filename):
    """Return [(tag, title, text)] for every '# ---- [tag] ...' block after the BEGIN marker."""
    with open(os.path.join(FIXTURE_DIR, filename)) as handle:
        text = handle.read()
    body = text.split(BEGIN + "\n", 1)[1]
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
