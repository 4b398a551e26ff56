#!/usr/bin/env bash
# Build the collection tarball and check it is clean: the collection's content is in, and nothing that
# galaxy.yml's build_ignore names (the test harness, venvs, images, caches) is, at any depth.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
make --no-print-directory build >/dev/null
version="$(awk '/^version:/{print $2}' galaxy.yml)"
tarball=".cache/dist/gpu_native-fleet-${version}.tar.gz"

must_have=(MANIFEST.json FILES.json README.md LICENSE meta/runtime.yml)
for d in roles plugins/modules plugins/module_utils plugins/plugin_utils playbooks; do
  [[ -d $d ]] && [[ -n "$(git ls-files "$d")" ]] && must_have+=("$d/")
done

"${VENV:-$repo/.venv}/bin/python" - "$tarball" "${must_have[@]}" <<'PY'
import fnmatch
import sys
import tarfile

import yaml

tarball, must_have = sys.argv[1], sys.argv[2:]
with tarfile.open(tarball) as archive:
    listing = [member.name + ("/" if member.isdir() else "") for member in archive.getmembers()]
with open("galaxy.yml", encoding="utf-8") as handle:
    patterns = yaml.safe_load(handle)["build_ignore"]
if "tests" not in patterns:
    sys.exit("galaxy.yml: build_ignore must name tests (the test harness never ships)")


def ignored(path):
    """The pattern that matches the path, one of its parents, or (for a pattern without /) any of its parts."""
    parts = path.rstrip("/").split("/")
    for pattern in patterns:
        if any(fnmatch.fnmatch("/".join(parts[:depth]), pattern) for depth in range(1, len(parts) + 1)):
            return pattern
        if "/" not in pattern and any(fnmatch.fnmatch(part, pattern) for part in parts):
            return pattern
    return None


rc = 0
for path in must_have:
    if path not in listing:
        print("missing from %s: %s" % (tarball, path))
        rc = 1
bad = ["%s (build_ignore: %s)" % (path, ignored(path)) for path in listing if ignored(path)]
if bad:
    print("must not be in %s:" % tarball)
    print("\n".join(bad))
    rc = 1
if rc == 0:
    print("%s: %d entries, clean (none matches the %d build_ignore patterns of galaxy.yml)"
          % (tarball, len(listing), len(patterns)))
sys.exit(rc)
PY
