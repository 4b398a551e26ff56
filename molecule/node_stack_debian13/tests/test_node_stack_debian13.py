"""Verify the node stack on Debian 13: driver 550 (proprietary and open kernel modules), toolkit, containerd handler."""
import os
import re
import sys
import tomllib

import pytest
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
from handler_checks import run_through_handler  # noqa: E402  pylint: disable=wrong-import-position


testinfra_hosts = ["podman://gn-node_stack_debian13-proprietary", "podman://gn-node_stack_debian13-open"]

ROLE_SPECS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                          "roles", "nvidia_driver", "meta", "argument_specs.yml")
CRI = "io.containerd.grpc.v1.cri"
RUNTIME = "/usr/bin/nvidia-container-runtime"
TOOLKIT_VERSION = "1.17.8-1"
TOOLKIT_PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                    "libnvidia-container-tools", "libnvidia-container1"]
COMMON_DRIVER_PACKAGES = ["nvidia-driver", "firmware-nvidia-gsp", "nvidia-smi", "libcuda1"]
# The DKMS package and the module name it registers, per flavour.  Source: Debian 13's
# nvidia-kernel-dkms / nvidia-open-kernel-dkms 550.163.01-2, PACKAGE_NAME in
# /usr/src/nvidia-current{,-open}-550.163.01/dkms.conf.
FLAVOURS = {
    "proprietary": {"package": "nvidia-kernel-dkms", "dkms": "nvidia-current", "not": "nvidia-open-kernel-dkms"},
    "open": {"package": "nvidia-open-kernel-dkms", "dkms": "nvidia-current-open", "not": "nvidia-kernel-dkms"},
}


def role_has_kernel_module_option():
    with open(ROLE_SPECS, encoding="utf-8") as handle:
        specs = yaml.safe_load(handle)
    return "nvidia_driver_kernel_module" in specs["argument_specs"]["main"]["options"]


def version_of(host, package):
    return host.check_output("dpkg-query -W -f='${Version}' %s" % package)


def is_installed(host, package):
    return host.run("dpkg-query -W -f='${db:Status-Status}' %s" % package).stdout == "installed"


@pytest.fixture(scope="module")
def flavour(host):
    """The host's expected flavour: the open host asks for open modules (host_vars), if the role knows the variable."""
    if host.backend.get_hostname().endswith("-open") and role_has_kernel_module_option():
        return "open"
    return "proprietary"


@pytest.fixture(scope="module")
def held(host):
    return set(host.check_output("apt-mark showhold").split())


@pytest.fixture(scope="module")
def driver_version(host):
    return version_of(host, "nvidia-driver")


def test_host_is_debian_13(host):
    assert host.file("/etc/debian_version").content_string.startswith("13.")


def test_open_modules_requested_where_the_role_supports_them(host):
    if not host.backend.get_hostname().endswith("-open"):
        pytest.skip("the proprietary host")
    if not role_has_kernel_module_option():
        pytest.skip("roles/nvidia_driver has no nvidia_driver_kernel_module yet: this host was checked as proprietary")
    assert is_installed(host, "nvidia-open-kernel-dkms")


def test_driver_from_the_550_branch(driver_version):
    assert re.match(r"^550\.\d+\.\d+-", driver_version), driver_version


def test_one_kernel_module_flavour(host, flavour, driver_version):
    wanted = FLAVOURS[flavour]
    assert version_of(host, wanted["package"]) == driver_version
    assert not is_installed(host, wanted["not"]), wanted["not"]


def test_driver_packages_installed_at_one_version_and_held(host, held, flavour, driver_version):
    for package in COMMON_DRIVER_PACKAGES + [FLAVOURS[flavour]["package"]]:
        assert version_of(host, package) == driver_version, package
        assert package in held, package


def test_every_package_at_the_driver_version_is_held(host, held, driver_version):
    same = host.check_output(
        "dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}\\n' | awk '$2 == \"%s\" && $3 == \"installed\" {print $1}'"
        % driver_version).split()
    assert "libnvidia-ml1" in same
    assert set(same) <= held, set(same) - held


def test_apt_upgrade_would_not_touch_the_driver_or_toolkit(host, flavour):
    simulated = host.check_output("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    for package in COMMON_DRIVER_PACKAGES + [FLAVOURS[flavour]["package"]] + TOOLKIT_PACKAGES:
        assert not re.search(r"^Inst %s " % re.escape(package), simulated, re.M), package


def test_dkms_registered_the_module_flavour(host, flavour, driver_version):
    upstream = driver_version.split("-")[0]
    module = FLAVOURS[flavour]["dkms"]
    conf = host.file("/usr/src/%s-%s/dkms.conf" % (module, upstream))
    assert conf.is_file
    assert re.search(r'^PACKAGE_NAME="%s"$' % re.escape(module), conf.content_string, re.M)
    status = host.check_output("dkms status")
    # No headers for the host's kernel in a container: registered ("added"), not built.
    assert re.search(r"^%s/%s: added$" % (re.escape(module), re.escape(upstream)), status, re.M), status
    other = FLAVOURS["open" if flavour == "proprietary" else "proprietary"]["dkms"]
    assert not re.search(r"^%s/" % re.escape(other), status, re.M), status


def test_persistenced_enabled(host):
    assert host.service("nvidia-persistenced").is_enabled


def test_toolkit_pinned_and_held(host, held):
    for package in TOOLKIT_PACKAGES:
        assert version_of(host, package) == TOOLKIT_VERSION, package
        assert package in held, package


def test_containerd_1_7_dump_shows_the_handler(host):
    assert re.match(r"^1\.7\.", version_of(host, "containerd"))
    dump = tomllib.loads(host.check_output("containerd config dump"))
    nvidia = dump["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == RUNTIME
    assert host.check_output("dpkg -S %s" % RUNTIME).startswith("nvidia-container-toolkit-base:")


def test_container_runs_through_the_handler(host):
    """Run a container with the handler's runtime and binary, as the CRI plugin would; the stand-in logs the call."""
    dump = tomllib.loads(host.check_output("containerd config dump"))
    nvidia = dump["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]
    options = nvidia["options"]
    run_through_handler(host, nvidia["runtime_type"], options, "hello-through-nvidia", name_prefix="gn-node-stack")
