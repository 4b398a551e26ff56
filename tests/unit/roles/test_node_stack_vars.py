# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-OS vars of the nvidia_driver and container_toolkit roles.

Only Debian 12 runs in Molecule here; these tests keep the other OS paths
honest: every OS file defines every variable the tasks read, package names
follow the branch pattern, URLs and keyring paths are well formed.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re
from urllib.parse import urlparse

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DRIVER = os.path.join(ROOT, "roles", "nvidia_driver")
TOOLKIT = os.path.join(ROOT, "roles", "container_toolkit")
DRIVER_OS_FILES = ["Debian-12.yml", "Debian-13.yml", "Ubuntu-22.04.yml", "Ubuntu-24.04.yml", "RedHat-9.yml"]
ARCH_FOR_TESTS = {"__nvidia_driver_cuda_arch": "x86_64"}


def load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def role_text(role):
    texts = []
    for pattern in ("tasks/**/*.yml", "templates/*.j2", "handlers/*.yml"):
        for path in glob.glob(os.path.join(role, pattern), recursive=True):
            with open(path) as handle:
                texts.append(handle.read())
    return "\n".join(texts)


def names_set_inside(role, prefix):
    """Internal variables the role sets itself (set_fact, register, task vars, loop vars)."""
    text = role_text(role)
    names = set(re.findall(r"register: (%s\w+)" % prefix, text))
    names |= set(re.findall(r"^\s+(%s\w+):" % prefix, text, re.M))  # set_fact / vars keys
    return names


def names_read(role, prefix):
    return set(re.findall(r"\b(%s\w+)\b" % prefix, role_text(role)))


def render(value):
    """The two Jinja expressions the vars files use, with test values."""
    for name, replacement in ARCH_FOR_TESTS.items():
        value = value.replace("{{ %s }}" % name, replacement)
    return value


def test_every_supported_os_has_a_vars_file():
    present = sorted(os.path.basename(p) for p in glob.glob(os.path.join(DRIVER, "vars", "*.yml")))
    assert sorted(DRIVER_OS_FILES + ["main.yml"]) == present


@pytest.mark.parametrize("os_file", DRIVER_OS_FILES)
def test_driver_os_file_defines_every_variable_the_tasks_read(os_file):
    defined = set(load(os.path.join(DRIVER, "vars", "main.yml"))) | set(load(os.path.join(DRIVER, "vars", os_file)))
    needed = names_read(DRIVER, "__nvidia_driver_") - names_set_inside(DRIVER, "__nvidia_driver_")
    family = load(os.path.join(DRIVER, "vars", os_file))["__nvidia_driver_pkg_family"]
    if family != "dnf":
        needed.discard("__nvidia_driver_module_stream")  # read by tasks/dnf/ only
        needed.discard("__nvidia_driver_repo_dnf_signed")
        needed.discard("__nvidia_driver_module_stream_open")
    else:
        needed.discard("__nvidia_driver_auto_upgrade_file")  # read by tasks/apt/ only (in vars/main.yml anyway)
    if not os_file.startswith("Ubuntu"):
        needed.discard("__nvidia_driver_version_package_prebuilt")  # nvidia_driver_ubuntu_prebuilt_modules only
    assert needed - defined == set(), "%s lacks %s" % (os_file, sorted(needed - defined))


@pytest.mark.parametrize("os_file", DRIVER_OS_FILES)
def test_driver_os_file_shapes(os_file):
    data = load(os.path.join(DRIVER, "vars", os_file))
    assert data["__nvidia_driver_pkg_family"] in ("apt", "dnf")
    sources = data["__nvidia_driver_sources_supported"]
    assert set(sources) <= {"distro", "cuda_repo", "mirror"}
    # mirror is a copy of NVIDIA's CUDA repository: it is offered exactly where cuda_repo is.
    assert ("mirror" in sources) == ("cuda_repo" in sources)
    layouts = [s for s in sources if s != "mirror"]
    for table in ("__nvidia_driver_branches", "__nvidia_driver_packages", "__nvidia_driver_version_package",
                  "__nvidia_driver_fabricmanager_package", "__nvidia_driver_packages_open",
                  "__nvidia_driver_version_package_open"):
        assert set(data[table]) == set(layouts), (table, data[table])
    for layout in layouts:
        branches = data["__nvidia_driver_branches"][layout]
        assert branches and all(re.match(r"^[0-9]{3}$", b) and isinstance(b, str) for b in branches), branches
        assert branches == sorted(branches)
        packages = data["__nvidia_driver_packages"][layout]
        assert data["__nvidia_driver_version_package"][layout] in packages
        assert data["__nvidia_driver_version_package_open"][layout] in data["__nvidia_driver_packages_open"][layout]
        for package in packages + data["__nvidia_driver_packages_open"][layout]:
            # Debian/RPM package names: lower case, digits, + - . and the {branch} placeholder only.
            assert re.match(r"^[a-z0-9][a-z0-9+.{}-]*$", package.replace("{branch}", "535")), package
    assert data["__nvidia_driver_initramfs_command"][0] in ("update-initramfs", "dracut")
    assert data["__nvidia_driver_mok_certificate"].startswith("/var/lib/")
    assert "{kernel}" in data["__nvidia_driver_kernel_headers_package"]


