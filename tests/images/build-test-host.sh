#!/usr/bin/env bash
# Build one Molecule test-host image locally from Debian's archive.
#
#   tests/images/build-test-host.sh NAME [--force]
#
#   debian12              Debian 12: build-debian12.sh (kept as it is, so the
#                         image other checkouts built stays valid)
#   debian13              Debian 13 (trixie): debootstrap, then Containerfile.debian13
#   debian12-containerd2  the debian12 image plus containerd 2.x from Debian's
#                         unstable suite, pinned (Containerfile.debian12-containerd2)
#   debian12-dkms         the debian12 image plus Debian's dkms and its compilers
#                         (Containerfile.debian12-dkms), for driver_upgrade
#
# No container registry is used.  Each image is tagged
# localhost/gpu-native/NAME:latest and labelled with a hash of its inputs
# (this script, its Containerfile and, for a derived image, the base image's
# ID), so an unchanged image is reused.  --force rebuilds, debootstrap included.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="${1:-}"
force="${2:-}"
mirror="${DEBIAN_MIRROR:-}"

case "$name" in
  debian12)
    exec "$here/build-debian12.sh" ${force:+"$force"} ;;
  debian13)
    suite=trixie
    base_image="localhost/gpu-native/debian13-rootfs:latest" ;;
  debian12-containerd2|debian12-dkms)
    suite=""
    "$here/build-debian12.sh"
    base_image="localhost/gpu-native/debian12:latest" ;;
  *)
    echo "usage: $0 {debian12|debian13|debian12-containerd2|debian12-dkms} [--force]" >&2
    exit 2 ;;
esac

image="localhost/gpu-native/$name:latest"
containerfile="$here/Containerfile.$name"

inputs_hash="$(
  {
    cat "$here/build-test-host.sh" "$containerfile"
    # A derived image is rebuilt whenever its base image was.
    if [[ -z "$suite" ]]; then podman image inspect --format '{{ .Id }}' "$base_image"; fi
  } | sha256sum | cut -c1-16
)"

current_hash="$(podman image inspect --format '{{ index .Labels "gpu-native.inputs" }}' "$image" 2>/dev/null || true)"
if [[ "$force" != "--force" && "$current_hash" == "$inputs_hash" ]]; then
  echo "test image $image is up to date ($inputs_hash)"
  exit 0
fi

if [[ -n "$suite" ]] && { [[ "$force" == "--force" ]] || ! podman image exists "$base_image"; }; then
  workdir="$(mktemp -d /var/tmp/gpu-native-rootfs.XXXXXX)"
  trap 'rm -rf "$workdir"' EXIT
  echo "debootstrap $suite into $workdir (a few minutes)"
  # shellcheck disable=SC2086
  debootstrap --variant=minbase --include=python3,ca-certificates "$suite" "$workdir/root" $mirror
  tar -C "$workdir/root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$base_image"
fi

podman build \
  --build-arg "BASE_IMAGE=$base_image" \
  --label "gpu-native.inputs=$inputs_hash" \
  -f "$containerfile" \
  -t "$image" "$here"
echo "built $image ($inputs_hash)"
