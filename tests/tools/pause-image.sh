#!/usr/bin/env bash
# The pod sandbox image for the real kubelets of the Molecule test hosts, built here (no registry): upstream's
# pause, compiled from build/pause/linux/pause.c of the k8s.io/kubernetes module at the release kube-build.sh pins,
# with upstream's flags (build/pause/Makefile: -Os -Wall -Werror -static), in a FROM scratch image as upstream's
# build/pause/Dockerfile has it (USER 65535:65535, ENTRYPOINT /pause), tagged localhost/gpu-native/pause:<TAG> and
# saved as a docker archive that `ctr images import` takes. Cached outside the clone, next to the Kubernetes
# binaries:
#   $KUBE_CACHE/<version>/pause-<TAG>.tar   the image
#   $KUBE_CACHE/<version>/pause-<TAG>.stamp hash of this script and of pause.c
# Prints the archive's path. containerd's CRI takes it as its sandbox image (pinned_images.sandbox).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KUBE_VERSION=$(sed -n 's/^KUBE_VERSION=\(v[0-9.]*\).*/\1/p' "$repo/tests/tools/kube-build.sh")
PAUSE_TAG=3.10.1  # build/pause/Makefile's TAG at v1.35.4
IMAGE=localhost/gpu-native/pause:$PAUSE_TAG
DEST=${KUBE_CACHE:-/var/cache/gpu-native-fleet/kube}/$KUBE_VERSION
ARCHIVE=$DEST/pause-$PAUSE_TAG.tar

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  export PATH=/usr/local/go/bin:$PATH
fi
source_dir=$(GOTOOLCHAIN=${GOTOOLCHAIN:-local} go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
pause_c=$source_dir/build/pause/linux/pause.c
[[ -f $pause_c ]] || { echo "pause-image: no $pause_c in k8s.io/kubernetes@$KUBE_VERSION. Fix: check that the Go module proxy answers (go mod download k8s.io/kubernetes@$KUBE_VERSION)" >&2; exit 1; }
grep -q "^TAG ?= $PAUSE_TAG\$" "$source_dir/build/pause/Makefile" || { echo "pause-image: build/pause/Makefile of $KUBE_VERSION does not tag $PAUSE_TAG. Fix: set PAUSE_TAG in $0 to its TAG" >&2; exit 1; }
stamp=$(cat "${BASH_SOURCE[0]}" "$pause_c" | sha256sum | cut -d' ' -f1)
if [[ -f $ARCHIVE && -f $DEST/pause-$PAUSE_TAG.stamp && "$(cat "$DEST/pause-$PAUSE_TAG.stamp")" == "$stamp" ]]; then
  echo "$ARCHIVE"
  exit 0
fi

mkdir -p "$DEST"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_TAG-$KUBE_VERSION" -o "$work/pause" "$pause_c"
printf '%s\n' "FROM scratch" "ADD pause /pause" "USER 65535:65535" 'ENTRYPOINT ["/pause"]' > "$work/Containerfile"
podman build --quiet --tag "$IMAGE" "$work" >/dev/null
podman save --format docker-archive --output "$work/pause.tar" "$IMAGE" >/dev/null 2>&1
mv "$work/pause.tar" "$ARCHIVE.new" && mv "$ARCHIVE.new" "$ARCHIVE"
echo "$stamp" > "$DEST/pause-$PAUSE_TAG.stamp"
echo "$ARCHIVE"
