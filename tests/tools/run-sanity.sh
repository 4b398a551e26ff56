#!/usr/bin/env bash
# Run `ansible-test sanity` on a private copy of the checkout placed under
# ansible_collections/gpu_native/fleet (ansible-test requires that layout).
# Extra arguments go to ansible-test, e.g. --test validate-modules.
# VENV=<venv> runs that venv's ansible-test (tests/tools/core-range.sh: one per ansible-core release).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${VENV:-$repo/.venv}"
cd "$repo"

# ansible-test bootstraps pip in its venvs with get-pip.py from a host we
# cannot reach; it uses a cached copy when one exists.
pip_version="$("$venv/bin/python" - <<'PY'
import re, ansible_test, os
src = open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)"
cache="$HOME/.ansible/test/cache"
mkdir -p "$cache"
install -m 0644 tests/tools/get-pip-offline.py "$cache/get_pip_${pip_version//./_}.py"

# Outside the checkout: inside it, ansible-test would see our .git and skip
# every file that git does not track in *that* tree.
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-native-sanity.XXXXXX")"
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/gpu_native/fleet"
mkdir -p "$dest"
# Tracked and untracked-but-not-ignored files: what a clean clone would hold.
tests/tools/checkout-files | rsync -a --from0 --files-from=- ./ "$dest/"
# kubernetes.core (a dependency in galaxy.yml) next to it, as ansible-galaxy installs it, so that
# validate-modules resolves its doc fragment kubernetes.core.k8s_auth_options (gpu_pod_eviction uses it).
# COLLECTIONS_VENV: the venv whose `ansible` package carries it, when VENV holds ansible-core only (core-range.sh).
purelib="$("${COLLECTIONS_VENV:-$venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$work/ansible_collections/kubernetes"
rsync -a --exclude __pycache__ "$purelib/ansible_collections/kubernetes/core" "$work/ansible_collections/kubernetes/"
cd "$dest"
"$venv/bin/ansible-test" sanity --venv --python 3.11 --color no "$@"

# Managed-node code promises Python 3.8+.  Compile it with every Python that
# ansible-test lists and this host has; name the ones it lacks (Debian 12
# offers only 3.11, and interpreters cannot be downloaded here).  For 3.8
# itself, without an interpreter, a 3.8-grammar parse stands in (weaker: see
# tests/tools/check-py38-syntax.py).
if (($# == 0)); then
  missing=()
  for version in 3.8 3.9 3.10 3.12 3.13; do
    # An interpreter that runs (a pyenv shim of an inactive version does not), else a pyenv-installed one.
    bindir=""
    if "python$version" -c '' >/dev/null 2>&1; then
      bindir="$(dirname "$(command -v "python$version")")"
    else
      for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin; do
        [[ -x $candidate/python$version ]] && bindir="$candidate"
      done
    fi
    if [[ -n $bindir ]]; then
      PATH="$bindir:$PATH" "$venv/bin/ansible-test" sanity --venv --python "$version" --color no --test compile
    else
      missing+=("$version")
    fi
  done
  ((${#missing[@]} == 0)) || echo "compile test skipped, no interpreter on this host: Python ${missing[*]}"
  "$venv/bin/python" "$repo/tests/tools/check-py38-syntax.py" "$dest"
fi
