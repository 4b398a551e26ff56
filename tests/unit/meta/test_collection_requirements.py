"""AWX installs what was vetted (issue 25, item 10): no project-sync collection requirements; the EE carries them.

An AWX project sync runs ``ansible-galaxy collection install -r collections/requirements.yml`` (or ``.yaml``) when
the file exists, and those collections come before the execution environment's. The file used to install
gpu_native.fleet from its git repository at ``main`` (whatever was pushed last, never the tested build) and the
dependencies as version ranges from Galaxy (newer than the ones the EE was tested with). It is gone: the EE
(execution-environment.yml) installs the collection from the tarball ``make build`` wrote and its dependencies
from tarballs of the pinned venv's copies (docs/awx.md, "Project sync"). Should the file come back, every entry
must be a released version pinned exactly (no git, no URL, no folder, no range).
"""
import os
import re

import yaml

from testlib import REPO_ROOT

EE = os.path.join(REPO_ROOT, "execution-environment.yml")
REQUIREMENTS = [os.path.join(REPO_ROOT, "collections", name) for name in ("requirements.yml", "requirements.yaml")]
_EXACT = re.compile(r"^(==)?\d+\.\d+\.\d+$")


def unvetted(document):
    """The entries of a collections requirements document that are not a released version pinned exactly."""
    out = []
    for entry in (document or {}).get("collections") or []:
        if isinstance(entry, str):
            entry = {"name": entry}
        name = str(entry.get("name", ""))
        source = entry.get("type", "galaxy")
        version = str(entry.get("version", "")).strip()
        if source != "galaxy" or "/" in name or name.endswith((".tar.gz", ".git")) or not _EXACT.match(version):
            out.append(name)
    return out


def test_the_check_flags_the_old_file():
    old = yaml.safe_load("""
collections:
  - {name: https://github.com/gpu-native/fleet.git, type: git, version: main}
  - {name: community.general, version: ">=8.0.0,<12.0.0"}
  - {name: kubernetes.core, version: ">=5.0.0,<7.0.0"}
  - kubernetes.core
  - {name: gpu_native.fleet, version: 0.1.0}
  - {name: ./dist/gpu_native-fleet-0.1.0.tar.gz, type: file}
""")
    assert unvetted(old) == ["https://github.com/gpu-native/fleet.git", "community.general", "kubernetes.core",
                             "kubernetes.core", "./dist/gpu_native-fleet-0.1.0.tar.gz"]


def test_project_sync_installs_nothing_unvetted():
    for path in REQUIREMENTS:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                document = yaml.safe_load(handle)
            assert unvetted(document) == [], "%s: pin released versions exactly (or drop it: the EE carries them)" % path


def test_the_ee_carries_the_collection_and_its_dependencies():
    with open(EE, encoding="utf-8") as handle:
        steps = " ".join(str(step) for step in yaml.safe_load(handle)["additional_build_steps"]["append_final"])
    for tarball in ("gpu_native-fleet.tar.gz", "community-general.tar.gz", "kubernetes-core.tar.gz", "awx-awx.tar.gz"):
        assert tarball in steps, tarball
    assert "--offline" in steps


def test_the_docs_say_which():
    with open(os.path.join(REPO_ROOT, "docs", "awx.md"), encoding="utf-8") as handle:
        text = handle.read()
    assert "no `collections/requirements.yml`" in text
