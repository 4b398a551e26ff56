# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""inventories/example works with the roles as they ship (issue 25, item 8).

What a node of each group gets from the roles (the group's variables from ``ansible-inventory --list``, else the
role's defaults/main.yml) must be what the group's spec profile requires, so that onboard.yml leaves a node that
preflight's spec gate and compliance.yml pass: the driver version and branch, the NVIDIA Container Toolkit
version, the kernel modules, the services the driver role runs, every sysctl (gpu_native.fleet.node_sysctl), and
the shipped compatibility table. The matrix is read with the collection's own loader
(plugins/module_utils/spec/spec_matrix.py), so a constraint means here what it means on a node. And
preflight_spec_profile and compliance_profile both default to the inventory's gpu_native_spec_profile.

Before this issue the example installed the newest driver branch (nvidia_driver_version unset) against profiles
that pin 550 / 535 / 570, did not load nvidia_peermem for a100-training, and no role set the profiles' sysctls.
"""
import json
import os
import re
import subprocess

import pytest
import yaml

import testlib

testlib.link_collection()

from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import spec_matrix  # noqa: E402

INVENTORY = os.path.join(testlib.REPO_ROOT, "inventories", "example")
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")


def _yaml(*parts):
    path = os.path.join(testlib.REPO_ROOT, *parts)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def _defaults(role):
    return _yaml("roles", role, "defaults", "main.yml")


@pytest.fixture(scope="module")
def hostvars():
    proc = subprocess.run([os.path.join(testlib.VENV_BIN, "ansible-inventory"), "-i", INVENTORY, "--list"],
                          env=testlib.ansible_env(), cwd=testlib.REPO_ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120, check=True)
    found = json.loads(proc.stdout)["_meta"]["hostvars"]
    assert len(found) == 14, sorted(found)
    return found


@pytest.fixture(scope="module")
def matrix(hostvars):
    matrices = set(json.dumps(h["gpu_native_spec_matrix"], sort_keys=True) for h in hostvars.values())
    assert len(matrices) == 1  # one fleet-wide matrix (group_vars/gpu_nodes)
    return spec_matrix.validate_matrix(json.loads(matrices.pop()))


def _hosts_by_profile(hostvars):
    """{profile name: one host's variables}; every host of a profile has the same variables in the example."""
    groups = {}
    for host in sorted(hostvars):
        variables = hostvars[host]
        groups.setdefault(variables.get("gpu_native_spec_profile"), []).append(variables)
    for name, members in groups.items():
        assert all(m == members[0] for m in members), name
    return dict((name, members[0]) for name, members in groups.items())


def _effective(variables, role, name):
    return variables[name] if name in variables else _defaults(role).get(name)


def _upstream(version):
    """535.230.02-1 / 1:535.230.02-0ubuntu1 -> the upstream version (what the tools report)."""
    text = str(version).split(":", 1)[-1]
    return text.rsplit("-", 1)[0] if "-" in text else text


def test_every_host_names_a_profile_of_the_matrix(hostvars, matrix):
    profiles = _hosts_by_profile(hostvars)
    assert None not in profiles
    assert sorted(profiles) == sorted(matrix["profiles"])  # and every profile is used by a group


def test_the_toolkit_the_profiles_require_is_the_one_the_role_installs(hostvars, matrix):
    wrong = []
    for name, variables in _hosts_by_profile(hostvars).items():
        profile = matrix["profiles"][name]
        version = _effective(variables, "container_toolkit", "container_toolkit_version")
        wanted = profile.get("container_toolkit", {}).get("version")
        if wanted is not None and not wanted.matches(_upstream(version)):
            wrong.append("%s: container_toolkit.version %s, the role installs %s" % (name, wanted, version))
        for package in TOOLKIT_PACKAGES:
            constraint = profile.get("packages", {}).get(package)
            if constraint is not None and constraint not in ("present", "absent") \
                    and not constraint.matches(version, "dpkg"):
                wrong.append("%s: packages.%s %s, the role installs %s" % (name, package, constraint, version))
    assert wrong == []


def test_the_driver_the_profiles_require_is_the_one_the_role_installs(hostvars, matrix):
    wrong = []
    for name, variables in _hosts_by_profile(hostvars).items():
        profile = matrix["profiles"][name]
        version = _effective(variables, "nvidia_driver", "nvidia_driver_version")
        branch = _effective(variables, "nvidia_driver", "nvidia_driver_branch")
        wanted = profile.get("driver", {}).get("version")
        if wanted is None:
            continue
        if not version:
            # empty: the newest branch of the OS's vars file (or whatever a node already runs), not the profile's
            wrong.append("%s: driver.version %s, nvidia_driver_version unset (branch %r)" % (name, wanted, branch))
            continue
        if not wanted.matches(_upstream(version)):
            wrong.append("%s: driver.version %s, nvidia_driver_version %s" % (name, wanted, version))
        major = _upstream(version).split(".")[0]
        for package, constraint in profile.get("packages", {}).items():
            fabricmanager = re.match(r"^nvidia-fabricmanager-(\d+)$", package)
            if fabricmanager is None:
                continue
            if fabricmanager.group(1) != major:
                wrong.append("%s: %s for a %s driver" % (name, package, major))
            if constraint not in ("present", "absent") and not constraint.matches(_upstream(version)):
                wrong.append("%s: packages.%s %s, driver %s" % (name, package, constraint, version))
    assert wrong == []


def test_the_kernel_modules_the_profiles_require_are_the_driver_roles(hostvars, matrix):
    wrong = []
    for name, variables in _hosts_by_profile(hostvars).items():
        modules = profile_modules = matrix["profiles"][name].get("kernel_modules", {})
        loaded = list(_effective(variables, "nvidia_driver", "nvidia_driver_modules"))
        if _effective(variables, "nvidia_driver", "nvidia_driver_load_peermem"):
            loaded.append("nvidia_peermem")
        missing = sorted(set(modules.get("loaded", [])) - set(loaded))
        if missing:
            wrong.append("%s: kernel_modules.loaded %s not loaded by nvidia_driver" % (name, missing))
        if "nouveau" in profile_modules.get("absent", []) \
                and not _effective(variables, "nvidia_driver", "nvidia_driver_blacklist_nouveau"):
            wrong.append("%s: nouveau must be absent, nvidia_driver_blacklist_nouveau is false" % name)
    assert wrong == []


def test_the_driver_services_the_profiles_require_are_run_by_the_role(hostvars, matrix):
    wrong = []
    for name, variables in _hosts_by_profile(hostvars).items():
        profile = matrix["profiles"][name]
        services = profile.get("services", {})
        persistence = _effective(variables, "nvidia_driver", "nvidia_driver_persistence_mode")
        if ("running" in services.get("nvidia-persistenced", [])
                or profile.get("gpu", {}).get("persistence_mode") == "enabled") and not persistence:
            wrong.append("%s: nvidia-persistenced / persistence_mode, nvidia_driver_persistence_mode false" % name)
        if "running" in services.get("nvidia-fabricmanager", []) \
                and str(_effective(variables, "nvidia_driver", "nvidia_driver_fabricmanager")).lower() == "false":
            wrong.append("%s: nvidia-fabricmanager running, nvidia_driver_fabricmanager false" % name)
    assert wrong == []


def test_every_sysctl_the_profiles_require_is_set_by_node_sysctl(hostvars, matrix):
    wrong = []
    for name, variables in _hosts_by_profile(hostvars).items():
        settings = dict(_effective(variables, "node_sysctl", "node_sysctl_settings") or {})
        settings.update(_effective(variables, "node_sysctl", "node_sysctl_extra") or {})
        for key, constraint in matrix["profiles"][name].get("sysctl", {}).items():
            value = settings.get(key)
            if value is None or not constraint.matches(str(value)):
                wrong.append("%s: sysctl.%s %s, node_sysctl sets %r" % (name, key, constraint, value))
    assert wrong == []


class _DeclaredFacts:
    """The node facts judge_compatibility reads, at the lowest version each profile allows."""

    absent = ()
    notes = {}

    def __init__(self, profile, driver, toolkit):
        self.profile, self.driver, self.toolkit = profile, driver, toolkit

    def _lowest(self, section):
        constraint = self.profile.get(section, {}).get("version")
        if constraint is None:
            return None
        if constraint.kind == "comparisons":
            floors = [str(v) for op, v in constraint.comparisons if op in (">=", "==")]
            return floors[0] if floors else None
        return constraint.text

    def kubelet_version(self):
        return self._lowest("kubernetes")

    def driver_version(self):
        return self.driver

    def container_toolkit(self):
        return {"version": self.toolkit, "source": "nvidia-ctk"}

    def containerd_version(self):
        return self._lowest("containerd")

    def cuda_version(self):
        return self._lowest("cuda")


def test_the_profiles_pass_the_shipped_compatibility_table(hostvars, matrix):
    failing = []
    for name, variables in _hosts_by_profile(hostvars).items():
        profile = matrix["profiles"][name]
        facts = _DeclaredFacts(profile, _upstream(_effective(variables, "nvidia_driver", "nvidia_driver_version")),
                               _upstream(_effective(variables, "container_toolkit", "container_toolkit_version")))
        results = spec_matrix.judge_compatibility(matrix["compatibility"], facts, profile)
        failing += ["%s: %s" % (name, r) for r in results if r["status"] != "pass"]
    assert failing == []


@pytest.mark.parametrize("role, name", [("preflight", "preflight_spec_profile"), ("compliance", "compliance_profile")])
def test_the_profile_variables_default_to_gpu_native_spec_profile(role, name):
    wanted = "{{ gpu_native_spec_profile | default('') }}"
    assert _defaults(role)[name] == wanted
    specs = _yaml("roles", role, "meta", "argument_specs.yml")["argument_specs"]
    documented = [spec["options"][name] for spec in specs.values() if name in (spec.get("options") or {})]
    assert documented and all(option.get("default") == wanted for option in documented)


@pytest.mark.parametrize("document", ["README.md", os.path.join("docs", "spec_matrix.md")])
def test_the_documented_matrices_ask_for_the_toolkit_the_role_installs(document):
    """The matrix examples users copy ask for the toolkit the role installs (they said 1.17.3 against 1.18.1-1)."""
    with open(os.path.join(testlib.REPO_ROOT, document), encoding="utf-8") as handle:
        blocks = re.findall(r"```yaml\n(.*?)```", handle.read(), re.S)
    version = _upstream(_defaults("container_toolkit")["container_toolkit_version"])
    seen = []
    for block in blocks:
        data = yaml.safe_load(block)
        if not isinstance(data, dict) or "gpu_native_spec_matrix" not in data:
            continue
        for name, profile in data["gpu_native_spec_matrix"]["profiles"].items():
            wanted = (profile.get("container_toolkit") or {}).get("version")
            if wanted is not None:
                seen.append((name, wanted))
    assert seen and all(spec_matrix.validate_matrix({"profiles": {"p": {"container_toolkit": {"version": w}}}})
                        ["profiles"]["p"]["container_toolkit"]["version"].matches(version) for _name, w in seen), seen


def _mig_check(host, product, count):
    """gpu_native.fleet.mig_config on the host's mig_config / mig_config_name, templated by Ansible from the example."""
    gpus = [{"index": index, "product": product} for index in range(count)]
    args = json.dumps({"config": "{{ mig_config }}", "select": "{{ mig_config_name }}", "gpus": gpus})
    proc = subprocess.run([os.path.join(testlib.VENV_BIN, "ansible"), "-i", INVENTORY, host, "-c", "local",
                           "-m", "gpu_native.fleet.mig_config", "-a", args], env=testlib.ansible_env(),
                          cwd=testlib.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return json.loads(proc.stdout.split("=>", 1)[1])


def test_a_profile_with_mig_enabled_gets_a_layout_the_mig_role_can_apply(hostvars, matrix):
    """h200 requires gpu.mig_mode enabled: without a layout onboarding left MIG off and compliance failed."""
    wrong = []
    for name, variables in _hosts_by_profile(hostvars).items():
        gpu = matrix["profiles"][name].get("gpu", {})
        layout = _effective(variables, "mig", "mig_config_name")
        mig_mode = gpu["mig_mode"].text if "mig_mode" in gpu else None
        if mig_mode != "enabled":
            if layout:
                wrong.append("%s: mig_mode %s, but mig_config_name %s" % (name, mig_mode, layout))
            continue
        if not layout:
            wrong.append("%s: mig_mode enabled, mig_config_name unset (onboard.yml skips the mig role)" % name)
            continue
        if variables.get("compliance_mig_layout") not in (layout, "{{ mig_config_name }}"):
            wrong.append("%s: compliance_mig_layout %r, the layout is %s"
                         % (name, variables.get("compliance_mig_layout"), layout))
        host = sorted(h for h, v in hostvars.items() if v.get("gpu_native_spec_profile") == name)[0]
        result = _mig_check(host, gpu["product"].text, int(gpu["count"].text))
        placements = result["configs"][layout]["placements"]
        if not result["valid"] or not all(g["mig_enabled"] for entry in placements for g in entry):
            wrong.append("%s: layout %s: %s" % (name, layout, result["errors"] or placements))
    assert wrong == []