@pytest.mark.parametrize("os_file, pattern", [
    ("Debian-12.yml", r"^nvidia-driver$"),
    ("Debian-13.yml", r"^nvidia-driver$"),
    ("Ubuntu-22.04.yml", r"^nvidia-driver-(\{branch\}|\d{3})-server$"),
    ("Ubuntu-24.04.yml", r"^nvidia-driver-(\{branch\}|\d{3})-server$"),
    ("RedHat-9.yml", r"^nvidia-driver$"),
])
def test_driver_package_names_follow_the_os_pattern(os_file, pattern):
    data = load(os.path.join(DRIVER, "vars", os_file))
    for layout, packages in data["__nvidia_driver_packages"].items():
        assert any(re.match(pattern, p) for p in packages), (layout, packages)
        if os_file.startswith("Ubuntu"):
            # Every Ubuntu package is branch-specific; rendered for a branch it names it.
            rendered = [p.replace("{branch}", "550") for p in packages]
            assert all("-550-server" in p for p in rendered), rendered


# Open kernel module packages per OS and source (Debian: checked with apt-cache against bookworm/trixie contrib;
# Ubuntu: the -server-open packages; RHEL 9: the nvidia-driver:<branch>-open module stream).
@pytest.mark.parametrize("os_file, layout, kernel_package, open_kernel_package", [
    ("Debian-12.yml", "distro", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms"),
    ("Debian-12.yml", "cuda_repo", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms"),
    ("Debian-13.yml", "distro", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms"),
    ("Debian-13.yml", "cuda_repo", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms"),
    ("Ubuntu-22.04.yml", "distro", "nvidia-dkms-{branch}-server", "nvidia-dkms-{branch}-server-open"),
    ("Ubuntu-24.04.yml", "cuda_repo", "nvidia-dkms-{branch}-server", "nvidia-dkms-{branch}-server-open"),
    ("RedHat-9.yml", "cuda_repo", "kmod-nvidia-latest-dkms", "kmod-nvidia-open-dkms"),
])
def test_open_flavour_swaps_only_the_kernel_module_packages(os_file, layout, kernel_package, open_kernel_package):
    data = load(os.path.join(DRIVER, "vars", os_file))
    proprietary = data["__nvidia_driver_packages"][layout]
    opened = data["__nvidia_driver_packages_open"][layout]
    assert kernel_package in proprietary and kernel_package not in opened
    assert open_kernel_package in opened and open_kernel_package not in proprietary
    changed = set(proprietary) ^ set(opened)
    if os_file.startswith("Ubuntu"):
        assert changed == {kernel_package, open_kernel_package, "nvidia-driver-{branch}-server",
                           "nvidia-driver-{branch}-server-open"}
    else:
        assert changed == {kernel_package, open_kernel_package}


def test_open_flavour_module_names_and_stream():
    assert load(os.path.join(DRIVER, "vars", "Debian-12.yml"))["__nvidia_driver_dkms_module_open"] == "nvidia-current-open"
    assert load(os.path.join(DRIVER, "vars", "RedHat-9.yml"))["__nvidia_driver_module_stream_open"] == "nvidia-driver:{branch}-open"
    for os_file in ("Ubuntu-22.04.yml", "Ubuntu-24.04.yml"):
        assert load(os.path.join(DRIVER, "vars", os_file))["__nvidia_driver_version_package_prebuilt"] == \
            "nvidia-utils-{branch}-server"


@pytest.mark.parametrize("os_file", ["Debian-12.yml", "Debian-13.yml"])
def test_debian_hint_names_contrib(os_file):
    # nvidia-persistenced, nvidia-installer-cleanup and nvidia-open-kernel-dkms live in contrib.
    hint = load(os.path.join(DRIVER, "vars", os_file))["__nvidia_driver_distro_hint"]
    assert "contrib, non-free and non-free-firmware" in hint


def test_debian_distro_branches_match_the_archive():
    # bookworm carries 535.x, trixie 550.x (brief section 2).
    assert load(os.path.join(DRIVER, "vars", "Debian-12.yml"))["__nvidia_driver_branches"]["distro"] == ["535"]
    assert load(os.path.join(DRIVER, "vars", "Debian-13.yml"))["__nvidia_driver_branches"]["distro"] == ["550"]


def test_dnf_signature_policy_matches_each_publisher():
    """NVIDIA signs the CUDA repository's RPMs and the toolkit repository's repomd.xml (their .repo files)."""
    assert load(os.path.join(DRIVER, "vars", "RedHat-9.yml"))["__nvidia_driver_repo_dnf_signed"] == ["packages"]
    assert load(os.path.join(TOOLKIT, "vars", "RedHat.yml"))["__container_toolkit_repo_dnf_signed"] == ["metadata"]


def test_one_repository_task_file_for_both_roles():
    """Both roles add their repository through gpu_native.fleet._signed_repository, never on their own."""
    for role in (DRIVER, TOOLKIT):
        text = role_text(role)
        assert "gpu_native.fleet._signed_repository" in text
        for own_copy in ("yum_repository", "--error-on=any", "signed-by=", "get_url"):
            assert own_copy not in text, (role, own_copy)
    shared = role_text(os.path.join(ROOT, "roles", "_signed_repository"))
    assert "--error-on=any" in shared and "signed-by=" in shared and "repo_gpgcheck" in shared


def test_rhel_uses_the_dkms_module_stream_and_no_distro_source():
    data = load(os.path.join(DRIVER, "vars", "RedHat-9.yml"))
    assert data["__nvidia_driver_module_stream"] == "nvidia-driver:{branch}-dkms"
    assert "distro" not in data["__nvidia_driver_sources_supported"]
    assert data["__nvidia_driver_repo_file"].startswith("/etc/yum.repos.d/")


@pytest.mark.parametrize("os_file", DRIVER_OS_FILES)
def test_driver_repo_urls_and_keyrings(os_file):
    data = load(os.path.join(DRIVER, "vars", os_file))
    slug = {"Debian-12.yml": "debian12", "Debian-13.yml": "debian13", "Ubuntu-22.04.yml": "ubuntu2204",
            "Ubuntu-24.04.yml": "ubuntu2404", "RedHat-9.yml": "rhel9"}[os_file]
    url = urlparse(render(data["__nvidia_driver_cuda_repo_url"]))
    assert (url.scheme, url.netloc) == ("https", "developer.download.nvidia.com")
    assert url.path == "/compute/cuda/repos/%s/x86_64/" % slug
    key = urlparse(render(data["__nvidia_driver_cuda_repo_key_url"]))
    assert key.scheme == "https" and key.path.startswith(url.path) and re.search(r"/[0-9A-Fa-f]{8}\.pub$", key.path)
    keyring = data["__nvidia_driver_repo_keyring"]
    if data["__nvidia_driver_pkg_family"] == "apt":
        # signed-by keyring in apt's documented place, ASCII-armoured (.asc), never trusted.gpg(.d).
        assert re.match(r"^/etc/apt/keyrings/[a-z0-9-]+\.asc$", keyring)
        assert re.match(r"^/etc/apt/sources\.list\.d/[a-z0-9-]+\.list$", data["__nvidia_driver_repo_file"])
    else:
        assert keyring.startswith("/etc/pki/rpm-gpg/RPM-GPG-KEY-")


def test_cuda_arch_mapping_in_main_vars():
    main = load(os.path.join(DRIVER, "vars", "main.yml"))
    assert "'aarch64': 'sbsa'" in main["__nvidia_driver_cuda_arch"]


def test_defaults_are_documented_in_argument_specs():
    for role, prefix in ((DRIVER, "nvidia_driver_"), (TOOLKIT, "container_toolkit_")):
        defaults = load(os.path.join(role, "defaults", "main.yml"))
        options = load(os.path.join(role, "meta", "argument_specs.yml"))["argument_specs"]["main"]["options"]
        assert set(defaults) == set(options), set(defaults) ^ set(options)
        assert all(name.startswith(prefix) for name in defaults)
        for name, spec in options.items():
            if "default" in spec and isinstance(defaults[name], (bool, int, list, dict)) or name.endswith("_source"):
                assert spec["default"] == defaults[name], name


@pytest.mark.parametrize("os_file", ["Debian.yml", "RedHat.yml"])
def test_toolkit_os_family_files(os_file):
    data = load(os.path.join(TOOLKIT, "vars", os_file))
    defined = set(load(os.path.join(TOOLKIT, "vars", "main.yml"))) | set(data)
    needed = names_read(TOOLKIT, "__container_toolkit_") - names_set_inside(TOOLKIT, "__container_toolkit_")
    if data["__container_toolkit_pkg_family"] == "dnf":
        needed.discard("__container_toolkit_auto_upgrade_file")  # apt.yml only
    else:
        needed.discard("__container_toolkit_repo_dnf_signed")  # dnf.yml only
    assert needed - defined == set(), sorted(needed - defined)
    url = data["__container_toolkit_repo_url_nvidia"]
    assert url.startswith("https://nvidia.github.io/libnvidia-container/stable/")
    if data["__container_toolkit_pkg_family"] == "apt":
        assert url.endswith("/deb/$(ARCH)")
        assert re.match(r"^/etc/apt/keyrings/[a-z0-9-]+\.asc$", data["__container_toolkit_keyring"])
    else:
        assert url.endswith("/rpm/$basearch")
        assert data["__container_toolkit_keyring"].startswith("/etc/pki/rpm-gpg/")


def test_toolkit_packages_are_the_four_of_one_release():
    main = load(os.path.join(TOOLKIT, "vars", "main.yml"))
    assert main["__container_toolkit_packages"] == [
        "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]
    assert main["__container_toolkit_key_url_nvidia"] == "https://nvidia.github.io/libnvidia-container/gpgkey"
