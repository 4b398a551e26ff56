#!/usr/bin/env bash
# kube-build.sh [--force] [--print-dir]
#
# Build the real Kubernetes control plane the integration tests run against, from upstream sources
# fetched as Go modules, and cache the binaries by version outside the clone:
#
#   $KUBE_CACHE/<version>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,etcd}
#   $KUBE_CACHE/<version>/stamp        hash of this script and the Go toolchain that built them
#   $KUBE_CACHE/<version>/build.log    what the last build cost (wall time, CPU, peak memory, sizes)
#
# KUBE_CACHE defaults to /var/cache/gpu-native-fleet/kube (CI runs in a fresh clone on the same machine).
# A second run finds the five binaries and a matching stamp and costs nothing.
#
# How: a throwaway module in $KUBE_CACHE/<version>/src/kubernetes requires k8s.io/kubernetes at KUBE_VERSION
# and pins every k8s.io/<staging> module (the list is read from k8s.io/kubernetes's own go.mod, where they are
# `replace`d by ./staging paths that a module consumer cannot see) to the matching v0.x release: the standard
# way to consume k8s.io/kubernetes as a library.  etcd is built the same way from go.etcd.io/etcd/server/v3
# at the version k8s.io/kubernetes requires for go.etcd.io/etcd/client/v3 (the server's own go.mod
# `replace`s its sibling modules by ../ paths, so a second throwaway module pins them to that release).
# Binaries are static (CGO_ENABLED=0), -trimpath, stripped (-s -w, as upstream release builds are), and
# stamped with the version (-X k8s.io/component-base/version.* and k8s.io/client-go/pkg/version.*, the
# variables upstream's hack/lib/version.sh sets), so `--version` and /version report it.
#
# --force rebuilds; --print-dir prints the binaries' folder (building first if needed).
set -euo pipefail

KUBE_VERSION=v1.35.4                 # one release of the compatibility table (v1.31-v1.35), with resource.k8s.io/v1
KUBE_MAJOR=$(echo "${KUBE_VERSION#v}" | cut -d. -f1)
KUBE_MINOR=$(echo "$KUBE_VERSION" | cut -d. -f2)
STAGING_VERSION=v0.${KUBE_VERSION#v1.}   # k8s.io/<staging> modules are tagged v0.<minor>.<patch>
KUBE_BUILD_DATE=2026-04-15T18:01:22Z # the module proxy's time for k8s.io/kubernetes v1.35.4: reproducible builds
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
CACHE_ROOT=${KUBE_CACHE:-/var/cache/gpu-native-fleet/kube}
DEST=$CACHE_ROOT/$KUBE_VERSION
BIN=$DEST/bin

force=0 print_dir=0
for arg in "$@"; do
  case $arg in
    --force) force=1 ;;
    --print-dir) print_dir=1 ;;
    *) echo "usage: $0 [--force] [--print-dir]" >&2; exit 2 ;;
  esac
done

# The Go toolchain as the machine has it (Debian 12's golang is too old for k8s 1.35, which needs go >= 1.25).
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "kube-build: no Go toolchain on PATH (nor /usr/local/go/bin/go). Fix: install Go 1.25 or newer." >&2; exit 1; }
GO_VERSION=$(go env GOVERSION)

log() { [[ $print_dir -eq 1 ]] && echo "kube-build: $*" >&2 || echo "kube-build: $*"; }

inputs_hash() {
  { cat "${BASH_SOURCE[0]}"; echo "$GO_VERSION"; } | sha256sum | cut -d' ' -f1
}

cached() {
  local name
  for name in "${COMPONENTS[@]}" etcd; do
    [[ -x $BIN/$name ]] || return 1
  done
  [[ -f $DEST/stamp && "$(cat "$DEST/stamp")" == "$(inputs_hash)" ]]
}

finish() {
  if [[ $print_dir -eq 1 ]]; then echo "$BIN"; fi
}

if [[ $force -eq 0 ]] && cached; then
  log "cached: $BIN ($KUBE_VERSION, $(cat "$DEST/go-version" 2>/dev/null || echo "$GO_VERSION"))"
  finish
  exit 0
fi

mkdir -p "$DEST"
exec 9>"$CACHE_ROOT/.lock"
if ! flock -n 9; then
  log "another build holds $CACHE_ROOT/.lock; waiting"
  flock 9
  if [[ $force -eq 0 ]] && cached; then log "cached: $BIN (built by the other run)"; finish; exit 0; fi
fi

# Build output never mixes with the stamp's promise: binaries go to bin.new, then replace bin at once.
rm -rf "$DEST/bin.new" "$DEST/stamp"
mkdir -p "$DEST/bin.new" "$DEST/src/kubernetes" "$DEST/src/etcd"
: > "$DEST/build.log.new"
report() { echo "$*" | tee -a "$DEST/build.log.new" >&2; }

# A timed step: wall time, CPU (user+sys) and the largest process's peak memory, from GNU time.
timed_step() {
  local name=$1; shift
  local t; t=$(mktemp)
  /usr/bin/time -f '%e %U %S %M' -o "$t" nice -n 10 "$@"
  read -r wall user sys rss < "$t"; rm -f "$t"
  report "$(printf '%-28s wall %7.1f s  cpu %7.1f s  peak %5d MiB' "$name" "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" $((rss / 1024)))"
}

export CGO_ENABLED=0 GOFLAGS="-p=2 -buildvcs=false" GOTOOLCHAIN=${GOTOOLCHAIN:-local}
report "kube-build $KUBE_VERSION with $GO_VERSION on $(nproc) cores, $(date -u +%Y-%m-%dT%H:%M:%SZ)"

