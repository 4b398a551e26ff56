#!/usr/bin/env bash
# Prepare this Debian machine to run the test suites (idempotent, needs root):
# Debian packages for podman test hosts (plus shellcheck for sanity and
# promtool for the alert-rule tests, rpm as the reference for the version
# rules, chromium for the preflight report page in tests/integration/test_preflight_report_chromium.py:
# about 21 s to install, --no-install-recommends), apt lists (the dpkg reference test draws versions from them),
# and the podman configuration that
# works on hosts with hybrid cgroups (runc + cgroupfs) and tight rlimits.
set -euo pipefail

packages=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs git rsync make python3-venv gnupg shellcheck prometheus gcc libc6-dev rpm chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then echo "need root to install packages" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # We want only promtool from the prometheus package, not a running server.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
fi

# tests/unit/.../test_versions_reference.py compares dpkg's order on the
# versions in the apt lists: make sure there are lists.
if ! compgen -G '/var/lib/apt/lists/*Packages*' >/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then echo "need root to run apt-get update" >&2; exit 1; fi
  apt-get update -qq
fi

conf=/etc/containers/containers.conf
want='# Managed by gpu_native.fleet tests/tools/setup-host.sh
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
'
if [[ ! -f $conf ]] || [[ "$(cat "$conf")" != "$(printf '%s' "$want")" ]]; then
  if [[ -f $conf ]] && ! grep -q 'Managed by gpu_native.fleet' "$conf"; then
    cp -a "$conf" "$conf.orig-gpu-native"
  fi
  mkdir -p /etc/containers
  printf '%s' "$want" > "$conf"
  echo "wrote $conf"
fi
