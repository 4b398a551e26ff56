#!/usr/bin/env bash
# Run Molecule scenarios: every molecule/*/molecule.yml, or the names given.
# Every scenario runs even when one fails; the exit status says whether all
# passed, and a table of wall times is printed at the end.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 1
export PATH="$repo/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$repo/.cache/collections"
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=true
export MOLECULE_NO_LOG=false
export NO_COLOR=1 ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
# Molecule's prerun installs the collection under $ANSIBLE_HOME/collections and
# that copy is found first: one per checkout, or checkouts (and CI) sharing
# this machine would test each other's code.  Molecule's own scratch folders
# move there too.
export ANSIBLE_HOME="$repo/.cache/ansible-home"
# Shared by every test host: downloaded .deb files survive between runs.  A
# host that installs in parallel with another gets a folder of its own (apt's
# lock does not work across containers): every .cache/apt-archives* folder a
# scenario mounts is created here.
mkdir -p "$repo/.cache/apt-archives/partial"
while read -r dir; do
  mkdir -p "$repo/$dir/partial"
done < <(grep -ho '/\.cache/apt-archives[-a-z0-9]*:' molecule/*/molecule.yml | tr -d ':' | sort -u | sed 's#^/##')

if (($#)); then
  scenarios=("$@")
else
  scenarios=()
  for f in molecule/*/molecule.yml; do
    [[ -e $f ]] || continue
    scenarios+=("$(basename "$(dirname "$f")")")
  done
fi
if ((${#scenarios[@]} == 0)); then
  echo "no Molecule scenarios found under molecule/" >&2
  exit 1
fi

declare -A result
failed=0
all_start=$(date +%s)
for s in "${scenarios[@]}"; do
  start=$(date +%s)
  echo "=== molecule test -s $s"
  if molecule test -s "$s"; then
    status=passed
  else
    status=FAILED
    failed=1
    # Leave nothing running behind a failed scenario.
    molecule destroy -s "$s" >/dev/null 2>&1 || true
  fi
  secs=$(( $(date +%s) - start ))
  result[$s]="$status $((secs / 60))m$((secs % 60))s"
done

echo "=== Molecule scenarios"
for s in "${scenarios[@]}"; do
  printf '%-32s %s\n' "$s" "${result[$s]}"
done
secs=$(( $(date +%s) - all_start ))
printf '%-32s %s\n' "(all)" "$((secs / 60))m$((secs % 60))s"
exit $failed
