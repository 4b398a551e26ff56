#!/usr/bin/env bash
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# What each import step of the readiness agent adds, in instructions (valgrind --tool=callgrind: load-independent),
# for the agent of a checkout laid out as the role installs it (issue #32).  Each row is a cumulative prefix of the
# agent's imports minus the row above.  Usage:
#   benchmarks/agent_imports_callgrind.sh [CHECKOUT (default: this one)] ["import argparse" (an extra first step)]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
checkout=${1:-$here}
extra=${2:-}
work=$(mktemp -d /tmp/agent-imports.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 -c "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('af', '$here/benchmarks/agent_footprint.py')
af = importlib.util.module_from_spec(spec); spec.loader.exec_module(af)
af.install_agent('$work', '$checkout', 'install')"
inst=$work/install
M="ansible_collections.gpu_native.fleet.plugins.module_utils"
P="import sys; sys.path.insert(0, '$inst'); "
/usr/bin/python3 -I -S -c "$P from $M.gpu import gpu_health, kernel_log_state"  # write the .pyc files first
ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null /usr/bin/python3 -I -S -c "$1" 2>&1 | awk '/Collected/{print $4}'; }
floor=$(ir "pass")
prev=$floor
printf "%8.1f M  python3 -I -S -c pass\n" "$(echo "$floor/1000000" | bc -l)"
# the agent itself: imported from its bytecode through the launcher (issue #32), or, in a checkout without one,
# compiled on every run as the script the unit starts
if [ -f "$inst/gpu_native_readiness_run.py" ]; then
  agent_steps=("sys.path.insert(0, '$inst'); import gpu_native_readiness_agent")
else
  agent_steps=("src = open('$inst/gpu_native_readiness_agent.py').read(); code = compile(src, 'agent', 'exec')"
               "exec(code, {'__name__': 'agent', '__file__': '$inst/gpu_native_readiness_agent.py'})")
fi
for stmt in "import json, os, time" ${extra:+"$extra"} "from $M._common import node_tools" \
    "from $M.gpu import pci" "from $M.gpu import nvidia_smi" "from $M.gpu import xid" "from $M.gpu import gpu_health" \
    "from $M.gpu import kernel_log_state" "${agent_steps[@]}"; do
  P="$P $stmt;"
  now=$(ir "$P")
  printf "%8.1f M  %s\n" "$(echo "($now-$prev)/1000000" | bc -l)" "$(echo "$stmt" | sed "s|$M|module_utils|g; s|$inst/||g")"
  prev=$now
done
printf "%8.1f M  imports + compile in all\n" "$(echo "($prev-$floor)/1000000" | bc -l)"
