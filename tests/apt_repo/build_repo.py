# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build a local, signed apt repository of STAND-IN NVIDIA Container Toolkit packages.

NVIDIA's libnvidia-container repository cannot be reached from the test
machines, so the container_toolkit role is tested against this one.  It has
the same shape as NVIDIA's (a flat repository per architecture, installed as
``deb [signed-by=KEYRING] URL/stable/deb/$(ARCH) /``) and holds the four real
package names at each version given (default 1.17.8-1 and 1.18.1-1, two real
releases), with the real dependency structure:

    nvidia-container-toolkit      (= base, >= tools, << 2.0.0) /usr/bin/nvidia-container-runtime-hook
    nvidia-container-toolkit-base                              /usr/bin/nvidia-ctk, nvidia-container-runtime
                                  (1.18 and newer also)        nvidia-cdi-refresh.service/.path (systemd)
    libnvidia-container-tools     (>= lib1, << 2.0.0)          /usr/bin/nvidia-container-cli
    libnvidia-container1

The binaries are the stand-ins in tests/standins/ (nvidia-ctk,
nvidia-container-cli, nvidia-container-runtime); every package description
says STAND-IN.

The repository is signed with a throwaway key generated at build time (in a
temporary GNUPGHOME, never written into the checkout).  Output, under --out
(default .cache/apt_repo in the checkout, which git ignores):

    keys/repo.asc                    the signing key (ASCII-armoured) for signed-by
    keys/wrong.asc                   a second key that signs nothing (the "wrong key" test)
    stable/deb/<arch>/               the repository: *.deb, Packages(.gz), Release, Release.gpg, InRelease
    tampered/deb/<arch>/             a copy whose InRelease text was altered after signing
    driver/debian12/<cuda-arch>/     STAND-IN NVIDIA driver packages (below), signed with the same key

