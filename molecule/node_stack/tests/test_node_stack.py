"""Verify the node stack (driver + Container Toolkit + containerd handler) on the host's real state."""
import os
import re
import sys
import tomllib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
from handler_checks import run_through_handler  # noqa: E402  pylint: disable=wrong-import-position


testinfra_hosts = ["podman://gn-node_stack-node1"]

CRI = "io.containerd.grpc.v1.cri"
RUNTIME = "/usr/bin/nvidia-container-runtime"
TOOLKIT_VERSION = "1.17.8-1"
TOOLKIT_PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                    "libnvidia-container-tools", "libnvidia-container1"]
DRIVER_PACKAGES = ["nvidia-driver", "nvidia-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi", "libcuda1"]


def version_of(host, package):
    return host.check_output("dpkg-query -W -f='${Version}' %s" % package)


@pytest.fixture(scope="module")
def held(host):
    return set(host.check_output("apt-mark showhold").split())


@pytest.fixture(scope="module")
def driver_version(host):
    return version_of(host, "nvidia-kernel-dkms")


def test_driver_from_the_535_branch(driver_version):
    assert re.match(r"^535\.\d+\.\d+-", driver_version), driver_version


def test_driver_packages_installed_at_one_version_and_held(host, held, driver_version):
    for package in DRIVER_PACKAGES:
        assert version_of(host, package) == driver_version, package
        assert package in held, package


def test_every_package_at_the_driver_version_is_held(host, held, driver_version):
    same = host.check_output(
        "dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}\\n' | awk '$2 == \"%s\" && $3 == \"installed\" {print $1}'"
        % driver_version).split()
    assert "libnvidia-ml1" in same  # NVML: the library whose mismatch breaks nvidia-smi
    assert set(same) <= held, set(same) - held


def test_apt_upgrade_would_not_touch_the_driver_or_toolkit(host):
    simulated = host.check_output("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    for package in DRIVER_PACKAGES + TOOLKIT_PACKAGES:
        assert not re.search(r"^Inst %s " % re.escape(package), simulated, re.M), package


def test_unattended_upgrades_blacklist(host):
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    entries = re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "([^"]+)";', dump, re.M)
    for prefix in ("nvidia-", "libnvidia-", "cuda-", "libcuda1"):
        assert prefix in entries, entries
    drop_in = host.file("/etc/apt/apt.conf.d/51gpu-native-nvidia-driver-no-auto-upgrade")
    assert drop_in.is_file and drop_in.mode == 0o644


def test_nouveau_blacklisted(host):
    conf = host.file("/etc/modprobe.d/gpu-native-blacklist-nouveau.conf")
    assert conf.is_file and conf.mode == 0o644
    assert re.search(r"^blacklist nouveau$", conf.content_string, re.M)
    # modprobe's merged view is what the kernel's module loader follows.
    assert re.search(r"^blacklist nouveau$", host.check_output("modprobe --showconfig"), re.M)


def test_initramfs_tools_present_for_the_rebuild(host):
    assert host.package("initramfs-tools").is_installed


def test_module_parameters_for_debians_module_name(host):
    conf = host.file("/etc/modprobe.d/gpu-native-nvidia-options.conf").content_string
    assert re.search(r"^options nvidia-current NVreg_PreserveVideoMemoryAllocations=1$", conf, re.M)


def test_modules_loaded_at_boot(host):
    lines = host.file("/etc/modules-load.d/gpu-native-nvidia.conf").content_string.splitlines()
    assert [line for line in lines if line and not line.startswith("#")] == ["nvidia", "nvidia_uvm", "nvidia_modeset"]


def test_persistenced_enabled(host):
    assert host.service("nvidia-persistenced").is_enabled


def test_dkms_registered_the_module(host, driver_version):
    upstream = driver_version.split("-")[0]
    status = host.check_output("dkms status")
    # No headers for the host's kernel in a container: registered, not built.
    assert re.search(r"^nvidia-current/%s" % re.escape(upstream), status, re.M), status


def test_toolkit_pinned_and_held(host, held):
    for package in TOOLKIT_PACKAGES:
        assert version_of(host, package) == TOOLKIT_VERSION, package
        assert package in held, package
    assert "version 1.17.8" in host.check_output("nvidia-ctk --version")


def test_newer_toolkit_offered_but_not_installed(host):
    policy = host.check_output("apt-cache policy nvidia-container-toolkit")
    assert "1.18.1-1" in policy  # the repository offers it ...
    assert re.search(r"Installed: 1\.17\.8-1", policy)  # ... and the pin holds


def test_toolkit_source_uses_signed_by(host):
    source = host.file("/etc/apt/sources.list.d/gpu-native-nvidia-container-toolkit.list").content_string
    assert re.search(r"^deb \[signed-by=/etc/apt/keyrings/gpu-native-nvidia-container-toolkit\.asc\] "
                     r"file:///srv/gpu-native-apt/stable/deb/\$\(ARCH\) /$", source, re.M), source
    key = host.file("/etc/apt/keyrings/gpu-native-nvidia-container-toolkit.asc")
    assert key.is_file and "BEGIN PGP PUBLIC KEY BLOCK" in key.content_string
    # Never apt-key: nothing added to the global trust stores.
    assert not host.file("/etc/apt/trusted.gpg").exists
    assert "gpu-native" not in host.check_output("ls /etc/apt/trusted.gpg.d/")


def test_containerd_config_dump_shows_the_handler(host):
    dump = tomllib.loads(host.check_output("containerd config dump"))
    nvidia = dump["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == RUNTIME
    assert host.file(RUNTIME).is_file  # from the toolkit package, not copied in
    assert host.check_output("dpkg -S %s" % RUNTIME).startswith("nvidia-container-toolkit-base:")


def test_container_runs_through_the_handler(host):
    """Run a container with the handler's runtime and binary, as the CRI plugin would; the stand-in logs the call."""
    dump = tomllib.loads(host.check_output("containerd config dump"))
    nvidia = dump["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]
    options = nvidia["options"]
    run_through_handler(host, nvidia["runtime_type"], options, "hello-through-nvidia", name_prefix="gn-node-stack")
