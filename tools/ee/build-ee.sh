#!/usr/bin/env bash
# Build the execution environment image here, with no container registry and no package index in the build.
#
#   tools/ee/build-ee.sh [--force]          (`make ee` runs it after `make build`)
#
# --force rebuilds both images without podman's layer cache (a fresh build; debootstrap only when the rootfs
# image is missing, as the test-host images have it).
#
#   1. base: localhost/gpu-native/ee-base:latest, FROM the debootstrap import of Debian 12 that the test-host
#      images use (localhost/gpu-native/debian12-rootfs, made here by debootstrap when missing, exactly as
#      tests/images/build-debian12.sh does) plus tools/ee/Containerfile.base (pip, venv, ssh: Debian's archive).
#   2. .cache/ee/wheelhouse: `pip download` of tools/ee/requirements.txt (wheels only, CPython 3.11 x86_64),
#      on the host; .cache/ee/deps: the dependency collections' tarballs built from the venv's installed copies
#      (tools/ee/collection_tarballs.py); .cache/ee/collection: the tarball `make build` wrote.
#   3. `ansible-builder build --container-runtime podman` on execution-environment.yml.
#
# Each image carries a label with the hash of its inputs (for the EE: this script, the EE definition, the pinned
# requirements, the base image's ID, the dependency tarballs' versions and the collection's FILES.json), so an
# unchanged image is reused at the cost of a hash.  EE_IMAGE overrides the tag.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${VENV:-$repo/.venv}"
cache="$repo/.cache/ee"
image="${EE_IMAGE:-localhost/gpu-native/fleet-ee:latest}"
base_image="localhost/gpu-native/ee-base:latest"
rootfs_image="localhost/gpu-native/debian12-rootfs:latest"
mirror="${DEBIAN_MIRROR:-}"
force="${1:-}"
deps=(ansible.posix community.general kubernetes.core awx.awx)

label() { podman image inspect --format "{{ index .Labels \"gpu-native.inputs\" }}" "$1" 2>/dev/null || true; }

# 1. the base image
if ! podman image exists "$rootfs_image"; then
  workdir="$(mktemp -d /var/tmp/gpu-native-rootfs.XXXXXX)"
  trap 'rm -rf "$workdir"' EXIT
  echo "debootstrap bookworm into $workdir (a few minutes)"
  # shellcheck disable=SC2086
  debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$workdir/root" $mirror
  tar -C "$workdir/root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$rootfs_image"
fi
base_hash="$({ cat "$here/Containerfile.base"; podman image inspect --format '{{ .Id }}' "$rootfs_image"; } \
  | sha256sum | cut -c1-16)"
if [[ "$force" == "--force" || "$(label "$base_image")" != "$base_hash" ]]; then
  podman build ${force:+--no-cache} --build-arg "BASE_IMAGE=$rootfs_image" --label "gpu-native.inputs=$base_hash" \
    -f "$here/Containerfile.base" -t "$base_image" "$here"
else
  echo "EE base image $base_image is up to date ($base_hash)"
fi

# 2. what the build installs from
version="$("$venv/bin/python" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["version"])' "$repo/galaxy.yml")"
tarball="$repo/.cache/dist/gpu_native-fleet-$version.tar.gz"
if [[ ! -f "$tarball" ]]; then
  echo "no collection tarball $tarball. Fix: make build (make ee runs it)" >&2
  exit 1
fi
mkdir -p "$cache/collection" "$cache/deps"
rm -f "$cache"/collection/*
cp "$tarball" "$cache/collection/gpu_native-fleet.tar.gz"
"$venv/bin/python" "$here/collection_tarballs.py" "$cache/deps" "${deps[@]}"

wheel_hash="$(sha256sum "$here/requirements.txt" | cut -c1-16)"
if [[ "$(cat "$cache/wheelhouse/.inputs" 2>/dev/null || true)" != "$wheel_hash" ]]; then
  rm -rf "$cache/wheelhouse" && mkdir -p "$cache/wheelhouse"
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_34_x86_64 -r "$here/requirements.txt" -d "$cache/wheelhouse"
  echo "$wheel_hash" > "$cache/wheelhouse/.inputs"
fi

# 3. the image
ee_hash="$(
  {
    cat "$here/build-ee.sh" "$repo/execution-environment.yml" "$here/requirements.txt"
    echo "$base_hash"
    cat "$cache"/deps/*.version
    tar -xzOf "$cache/collection/gpu_native-fleet.tar.gz" FILES.json
  } | sha256sum | cut -c1-16
)"
if [[ "$force" != "--force" && "$(label "$image")" == "$ee_hash" ]]; then
  echo "execution environment $image is up to date ($ee_hash)"
  exit 0
fi
"$venv/bin/ansible-builder" build ${force:+--no-cache} --container-runtime podman -f "$repo/execution-environment.yml" \
  -c "$cache/context" -t "$image" --extra-build-cli-args "--label gpu-native.inputs=$ee_hash" -v 2
echo "built $image ($ee_hash)"
