# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Collection tarballs for the execution environment, built from the copies the venv's `ansible` package installed.

    .venv/bin/python tools/ee/collection_tarballs.py OUTDIR NAMESPACE.NAME [...]

For each collection: copy the installed tree (without MANIFEST.json, FILES.json and bytecode), write a galaxy.yml
from its MANIFEST.json's collection_info, and run `ansible-galaxy collection build`; the artifact is written as
OUTDIR/NAMESPACE-NAME.tar.gz (a fixed name, so execution-environment.yml can list it).  A tarball whose recorded
version equals the installed one is kept.  Nothing is downloaded.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import ansible_collections
import yaml

GALAXY_KEYS = ("namespace", "name", "version", "readme", "authors", "description", "license", "license_file",
               "tags", "dependencies", "repository", "documentation", "homepage", "issues")


def installed_root(fqcn):
    namespace, name = fqcn.split(".")
    for base in ansible_collections.__path__:
        path = os.path.join(base, namespace, name)
        if os.path.isfile(os.path.join(path, "MANIFEST.json")):
            return path
    raise SystemExit("collection %s is not installed in this venv. Fix: pip install -r requirements.txt" % fqcn)


def galaxy_yml(info):
    data = dict((key, info[key]) for key in GALAXY_KEYS if info.get(key) not in (None, "", [], {}))
    if data.get("license_file"):
        data.pop("license", None)  # galaxy.yml takes one of the two
    data.setdefault("readme", "README.md")
    data.setdefault("authors", ["unknown"])
    return data


def build(fqcn, outdir):
    root = installed_root(fqcn)
    with open(os.path.join(root, "MANIFEST.json")) as handle:
        info = json.load(handle)["collection_info"]
    target = os.path.join(outdir, fqcn.replace(".", "-") + ".tar.gz")
    stamp = target + ".version"
    if os.path.isfile(target) and os.path.isfile(stamp):
        with open(stamp) as handle:
            if handle.read().strip() == info["version"]:
                print("%s %s: %s is up to date" % (fqcn, info["version"], target))
                return
    work = tempfile.mkdtemp(prefix="ee-collection-")
    try:
        src = os.path.join(work, "src")
        skip = shutil.ignore_patterns("__pycache__", "*.pyc", "MANIFEST.json", "FILES.json")
        shutil.copytree(root, src, ignore=skip)
        with open(os.path.join(src, "galaxy.yml"), "w") as handle:
            yaml.safe_dump(galaxy_yml(info), handle, default_flow_style=False)
        out = os.path.join(work, "out")
        galaxy = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
        subprocess.run([galaxy, "collection", "build", "--output-path", out, src], check=True,
                       stdout=subprocess.DEVNULL)
        built = os.listdir(out)
        if len(built) != 1:
            raise SystemExit("ansible-galaxy collection build wrote %s for %s" % (built, fqcn))
        shutil.move(os.path.join(out, built[0]), target)
        with open(stamp, "w") as handle:
            handle.write(info["version"] + "\n")
        print("%s %s: built %s" % (fqcn, info["version"], target))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    os.makedirs(argv[0], exist_ok=True)
    for fqcn in argv[1:]:
        build(fqcn, argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])