The driver repository stands in for NVIDIA's CUDA repository for debian12
(a flat repository per architecture, x86_64 or sbsa, which the nvidia_driver
role installs with nvidia_driver_source=mirror).  It holds, at each version of
--driver-versions (default 570.148.08-1 and 570.172.08-1, two real R570
releases: 570.172.08 in NVIDIA's R570 Data Center driver release notes and
its redistrib_570.172.08.json of 2025-07-17; 570.148.08 as the "Driver Version
Detected" of the real DCGM 4.2.3 capture tests/fixtures/dcgm/
table_dcgm423_excerpt.txt), the five package names the role installs from that repository
(roles/nvidia_driver/vars/Debian-12.yml), with both kernel module flavours:

    nvidia-driver            (= the others' version)      depends on the four below
    nvidia-kernel-dkms       /usr/src/nvidia-current-<v>/dkms.conf       (proprietary modules)
    nvidia-kernel-open-dkms  /usr/src/nvidia-current-open-<v>/dkms.conf  (open modules; conflicts with the above)
    firmware-nvidia-gsp, nvidia-smi, libcuda1                          (a README each)

The dkms.conf files carry the PACKAGE_NAME/PACKAGE_VERSION of Debian's own
nvidia-kernel-dkms (bookworm 535.261.03-1: PACKAGE_NAME="nvidia-current",
modules renamed nvidia-current*.ko) and no sources: on a test host the
stand-ins tests/standins/dkms and tests/standins/modprobe read them as the
module DKMS built and the kernel loads.  That NVIDIA's CUDA repository
registers the open modules as nvidia-current-open, like Debian's
nvidia-open-kernel-dkms, is the role's assumption, not confirmed here.  No
real driver, library or firmware is in any of them.

Usage: python3 tests/apt_repo/build_repo.py [--out DIR] [--versions 1.17.8-1,1.18.1-1]
                                            [--driver-versions 570.148.08-1,570.172.08-1]
Needs dpkg-deb and gpg.  Prints the output directory.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STANDINS = os.path.join(ROOT, "tests", "standins")
DEFAULT_VERSIONS = "1.17.8-1,1.18.1-1"
DEFAULT_DRIVER_VERSIONS = "570.148.08-1,570.172.08-1"
# NVIDIA's name for the CPU architecture in CUDA repository paths.
CUDA_ARCH = {"amd64": "x86_64", "arm64": "sbsa"}
MAINTAINER = "gpu_native.fleet tests <tests@gpu-native.invalid>"
HOMEPAGE = "https://github.com/NVIDIA/nvidia-container-toolkit"
DRIVER_HOMEPAGE = "https://www.nvidia.com/en-us/drivers/unix/"

HOOK_STANDIN = """#!/bin/sh
# STAND-IN for nvidia-container-runtime-hook (tests only): the OCI prestart
# hook of the legacy mode.  The stand-in runtime injects nothing, so this is
# never called by a container start; it answers --version like the real one.
case "${1:-}" in
  --version|-version) echo "NVIDIA Container Runtime Hook version @VERSION@ (stand-in for tests)"; exit 0 ;;
esac
exit 0
"""

RUNTIME_CONFIG = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false
"""


# Toolkit 1.18 added nvidia-cdi-refresh: a oneshot service that writes the CDI
# spec to /var/run/cdi/nvidia.yaml, and a path unit that starts it when the
# driver's modules or nvidia-ctk change.  These are STAND-IN units with the
# real names, paths and output; the real ones also run at boot.
CDI_REFRESH_SERVICE = """# STAND-IN for NVIDIA Container Toolkit's nvidia-cdi-refresh.service (tests only)
[Unit]
Description=Refresh NVIDIA CDI specification file (stand-in for tests)
ConditionPathExists=/usr/bin/nvidia-ctk

[Service]
Type=oneshot
EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
ExecStart=/usr/bin/nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml

[Install]
WantedBy=multi-user.target
"""

CDI_REFRESH_PATH = """# STAND-IN for NVIDIA Container Toolkit's nvidia-cdi-refresh.path (tests only)
[Unit]
Description=Trigger a CDI specification refresh when the NVIDIA driver or toolkit changes (stand-in for tests)

[Path]
PathChanged=/lib/modules/%v/modules.dep
PathChanged=/usr/bin/nvidia-ctk
Unit=nvidia-cdi-refresh.service

[Install]
WantedBy=multi-user.target
"""


def has_cdi_refresh(version):
    """nvidia-cdi-refresh ships with toolkit 1.18 and newer."""
    major, minor = (int(part) for part in version.split("-")[0].split(".")[:2])
    return (major, minor) >= (1, 18)


def run(args, **kwargs):
    return subprocess.run(args, check=True, **kwargs)


def dpkg_arch():
    return subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                          text=True).stdout.strip()


def package_specs(version):
    """The four packages at one version: name -> (depends, files {path: (content|source path, mode)}, conffiles)."""
    base_version = version
    base_files = {"/usr/bin/nvidia-ctk": (os.path.join(STANDINS, "nvidia-ctk"), 0o755),
                  "/usr/bin/nvidia-container-runtime": (os.path.join(STANDINS, "nvidia-container-runtime"), 0o755),
                  "/etc/nvidia-container-runtime/config.toml": (RUNTIME_CONFIG, 0o644)}
    if has_cdi_refresh(version):
        base_files["/usr/lib/systemd/system/nvidia-cdi-refresh.service"] = (CDI_REFRESH_SERVICE, 0o644)
        base_files["/usr/lib/systemd/system/nvidia-cdi-refresh.path"] = (CDI_REFRESH_PATH, 0o644)
    return {
        "libnvidia-container1": (
            "libc6 (>= 2.27)",
            {"/usr/share/doc/libnvidia-container1/README.stand-in":
             ("STAND-IN package for tests: NVIDIA's libnvidia-container library is not included.\n", 0o644)},
            [],
            "NVIDIA container runtime library (STAND-IN for tests, not NVIDIA's package)",
        ),
        "libnvidia-container-tools": (
            "libnvidia-container1 (>= %s), libnvidia-container1 (<< 2.0.0)" % version,
            {"/usr/bin/nvidia-container-cli": (os.path.join(STANDINS, "nvidia-container-cli"), 0o755)},
            [],
            "NVIDIA container runtime library (command-line tools) (STAND-IN for tests, not NVIDIA's package)",
        ),
        "nvidia-container-toolkit-base": (
            "",
            base_files,
            ["/etc/nvidia-container-runtime/config.toml"],
            "NVIDIA Container Toolkit Base (STAND-IN for tests, not NVIDIA's package)",
        ),
        "nvidia-container-toolkit": (
            "nvidia-container-toolkit-base (= %s), libnvidia-container-tools (>= %s), libnvidia-container-tools (<< 2.0.0)"
            % (base_version, version),
            {"/usr/bin/nvidia-container-runtime-hook":
             (HOOK_STANDIN.replace("@VERSION@", version.rsplit("-", 1)[0]), 0o755)},
            [],
            "NVIDIA Container toolkit (STAND-IN for tests, not NVIDIA's package)",
        ),
    }


DKMS_CONF = """# STAND-IN dkms.conf (tests only, gpu_native.fleet tests/apt_repo/build_repo.py): no module sources.
# Shaped like Debian's nvidia-kernel-dkms (bookworm 535.261.03-1): the modules are renamed @NAME@*.ko.
PACKAGE_NAME="@NAME@"
PACKAGE_VERSION="@VERSION@"
AUTOINSTALL=yes
BUILT_MODULE_NAME[0]="nvidia"
DEST_MODULE_NAME[0]="$PACKAGE_NAME"
DEST_MODULE_LOCATION[0]="/updates/dkms"
BUILT_MODULE_NAME[1]="nvidia-modeset"
DEST_MODULE_NAME[1]="$PACKAGE_NAME-modeset"
DEST_MODULE_LOCATION[1]="/updates/dkms"
BUILT_MODULE_NAME[2]="nvidia-drm"
DEST_MODULE_NAME[2]="$PACKAGE_NAME-drm"
DEST_MODULE_LOCATION[2]="/updates/dkms"
BUILT_MODULE_NAME[3]="nvidia-uvm"
DEST_MODULE_NAME[3]="$PACKAGE_NAME-uvm"
DEST_MODULE_LOCATION[3]="/updates/dkms"
BUILT_MODULE_NAME[4]="nvidia-peermem"
DEST_MODULE_NAME[4]="$PACKAGE_NAME-peermem"
DEST_MODULE_LOCATION[4]="/updates/dkms"
"""


def _readme(name, what):
    return {"/usr/share/doc/%s/README.stand-in" % name:
            ("STAND-IN package for tests: %s is not included.\n" % what, 0o644)}


def driver_package_specs(version):
    """The driver packages at one version, in the shape of package_specs()."""
    upstream = version.rsplit("-", 1)[0]
    same = "(= %s)" % version

    def kernel_module(dkms_name):
        files = _readme("nvidia-kernel-dkms" if dkms_name == "nvidia-current" else "nvidia-kernel-open-dkms",
                        "NVIDIA's kernel module source")
        files["/usr/src/%s-%s/dkms.conf" % (dkms_name, upstream)] = (
            DKMS_CONF.replace("@NAME@", dkms_name).replace("@VERSION@", upstream), 0o644)
        return files

    return {
        "firmware-nvidia-gsp": (
            "", {"/lib/firmware/nvidia/%s/README.stand-in" % upstream:
                 ("STAND-IN package for tests: NVIDIA's GSP firmware is not included.\n", 0o644)},
            [], "NVIDIA GSP firmware (STAND-IN for tests, not NVIDIA's package)", {}),
        "nvidia-kernel-dkms": (
            "firmware-nvidia-gsp %s, dkms" % same, kernel_module("nvidia-current"), [],
            "NVIDIA binary kernel module DKMS source (STAND-IN for tests, not NVIDIA's package)",
            {"Provides": "nvidia-kernel-%s" % upstream, "Conflicts": "nvidia-kernel-open-dkms"}),
        "nvidia-kernel-open-dkms": (
            "firmware-nvidia-gsp %s, dkms" % same, kernel_module("nvidia-current-open"), [],
            "NVIDIA open GPU kernel module DKMS source (STAND-IN for tests, not NVIDIA's package)",
            {"Provides": "nvidia-kernel-%s" % upstream, "Conflicts": "nvidia-kernel-dkms"}),
        "nvidia-smi": (
            "", _readme("nvidia-smi", "NVIDIA's nvidia-smi (test hosts use tests/standins/nvidia-smi)"), [],
            "NVIDIA System Management Interface (STAND-IN for tests, not NVIDIA's package)", {}),
        "libcuda1": (
            "", _readme("libcuda1", "NVIDIA's CUDA driver library"), [],
            "NVIDIA CUDA Driver Library (STAND-IN for tests, not NVIDIA's package)", {}),
        "nvidia-driver": (
            "nvidia-kernel-dkms %s | nvidia-kernel-open-dkms %s, firmware-nvidia-gsp %s, nvidia-smi %s, libcuda1 %s"
            % (same, same, same, same, same),
            _readme("nvidia-driver", "NVIDIA's driver"), [],
            "NVIDIA metapackage (STAND-IN for tests, not NVIDIA's package)", {}),
    }


def build_deb(workdir, outdir, name, version, arch, spec, section="utils",
              purpose="the container_toolkit role can be tested without NVIDIA's repository.", homepage=HOMEPAGE):
    depends, files, conffiles, summary = spec[:4]
    extra_fields = spec[4] if len(spec) > 4 else {}
    tree = os.path.join(workdir, "%s_%s" % (name, version))
    os.makedirs(os.path.join(tree, "DEBIAN"))
    size = 0
    for path, (content, mode) in files.items():
        target = os.path.join(tree, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if content.startswith("/") and os.path.isfile(content):
            shutil.copyfile(content, target)
        else:
            with open(target, "w") as handle:
                handle.write(content)
        os.chmod(target, mode)
        size += os.path.getsize(target)
    control = [
        "Package: %s" % name,
        "Version: %s" % version,
        "Architecture: %s" % arch,
        "Maintainer: %s" % MAINTAINER,
        "Installed-Size: %d" % max(1, size // 1024),
    ]
    if depends:
        control.append("Depends: %s" % depends)
    control += ["%s: %s" % item for item in sorted(extra_fields.items())]
    control += [
        "Section: %s" % section,
        "Priority: optional",
        "Homepage: %s" % homepage,
        "Description: %s" % summary,
        " Stand-in built by gpu_native.fleet tests/apt_repo/build_repo.py so that",
        " %s" % purpose,
        " It carries the real package name and version and stand-in contents.",
    ]
    with open(os.path.join(tree, "DEBIAN", "control"), "w") as handle:
        handle.write("\n".join(control) + "\n")
    if conffiles:
        with open(os.path.join(tree, "DEBIAN", "conffiles"), "w") as handle:
            handle.write("\n".join(conffiles) + "\n")
    deb = os.path.join(outdir, "%s_%s_%s.deb" % (name, version, arch))
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", tree, deb], stdout=subprocess.DEVNULL)
    return deb, "\n".join(control)


def digests(path):
    with open(path, "rb") as handle:
        data = handle.read()
    return {"size": len(data), "MD5Sum": hashlib.md5(data).hexdigest(),
            "SHA1": hashlib.sha1(data).hexdigest(), "SHA256": hashlib.sha256(data).hexdigest()}


def write_indexes(repo, entries, arch, origin="gpu_native.fleet tests (stand-in for nvidia.github.io/libnvidia-container)",
                  label="libnvidia-container stand-in"):
    stanzas = []
    for deb, control in entries:
        sums = digests(deb)
        # Keep the control fields (continuation lines included), then add the pool data.
        lines = control.splitlines()
        description_at = next(i for i, line in enumerate(lines) if line.startswith("Description:"))
        fields = lines[:description_at] + [
            "Filename: ./%s" % os.path.basename(deb),
            "Size: %d" % sums["size"],
            "MD5sum: %s" % sums["MD5Sum"],
            "SHA1: %s" % sums["SHA1"],
            "SHA256: %s" % sums["SHA256"],
        ] + lines[description_at:]
        stanzas.append("\n".join(fields))
    packages = os.path.join(repo, "Packages")
    with open(packages, "w") as handle:
        handle.write("\n\n".join(stanzas) + "\n")
    with open(packages, "rb") as src, gzip.GzipFile(packages + ".gz", "wb", mtime=0) as dst:
        dst.write(src.read())
    release = [
        "Origin: %s" % origin,
        "Label: %s" % label,
        "Architectures: %s" % arch,
        "Date: %s" % time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()),
    ]
    for algorithm in ("MD5Sum", "SHA1", "SHA256"):
        release.append("%s:" % algorithm)
        for name in ("Packages", "Packages.gz"):
            sums = digests(os.path.join(repo, name))
            release.append(" %s %16d %s" % (sums[algorithm], sums["size"], name))
    with open(os.path.join(repo, "Release"), "w") as handle:
        handle.write("\n".join(release) + "\n")


def gpg(home, *args, **kwargs):
    return run(["gpg", "--homedir", home, "--batch", "--quiet", "--pinentry-mode", "loopback",
                "--passphrase", ""] + list(args), **kwargs)


def make_key(home, uid):
    gpg(home, "--quick-gen-key", uid, "ed25519", "sign", "never")
    exported = subprocess.run(["gpg", "--homedir", home, "--batch", "--armor", "--export", uid],
                              check=True, capture_output=True, text=True).stdout
    return exported


def sign(home, uid, repo):
    release = os.path.join(repo, "Release")
    gpg(home, "--local-user", uid, "--digest-algo", "SHA256", "--clearsign",
        "--output", os.path.join(repo, "InRelease"), release)
    gpg(home, "--local-user", uid, "--digest-algo", "SHA256", "--armor", "--detach-sign",
        "--output", os.path.join(repo, "Release.gpg"), release)


def tamper(good_repo, tampered_repo):
    """Copy the repository and alter the signed text of InRelease and Release."""
    shutil.copytree(good_repo, tampered_repo)
    for name in ("InRelease", "Release"):
        path = os.path.join(tampered_repo, name)
        with open(path) as handle:
            text = handle.read()
        altered = text.replace("Label: libnvidia-container stand-in", "Label: libnvidia-container stand-in (tampered)", 1)
        if altered == text:
            raise SystemExit("build_repo: could not tamper with %s" % path)
        with open(path, "w") as handle:
            handle.write(altered)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, ".cache", "apt_repo"))
    parser.add_argument("--versions", default=DEFAULT_VERSIONS)
    parser.add_argument("--driver-versions", default=DEFAULT_DRIVER_VERSIONS)
    options = parser.parse_args()
    for tool in ("dpkg-deb", "gpg"):
        if shutil.which(tool) is None:
            raise SystemExit("build_repo: %s is missing. Fix: apt-get install %s" % (tool, "dpkg" if tool == "dpkg-deb" else "gnupg"))
    arch = dpkg_arch()
    out = os.path.abspath(options.out)
    # Build next to the target, then swap, so a reader never sees half a repository.
    # A fresh clone has no .cache/apt_repo yet.
    os.makedirs(os.path.dirname(out), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".apt_repo.", dir=os.path.dirname(out) or ".")
    home = tempfile.mkdtemp(prefix="gpu-native-apt-gnupg.")
    try:
        os.chmod(home, 0o700)
        repo_uid = "gpu_native.fleet throwaway test repository key <apt-repo@gpu-native.invalid>"
        wrong_uid = "gpu_native.fleet throwaway WRONG key <wrong-key@gpu-native.invalid>"
        keys = os.path.join(staging, "keys")
        os.makedirs(keys)
        with open(os.path.join(keys, "repo.asc"), "w") as handle:
            handle.write(make_key(home, repo_uid))
        with open(os.path.join(keys, "wrong.asc"), "w") as handle:
            handle.write(make_key(home, wrong_uid))
        repo = os.path.join(staging, "stable", "deb", arch)
        os.makedirs(repo)
        work = os.path.join(staging, ".work")
        entries = []
        for version in [v.strip() for v in options.versions.split(",") if v.strip()]:
            for name, spec in package_specs(version).items():
                entries.append(build_deb(work, repo, name, version, arch, spec))
        write_indexes(repo, entries, arch)
        sign(home, repo_uid, repo)
        tamper(repo, os.path.join(staging, "tampered", "deb", arch))
        driver_repo = os.path.join(staging, "driver", "debian12", CUDA_ARCH.get(arch, arch))
        os.makedirs(driver_repo)
        driver_entries = []
        for version in [v.strip() for v in options.driver_versions.split(",") if v.strip()]:
            for name, spec in driver_package_specs(version).items():
                driver_entries.append(build_deb(work, driver_repo, name, version, arch, spec, section="non-free/libs",
                                                purpose="the nvidia_driver role can be tested without NVIDIA's repository.",
                                                homepage=DRIVER_HOMEPAGE))
        write_indexes(driver_repo, driver_entries, arch,
                      origin="gpu_native.fleet tests (stand-in for NVIDIA's CUDA repository, debian12)",
                      label="NVIDIA CUDA repository stand-in")
        sign(home, repo_uid, driver_repo)
        shutil.rmtree(work)
        for path, _dirs, files in os.walk(staging):
            os.chmod(path, 0o755)
            for name in files:
                os.chmod(os.path.join(path, name), 0o644)
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.rename(staging, out)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
