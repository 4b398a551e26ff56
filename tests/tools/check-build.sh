#!/usr/bin/env bash
# Build the collection tarball and check it is clean: the collection's
# content is in, and nothing from the test harness, venvs, images or caches.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
make --no-print-directory build >/dev/null
version="$(awk '/^version:/{print $2}' galaxy.yml)"
tarball=".cache/dist/gpu_native-fleet-${version}.tar.gz"
listing="$(tar tzf "$tarball")"

must_have=(MANIFEST.json FILES.json README.md LICENSE meta/runtime.yml)
for d in roles plugins/modules plugins/module_utils plugins/plugin_utils playbooks; do
  [[ -d $d ]] && [[ -n "$(git ls-files "$d")" ]] && must_have+=("$d/")
done
must_not='^(\.venv|\.cache|\.ci|\.config|\.git|\.ansible|\.pytest_cache|tests/(output|unit|integration|standins|fixtures|images|tools|k8s_standin|apt_repo|conftest\.py|testlib\.py)|molecule|benchmarks)(/|$)|__pycache__|\.pyc$|\.tar(\.gz)?$'

rc=0
for path in "${must_have[@]}"; do
  grep -qxF "$path" <<<"$listing" || { echo "missing from $tarball: $path"; rc=1; }
done
if bad="$(grep -E "$must_not" <<<"$listing")"; then
  echo "must not be in $tarball:"; echo "$bad"; rc=1
fi
((rc == 0)) && echo "$tarball: $(wc -l <<<"$listing") entries, clean"
exit $rc
