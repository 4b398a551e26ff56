#!/usr/bin/env bash
# The ansible-core releases meta/runtime.yml claims below the project venv's (requires_ansible ">=2.16.0"; .venv has
# 2.19). For each release, in a venv of its own (cached; rebuilt when the pins change):
#   - ansible-test sanity --test validate-modules, ansible-doc, runtime-metadata and import: that release's
#     documentation schema, doc-fragment loader, runtime.yml schema and module import rules;
#   - pytest tests/unit/plugins/{modules,filter,plugin_utils}: every module's main() through that release's
#     AnsibleModule, every filter through its ansible.errors (tests/tools/core_range_compat.py supplies the two
#     test helpers only 2.19 has). module_utils tests are left out: that code does not import ansible-core.
# The other sanity tests (pylint, pep8, compile ...) judge the code, not the release; make sanity runs them on 2.19.
# Usage: tests/tools/core-range.sh [2.16.19 ...]   (default: the newest patch release of 2.16, 2.17 and 2.18)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
cores=("$@")
((${#cores[@]})) || cores=(2.16.19 2.17.14 2.18.19)
# Python 3.11: the one version every claimed release supports (2.16 and 2.17: 3.10-3.12, 2.18: 3.11-3.13).
python="${CORE_RANGE_PYTHON:-python3.11}"
cache="${CORE_RANGE_CACHE:-$repo/.cache/core-range}"
# The test tools at the project's pins (requirements.txt), so a result differs only by ansible-core.
# kubernetes: the client the Kubernetes-facing modules import (gpu_pod_eviction's tests run it).
pins="$(grep -E '^(pytest|pyyaml|kubernetes)==' requirements.txt | tr '\n' ' ')"
mkdir -p "$cache"
make --no-print-directory collection-link
# kubernetes.core (its AUTH_ARG_SPEC, read by gpu_pod_eviction) from the project venv's ansible bundle, alone: the
# bundle's folder on the path would bring 2.19's ansible-core with it.
dependencies="$cache/collections/ansible_collections/kubernetes"
mkdir -p "$dependencies"
kubernetes_core=("$repo"/.venv/lib/python3*/site-packages/ansible_collections/kubernetes/core)
[[ -d ${kubernetes_core[0]} ]] || { echo "kubernetes.core is not in $repo/.venv. Fix: make venv" >&2; exit 1; }
ln -sfn "${kubernetes_core[0]}" "$dependencies/core"

venv_for() {  # venv_for VERSION -> path of a venv with ansible-core==VERSION and the pins
  local dir="$cache/ansible-core-$1" spec="ansible-core==$1 $pins"
  if [[ ! -x $dir/bin/ansible-test || "$(cat "$dir/.installed" 2>/dev/null)" != "$spec" ]]; then
    rm -rf "$dir"
    "$python" -m venv "$dir"
    # shellcheck disable=SC2086  # the pins are separate words
    "$dir/bin/pip" install -q --disable-pip-version-check $spec >&2
    echo "$spec" >"$dir/.installed"
  fi
  echo "$dir"
}

declare -A unit_pid unit_log
for version in "${cores[@]}"; do
  venv="$(venv_for "$version")"
  actual="$("$venv/bin/python" -c 'import ansible; print(ansible.__version__)')"
  [[ $actual == "$version" ]] || { echo "$venv holds ansible-core $actual, not $version"; exit 1; }
  unit_log[$version]="$cache/unit-$version.log"
  # The unit tests wait on stand-ins and timeouts more than they compute: they run beside the sanity tests.
  PYTHONPATH="$repo/tests/tools:$cache/collections" "$venv/bin/pytest" -q -p no:cacheprovider -p core_range_compat \
    tests/unit/plugins/modules tests/unit/plugins/filter tests/unit/plugins/plugin_utils \
    >"${unit_log[$version]}" 2>&1 &
  unit_pid[$version]=$!
done

failed=()
for version in "${cores[@]}"; do
  echo "== ansible-core $version: sanity (validate-modules, ansible-doc, runtime-metadata, import)"
  # one after another: ansible-test's own requirement venvs under ~/.ansible/test are shared between releases
  if ! VENV="$cache/ansible-core-$version" COLLECTIONS_VENV="$repo/.venv" tests/tools/run-sanity.sh \
       --test validate-modules --test ansible-doc --test runtime-metadata --test import >"$cache/sanity-$version.log" 2>&1; then
    grep -E '^(ERROR|FATAL)' "$cache/sanity-$version.log" || tail -20 "$cache/sanity-$version.log"
    failed+=("$version sanity ($cache/sanity-$version.log)")
  fi
done
for version in "${cores[@]}"; do
  if wait "${unit_pid[$version]}"; then
    echo "== ansible-core $version: unit $(tail -1 "${unit_log[$version]}")"
  else
    echo "== ansible-core $version: unit FAILED"; tail -30 "${unit_log[$version]}"
    failed+=("$version unit (${unit_log[$version]})")
  fi
done
if ((${#failed[@]})); then
  printf 'failed: %s\n' "${failed[@]}"
  exit 1
fi
echo "ansible-core ${cores[*]}: sanity and unit tests passed"