# --- k8s.io/kubernetes ---------------------------------------------------------------------------
kube_gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[[ -f $kube_gomod ]] || { echo "kube-build: cannot download k8s.io/kubernetes@$KUBE_VERSION's go.mod" >&2; exit 1; }
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/k8s\.io/[a-z0-9-]*$#\1#p' "$kube_gomod")
((${#staging[@]} > 20)) || { echo "kube-build: found only ${#staging[@]} staging modules in $kube_gomod" >&2; exit 1; }
go_line=$(grep -m1 '^go ' "$kube_gomod")
godebug_line=$(grep -m1 '^godebug ' "$kube_gomod" || true)
ETCD_VERSION=$(sed -n 's#^[[:space:]]*go\.etcd\.io/etcd/client/v3 \(v[0-9.]*\)$#\1#p' "$kube_gomod" | head -1)
[[ -n $ETCD_VERSION ]] || { echo "kube-build: k8s.io/kubernetes's go.mod names no go.etcd.io/etcd/client/v3" >&2; exit 1; }

{
  echo "// Generated by tests/tools/kube-build.sh: a throwaway module to build k8s.io/kubernetes $KUBE_VERSION."
  echo "module kube-build"
  echo
  echo "$go_line"
  echo
  # the same GODEBUG defaults as the upstream build (a dependency's godebug line does not apply)
  [[ -n $godebug_line ]] && { echo "$godebug_line"; echo; }
  echo "require k8s.io/kubernetes $KUBE_VERSION"
  echo
  echo "replace ("
  for module in "${staging[@]}"; do echo "	$module => $module $STAGING_VERSION"; done
  echo ")"
  echo
  echo "tool ("
  for name in "${COMPONENTS[@]}"; do echo "	k8s.io/kubernetes/cmd/$name"; done
  echo ")"
} > "$DEST/src/kubernetes/go.mod"
rm -f "$DEST/src/kubernetes/go.sum"

# The variables upstream's hack/lib/version.sh sets, in both packages that carry them.  gitCommit stays
# empty: a module download carries no commit, and "$Format:%H$" (the unset value) would be a lie too.
ldflags=(-s -w)
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=("-X=$pkg.gitVersion=$KUBE_VERSION" "-X=$pkg.gitMajor=$KUBE_MAJOR" "-X=$pkg.gitMinor=$KUBE_MINOR"
            "-X=$pkg.gitTreeState=clean" "-X=$pkg.gitCommit=" "-X=$pkg.buildDate=$KUBE_BUILD_DATE")
done

(cd "$DEST/src/kubernetes" && timed_step "resolve k8s.io/kubernetes" go mod tidy)
for name in "${COMPONENTS[@]}"; do
  (cd "$DEST/src/kubernetes" && timed_step "build $name" go build -trimpath -ldflags "${ldflags[*]}" \
     -o "$DEST/bin.new/$name" "k8s.io/kubernetes/cmd/$name")
done

# --- etcd ----------------------------------------------------------------------------------------
etcd_gomod=$(go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
mapfile -t etcd_siblings < <(sed -n 's#^[[:space:]]*\(go\.etcd\.io/etcd/[a-z/]*v3\) => \.\./.*$#\1#p' "$etcd_gomod")
{
  echo "// Generated by tests/tools/kube-build.sh: a throwaway module to build etcd $ETCD_VERSION."
  echo "module etcd-build"
  echo
  grep -m1 '^go ' "$etcd_gomod"
  echo
  echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  echo
  echo "replace ("
  for module in "${etcd_siblings[@]}"; do echo "	$module => $module $ETCD_VERSION"; done
  echo ")"
  echo
  echo "tool go.etcd.io/etcd/server/v3"
} > "$DEST/src/etcd/go.mod"
rm -f "$DEST/src/etcd/go.sum"
(cd "$DEST/src/etcd" && timed_step "resolve etcd $ETCD_VERSION" go mod tidy)
(cd "$DEST/src/etcd" && timed_step "build etcd" go build -trimpath -ldflags "-s -w" -o "$DEST/bin.new/etcd" go.etcd.io/etcd/server/v3)

# --- check what was built, then publish ----------------------------------------------------------
for name in "${COMPONENTS[@]}"; do
  got=$("$DEST/bin.new/$name" --version 2>&1 | head -1)
  [[ $got == *" $KUBE_VERSION" ]] || { echo "kube-build: $name --version printed '$got', not $KUBE_VERSION" >&2; exit 1; }
done
got=$("$DEST/bin.new/etcd" --version | head -1)
[[ $got == "etcd Version: ${ETCD_VERSION#v}" ]] || { echo "kube-build: etcd --version printed '$got'" >&2; exit 1; }
for name in "${COMPONENTS[@]}" etcd; do
  report "$(printf '%-28s %4d MiB' "size $name" $(( $(stat -c %s "$DEST/bin.new/$name") / 1048576 )))"
done
rm -rf "${DEST:?}/bin"
mv "$DEST/bin.new" "$DEST/bin"
echo "$GO_VERSION" > "$DEST/go-version"
echo "$ETCD_VERSION" > "$DEST/etcd-version"
mv "$DEST/build.log.new" "$DEST/build.log"
inputs_hash > "$DEST/stamp"
log "built $BIN ($KUBE_VERSION, etcd $ETCD_VERSION, $GO_VERSION)"
finish
