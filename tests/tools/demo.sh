#!/usr/bin/env bash
# `make demo`: onboard a simulated GPU fleet with gpu_native.fleet.onboard, on this machine, with no GPU.
# `make demo-clean` (demo.sh clean) removes it.
#
# The fleet is the Molecule scenario molecule/onboard: Debian 12 podman test hosts (the image Molecule uses)
# act as GPU nodes; their Node objects live on a real Kubernetes control plane on this machine (upstream etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler: tests/kube_cluster.py), and the onboarding runs with
# the onboarding job's ServiceAccount token (rbac/onboarding.yml), not as admin. No kubelet runs: a kubelet
# stand-in posts the nodes' status and the device plugin pods' status through the API. The GPUs are SIMULATED from
# real captures: tests/standins/nvidia-smi replays nvidia-smi outputs captured on real nodes, and
# tests/standins/dcgmi replays a DCGM diagnostic. The containerd handler, the readiness agent, the spec,
# hardware and kubernetes gates and every Kubernetes change run for real; the CUDA and serving gates are
# skipped, with that reason in the report, because no CUDA driver or model server exists without a GPU.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
export PATH="$repo/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$repo/.cache/collections"
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=true
export ANSIBLE_HOME="$repo/.cache/ansible-home"  # as tests/tools/run-molecule.sh: this checkout's collection copy
export NO_COLOR=1 ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
mkdir -p "$repo/.cache/apt-archives/partial" "$repo/.cache/demo"
log="$repo/.cache/demo/onboard.log"

if [[ ${1:-} == clean ]]; then
  molecule cleanup -s onboard >/dev/null 2>&1 || true
  molecule destroy -s onboard
  echo "demo fleet removed"
  exit 0
fi

cat <<'BANNER'
== gpu_native.fleet demo: onboarding a simulated GPU fleet
   4 GPU nodes as Debian 12 test hosts; their GPUs are SIMULATED from real nvidia-smi captures:
     gpu-h100-01      8x H100 80GB HBM3, healthy
     gpu-a40-07       8x A40, GPU 4 shows ERR! after Xid 119 (nvidia-smi still exits 0)
     gpu-h100-02      8x H100, but its driver (565.57.01) drifts from the fleet standard (550.127.08)
     gpu-a100-mig-01  A100 SXM4 80GB with a MIG layout assigned (4x 1g.20gb, device plugin strategy mixed).
                      It is an A100, from a real capture, because no H200 capture exists yet.
   The Kubernetes control plane is real (upstream etcd, kube-apiserver, controller-manager, scheduler on
   127.0.0.1); the onboarding runs as its job's ServiceAccount (rbac/onboarding.yml), not as admin. The nodes
   registered with the gpu-native.io/unvalidated taint; no kubelet runs: a kubelet stand-in posts their status
   (allocatable from the simulated GPUs) and runs the device plugin DaemonSet's pods, through the API only.
   Gates: spec, hardware (gpu_health + dcgmi), kubernetes run for real; cuda and serving are skipped
   (no CUDA driver and no model server exist without a GPU), and the report says so.
BANNER
start=$(date +%s)
molecule destroy -s onboard >/dev/null 2>&1 || true
echo "== creating the test hosts, the control plane and the kubelet stand-in (molecule create/prepare -s onboard)"
molecule create -s onboard >"$log" 2>&1 || { tail -40 "$log"; exit 1; }
molecule prepare -s onboard >>"$log" 2>&1 || { tail -40 "$log"; exit 1; }
echo "== ansible-playbook gpu_native.fleet.onboard (full log: $log)"
if ! molecule converge -s onboard >>"$log" 2>&1; then
  tail -60 "$log"
  exit 1
fi
# The fleet summary is the last debug message of the run.
awk '/TASK \[Print the fleet summary\]/ {show = 1} show && /^PLAY RECAP/ {exit} show' "$log" \
  | sed -n '/msg:/,$p' | sed -e 's/^ *- //' -e '/^ *msg:/d' -e "s/^'//" -e "s/'$//"
# What the kubernetes gate expected of the MIG node, as the run printed it (counted from the node's facts).
python3 - "$log" <<'PY'
import sys
import yaml
lines = open(sys.argv[1]).read().splitlines()
for number, line in enumerate(lines):
    if "Show the allocatable against what the node should offer" in line:
        for offset, host_line in enumerate(lines[number + 1:number + 200]):
            if host_line.startswith("TASK ["):
                break
            if host_line.startswith("ok: [gn-onboard-a100-mig]"):
                body = []
                for item in lines[number + offset + 2:]:
                    if item and not item[0].isspace():
                        break
                    body.append(item)
                msg = (yaml.safe_load("\n".join(body)) or {}).get("msg") or {}
                counts = ", ".join("%s: %s expected, %s allocatable" % (name, row.get("expected"), row.get("actual"))
                                   for name, row in sorted((msg.get("resources") or {}).items()))
                print("== gpu-a100-mig-01, an A100 from a real capture (no H200 capture exists yet): the kubernetes gate")
                print("   %s (%s)" % (counts, msg.get("expected_from")))
                sys.exit(0)
PY
kubeconfig="$repo/.cache/kube/onboard/onboarding.kubeconfig"
echo "== the nodes in the Kubernetes API (the real kube-apiserver, read with the onboarding job's token)"
python3 - "$kubeconfig" <<'PY'
import base64, json, ssl, sys, urllib.request
import yaml
config = yaml.safe_load(open(sys.argv[1]))
cluster = config["clusters"][0]["cluster"]
token = config["users"][0]["user"]["token"]
context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
request = urllib.request.Request(cluster["server"] + "/api/v1/nodes", headers={"Authorization": "Bearer " + token})
for node in json.load(urllib.request.urlopen(request, context=context))["items"]:
    meta = node["metadata"]
    state = "cordoned" if node["spec"].get("unschedulable") else "schedulable"
    devices = ",".join("%s=%s" % (k[len("nvidia.com/"):], v) for k, v in sorted(node["status"].get("allocatable", {}).items())
                       if k.startswith("nvidia.com/"))
    print("%-15s %-11s preflight=%-6s %-14s %s" % (meta["name"], state, meta.get("labels", {}).get("gpu-native.io/preflight", "-"),
                                                devices, meta.get("annotations", {}).get("gpu-native.io/preflight-reasons", "")[:90]))
PY
echo "== the nightly compliance job on the same fleet (tools/fleet_report.py runs compliance.yml through ansible-runner)"
reports="$repo/.cache/demo/reports"
rm -rf "$reports" && mkdir -p "$reports"
sed "s#REPO#$repo#g" molecule/onboard/files/compliance-inventory.yml > "$repo/.cache/demo/inventory.yml"
# Drift is the point of the demo: the report's exit status (1 when a host drifts) does not stop it.
python3 tools/fleet_report.py -i "$repo/.cache/demo/inventory.yml" --html "$reports/fleet.html" \
  --json "$reports/fleet.json" --junit "$reports/fleet-junit.xml" || true
echo "   reports: $reports/fleet.html (open it in a browser), fleet.json, fleet-junit.xml"
echo "   onboarding report page: $repo/.cache/demo/onboarding.html (node x gate matrix, reasons, labels)"
echo "   Grafana dashboards: $repo/roles/gpu_readiness/files/dashboards/*.json (docs/dashboards.md)"
echo "== done in $(( $(date +%s) - start ))s; the GPUs above were simulated from real captures."
echo "   Look around: KUBECONFIG=$kubeconfig, podman exec -it gn-onboard-a40-err nvidia-smi"
echo "   Remove it all: make demo-clean"
