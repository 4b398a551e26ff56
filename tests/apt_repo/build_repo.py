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

Usage: python3 tests/apt_repo/build_repo.py [--out DIR] [--versions 1.17.8-1,1.18.1-1]
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
MAINTAINER = "gpu_native.fleet tests <tests@gpu-native.invalid>"
HOMEPAGE = "https://github.com/NVIDIA/nvidia-container-toolkit"

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


def build_deb(workdir, outdir, name, version, arch, spec):
    depends, files, conffiles, summary = spec
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
    control += [
        "Section: utils",
        "Priority: optional",
        "Homepage: %s" % HOMEPAGE,
        "Description: %s" % summary,
        " Stand-in built by gpu_native.fleet tests/apt_repo/build_repo.py so that",
        " the container_toolkit role can be tested without NVIDIA's repository.",
        " It carries the real package name and version and stand-in binaries.",
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


def write_indexes(repo, entries, arch):
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
        "Origin: gpu_native.fleet tests (stand-in for nvidia.github.io/libnvidia-container)",
        "Label: libnvidia-container stand-in",
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
        shutil.rmtree(work)
        write_indexes(repo, entries, arch)
        sign(home, repo_uid, repo)
        tamper(repo, os.path.join(staging, "tampered", "deb", arch))
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
