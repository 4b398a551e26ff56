#!/usr/bin/env bash
# kube-build-background.sh start|wait
#
# `make test` builds the Kubernetes binaries (tests/tools/kube-build.sh) behind the suites that do not need
# them, so that on a fresh machine the build's ~1,100 s of CPU fill the cores that Molecule leaves idle
# while its test hosts download and install packages, instead of running first on their own.  The build
# runs under `nice -n 10` (kube-build.sh), so the suites in front keep the priority.  On a machine with
# the binaries cached the build ends at once and nothing changes.
#
#   start  runs kube-build.sh in the background; its output goes to .cache/kube-build.log, its exit status
#          to .cache/kube-build.rc when it ends
#   wait   waits for that build to end (at most KUBE_BUILD_WAIT_S, default 5400 s), prints its report, and
#          exits with its status; with no build started, it runs kube-build.sh in the foreground
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
log=.cache/kube-build.log rc_file=.cache/kube-build.rc pid_file=.cache/kube-build.pid
mkdir -p .cache

case ${1:-} in
  start)
    rm -f "$rc_file" "$pid_file"
    # setsid: the build is not in make's process group, so an interrupted recipe does not leave a
    # half-written cache (kube-build.sh publishes its binaries only at the end, and holds a lock meanwhile).
    # The wrapper records its own pid (setsid may fork, so $! need not be it).
    # shellcheck disable=SC2016  # expanded by the inner bash, on purpose
    setsid bash -c 'echo $$ > "$3"; tests/tools/kube-build.sh > "$1" 2>&1; echo $? > "$2"' \
      _ "$log" "$rc_file" "$pid_file" < /dev/null > /dev/null 2>&1 &
    for _ in $(seq 50); do [[ -s $pid_file ]] && break; sleep 0.1; done
    [[ -s $pid_file ]] || { echo "kube-build: the background build did not start" >&2; exit 1; }
    echo "kube-build: started in the background (pid $(cat "$pid_file"), log $log)"
    ;;
  wait)
    if [[ ! -f $pid_file ]]; then
      exec tests/tools/kube-build.sh
    fi
    pid=$(cat "$pid_file")
    deadline=$(( $(date +%s) + ${KUBE_BUILD_WAIT_S:-5400} ))
    while [[ ! -f $rc_file ]]; do
      if ! kill -0 "$pid" 2>/dev/null; then
        sleep 1  # the wrapper writes the status just before it exits
        [[ -f $rc_file ]] && break
        echo "kube-build: the background build (pid $pid) ended without a status; its log:" >&2
        tail -n 40 "$log" >&2 || true
        rm -f "$pid_file"
        exit 1
      fi
      if (( $(date +%s) > deadline )); then
        echo "kube-build: the background build (pid $pid) still runs after ${KUBE_BUILD_WAIT_S:-5400} s;" \
             "its log is $log. Fix: look there, or run tests/tools/kube-build.sh in the foreground." >&2
        exit 1
      fi
      sleep 5
    done
    rc=$(cat "$rc_file")
    cat "$log"
    rm -f "$pid_file" "$rc_file"
    exit "$rc"
    ;;
  *)
    echo "usage: $0 start|wait" >&2
    exit 2
    ;;
esac
