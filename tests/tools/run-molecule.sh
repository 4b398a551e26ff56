#!/usr/bin/env bash
# Run Molecule scenarios: every molecule/*/molecule.yml, or the names given.
# Every scenario runs even when one fails; the exit status says whether all
# passed, and a table of wall times is printed at the end.
#
# MOLECULE_JOBS (default 2) scenarios run at a time, longest first (by the
# warm figure of docs/DEVELOPING.md's time-budget table): a scenario spends
# much of its time waiting on systemd, apt and polls, which a second one
# fills.  At most MOLECULE_CONTROL_PLANES (default 1) of them run a Kubernetes
# control plane (those whose cleanup is molecule/shared/kube_down.yml): two
# control planes and their kubelet stand-ins on 2 cores nearly doubled each
# other's time (driver_upgrade 6m05s alone, 11m10s beside onboard), so a
# control-plane scenario that would start beside another waits, and a
# scenario without one takes the slot.  Each running scenario's output goes to .cache/molecule-logs/<name>.log
# and is printed whole when it ends, so the log reads one scenario at a time.
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
jobs_max=${MOLECULE_JOBS:-2}
if ! [[ $jobs_max =~ ^[1-9][0-9]*$ ]]; then
  echo "MOLECULE_JOBS must be a positive integer, not '$jobs_max'" >&2
  exit 2
fi
planes_max=${MOLECULE_CONTROL_PLANES:-1}
if ! [[ $planes_max =~ ^[1-9][0-9]*$ ]]; then
  echo "MOLECULE_CONTROL_PLANES must be a positive integer, not '$planes_max'" >&2
  exit 2
fi
logs="$repo/.cache/molecule-logs"
mkdir -p "$logs"

# Downloaded .deb files survive between runs in .cache/apt-archives<slot>.
# apt's lock on that folder does not work across containers, so every job
# slot has its own (GN_APT_SLOT, read by the scenarios' volumes: empty for
# the first slot, "-slot2" ... for the others), and a host that installs in
# parallel with another of its scenario mounts a folder of its own.  Every
# folder a scenario mounts is created here.
# shellcheck disable=SC2016  # a literal ${GN_APT_SLOT} in the scenario files
mapfile -t folders < <(grep -ho '/\.cache/apt-archives[-a-z0-9]*\(\${GN_APT_SLOT}\)\?:' molecule/*/molecule.yml | tr -d ':' | sort -u | sed 's#^/##')
for slot in $(seq 1 "$jobs_max"); do
  suffix=""; ((slot > 1)) && suffix="-slot$slot"
  for dir in "${folders[@]}"; do
    mkdir -p "$repo/${dir//\$\{GN_APT_SLOT\}/$suffix}/partial"
  done
done

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

# Longest first: a long scenario started last would leave one slot idle at the end.
table_seconds() {
  local m s
  if [[ $(grep -m1 -E "^\| \`$1\` \| scenario \| " docs/DEVELOPING.md | cut -d'|' -f4) =~ ([0-9]+)m([0-9]+)s ]]; then
    m=${BASH_REMATCH[1]}; s=${BASH_REMATCH[2]}
    echo $((10#$m * 60 + 10#$s))
  else
    echo 0
  fi
}
mapfile -t scenarios < <(for s in "${scenarios[@]}"; do printf '%s %s\n' "$(table_seconds "$s")" "$s"; done | sort -rn | cut -d' ' -f2)

declare -A result started slot_of with_plane
for s in "${scenarios[@]}"; do
  with_plane[$s]=0
  if grep -q 'shared/kube_down\.yml' "molecule/$s/molecule.yml" 2>/dev/null; then with_plane[$s]=1; fi
done
planes_running=0
failed=0
all_start=$(date +%s)
free_slots=()
for slot in $(seq 1 "$jobs_max"); do free_slots+=("$slot"); done

run_one() {  # scenario slot
  local s=$1 slot=$2 suffix=""
  ((slot > 1)) && suffix="-slot$slot"
  export GN_APT_SLOT=$suffix
  if molecule test -s "$s"; then
    exit 0
  fi
  # Leave nothing running behind a failed scenario.
  molecule destroy -s "$s" >/dev/null 2>&1 || true
  exit 1
}

finish() {  # pid rc
  local pid=$1 rc=$2 s=${scenario_of[$1]} secs status=passed
  secs=$(( $(date +%s) - ${started[$s]} ))
  if ((rc != 0)); then status=FAILED; failed=1; fi
  echo "=== molecule test -s $s (slot ${slot_of[$s]}): $status after $((secs / 60))m$((secs % 60))s"
  cat "$logs/$s.log"
  echo "=== end of $s"
  result[$s]="$status $((secs / 60))m$((secs % 60))s"
  free_slots+=("${slot_of[$s]}")
  planes_running=$((planes_running - with_plane[$s]))
  unset "scenario_of[$pid]"
}

# The first pending scenario (longest first) that may start now: a control-plane scenario only while fewer than
# MOLECULE_CONTROL_PLANES run.  Prints its index in `pending`, or nothing.
next_runnable() {
  local i
  for i in "${!pending[@]}"; do
    if ((with_plane[${pending[$i]}] == 0 || planes_running < planes_max)); then
      echo "$i"
      return
    fi
  done
}

declare -A scenario_of
pending=("${scenarios[@]}")
while ((${#pending[@]} > 0)); do
  index=""
  if ((${#free_slots[@]} > 0)); then index=$(next_runnable); fi
  if [[ -z $index ]]; then
    # No slot free, or only control-plane scenarios left while one runs: wait for a scenario to end.
    wait -n -p done_pid; rc=$?
    finish "$done_pid" "$rc"
    continue
  fi
  s=${pending[$index]}
  unset "pending[$index]"; pending=("${pending[@]}")
  slot=${free_slots[0]}; free_slots=("${free_slots[@]:1}")
  slot_of[$s]=$slot; started[$s]=$(date +%s)
  planes_running=$((planes_running + with_plane[$s]))
  echo "=== start molecule test -s $s (slot $slot) $(date -u +%H:%M:%S)"
  run_one "$s" "$slot" >"$logs/$s.log" 2>&1 &
  scenario_of[$!]=$s
done
while ((${#scenario_of[@]} > 0)); do
  wait -n -p done_pid; rc=$?
  finish "$done_pid" "$rc"
done

echo "=== Molecule scenarios ($jobs_max at a time)"
for s in "${scenarios[@]}"; do
  printf '%-32s %s\n' "$s" "${result[$s]}"
done
secs=$(( $(date +%s) - all_start ))
printf '%-32s %s\n' "(all)" "$((secs / 60))m$((secs % 60))s"
exit $failed
