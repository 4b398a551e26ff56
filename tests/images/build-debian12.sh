#!/usr/bin/env bash
# Build the Molecule test-host image locally from Debian's archive.
#
#   tests/images/build-debian12.sh [--force]
#
# No container registry is used: debootstrap builds a minimal bookworm
# root file system, `podman import` turns it into a base image, and the
# Containerfile adds systemd, python3-apt and the contrib/non-free
# components.  The result is tagged localhost/gpu-native/debian12:latest and
# labelled with a hash of its inputs, so an unchanged image is reused.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="${GPU_NATIVE_TEST_IMAGE:-localhost/gpu-native/debian12:latest}"
rootfs_image="localhost/gpu-native/debian12-rootfs:latest"
mirror="${DEBIAN_MIRROR:-}"
force="${1:-}"

inputs_hash="$(cat "$here/build-debian12.sh" "$here/Containerfile.debian12" | sha256sum | cut -c1-16)"

current_hash="$(podman image inspect --format '{{ index .Labels "gpu-native.inputs" }}' "$image" 2>/dev/null || true)"
if [[ "$force" != "--force" && "$current_hash" == "$inputs_hash" ]]; then
  echo "test image $image is up to date ($inputs_hash)"
  exit 0
fi

if [[ "$force" == "--force" ]] || ! podman image exists "$rootfs_image"; then
  workdir="$(mktemp -d /var/tmp/gpu-native-rootfs.XXXXXX)"
  trap 'rm -rf "$workdir"' EXIT
  echo "debootstrap bookworm into $workdir (a few minutes)"
  # shellcheck disable=SC2086
  debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$workdir/root" $mirror
  tar -C "$workdir/root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$rootfs_image"
fi

podman build \
  --build-arg "BASE_IMAGE=$rootfs_image" \
  --label "gpu-native.inputs=$inputs_hash" \
  -f "$here/Containerfile.debian12" \
  -t "$image" "$here"
echo "built $image ($inputs_hash)"
