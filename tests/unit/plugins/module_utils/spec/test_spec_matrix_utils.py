"""spec_matrix: schema errors, profile selection, judging and the compatibility lookup."""
import copy

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import spec_matrix as sm
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.versions import parse_constraint

from spec_matrix_support import FakeTools, H100_PROFILE, h100_matrix, h100_tools, make_root, node_facts


@pytest.fixture
def h100_root(tmp_path):
    return make_root(tmp_path, "root_h100")


@pytest.fixture
def nogpu_root(tmp_path):
    return make_root(tmp_path, "root_nogpu")


def errors_of(matrix):
    with pytest.raises(sm.SpecMatrixError) as info:
        sm.validate_matrix(matrix)
    return info.value.errors


# ---- schema -----------------------------------------------------------------
def test_every_section_is_optional():
    assert sm.validate_matrix({})["profiles"] == {}
    assert sm.validate_matrix({"profiles": {"empty": {}}})["profiles"] == {"empty": {}}
    full = sm.validate_matrix(h100_matrix())
    assert list(full["profiles"]["h100-serving"]) == [
        "match", "os", "kernel", "driver", "cuda", "container_toolkit", "containerd", "device_plugin", "kubernetes",
        "gpu", "kernel_modules", "sysctl", "packages", "services"]
    assert full["profiles"]["h100-serving"]["gpu"]["ecc_mode"].text == "enabled"  # true -> enabled


def test_profile_order_is_kept():
    matrix = sm.validate_matrix({"profiles": {"zeta": {}, "alpha": {}, "mid": {}}})
    assert list(matrix["profiles"]) == ["zeta", "alpha", "mid"]


@pytest.mark.parametrize("matrix, expected", [
    ([], "matrix: expected a mapping, got list"),
    ({"profile": {}}, "profile: unknown key; allowed: version, profiles, compatibility, compatibility_extra"),
    ({"version": 2}, "version: unsupported matrix version 2; this collection reads version 1"),
    ({"profiles": ["a"]}, "profiles: expected a mapping, got list"),
    ({"profiles": {"h100": "x"}}, "profiles.h100: expected a mapping, got string"),
    ({"profiles": {"h100-serving": {"sysctl_typo": {}}}},
     "profiles.h100-serving.sysctl_typo: unknown key; allowed: description, match, os,"),
    ({"profiles": {"p": {"description": 3}}}, "profiles.p.description: expected a string, got integer"),
    ({"profiles": {"p": {"match": "h100"}}}, "profiles.p.match: expected a mapping, got string"),
    ({"profiles": {"p": {"match": {}}}}, "profiles.p.match: empty match; remove it or name at least one of"),
    ({"profiles": {"p": {"match": {"gpu_name": "x"}}}},
     "profiles.p.match.gpu_name: unknown key; allowed: gpu_product, gpu_count, os_id, os_version, hostname"),
    ({"profiles": {"p": {"match": {"gpu_count": ">=x"}}}},
     "profiles.p.match.gpu_count: bad constraint '>=x' at profiles.p.match.gpu_count: 'x' is not a whole number"),
    ({"profiles": {"p": {"kernel": "5.15"}}}, "profiles.p.kernel: expected a mapping, got string"),
    ({"profiles": {"p": {"kernel": {"version": "5.15"}}}}, "profiles.p.kernel.version: unknown key; allowed: release"),
    ({"profiles": {"p": {"kernel": {"release": "=>5.15"}}}},
     "profiles.p.kernel.release: bad constraint '=>5.15' at profiles.p.kernel.release: unknown operator '=>'"),
    ({"profiles": {"p": {"containerd": {"version": ">=1.7,, <2"}}}},
     "bad constraint '>=1.7,, <2' at profiles.p.containerd.version: empty comparison between commas"),
    ({"profiles": {"p": {"driver": {"version": None}}}},
     "bad constraint None at profiles.p.driver.version: expected a string, number or boolean, got NoneType"),
    ({"profiles": {"p": {"os": {"version": 22.04}}}},
     'profiles.p.os.version: 22.04 is a YAML number, not text; quote it ("22.04") so it is compared as written'),
    ({"profiles": {"p": {"cuda": {"version": 12.10}}}}, 'profiles.p.cuda.version: 12.1 is a YAML number'),
    ({"profiles": {"p": {"os": {"id": "ubuntu", "release": "22.04"}}}},
     "profiles.p.os.release: unknown key; allowed: id, version, codename"),
    ({"profiles": {"p": {"kubernetes": {"compatibility": "yes"}}}},
     "profiles.p.kubernetes.compatibility: expected true or false, got string"),
    ({"profiles": {"p": {"gpu": {"mig_mode": "on"}}}}, "profiles.p.gpu.mig_mode: expected enabled or disabled, got 'on'"),
    ({"profiles": {"p": {"gpu": {"count": "/[/"}}}}, "profiles.p.gpu.count: bad constraint '/[/' at profiles.p.gpu.count"),
    ({"profiles": {"p": {"gpu": {"model": "H100"}}}}, "profiles.p.gpu.model: unknown key; allowed: count, product,"),
    ({"profiles": {"p": {"kernel_modules": {"blacklisted": ["nouveau"]}}}},
     "profiles.p.kernel_modules.blacklisted: unknown key; allowed: loaded, absent"),
    ({"profiles": {"p": {"kernel_modules": {"loaded": "nvidia"}}}},
     "profiles.p.kernel_modules.loaded: expected a list of names, got string"),
    ({"profiles": {"p": {"kernel_modules": {"loaded": ["nvidia", ""]}}}},
     "profiles.p.kernel_modules.loaded: expected a list of names, got list"),
    ({"profiles": {"p": {"kernel_modules": {"loaded": ["nvidia-drm"], "absent": ["nvidia_drm"]}}}},
     "profiles.p.kernel_modules: module nvidia_drm is listed both as loaded and as absent"),
    ({"profiles": {"p": {"sysctl": ["vm.max_map_count"]}}}, "profiles.p.sysctl: expected a mapping, got list"),
    ({"profiles": {"p": {"sysctl": {"vm.swappiness": ""}}}},
     "profiles.p.sysctl.vm.swappiness: bad constraint '' at profiles.p.sysctl.vm.swappiness: empty constraint"),
    ({"profiles": {"p": {"packages": {"nvidia-driver": "~>550"}}}},
     "bad constraint '~>550' at profiles.p.packages.nvidia-driver: unknown operator '~'"),
    ({"profiles": {"p": {"services": {"containerd": "started"}}}},
     "profiles.p.services.containerd: unknown service state 'started'; use one of running, stopped, enabled,"),
    ({"profiles": {"p": {"services": {"containerd": []}}}}, "profiles.p.services.containerd: unknown service state []"),
    ({"profiles": {"p": {"services": {"containerd": ["running", "stopped"]}}}},
     "profiles.p.services.containerd: states running and stopped contradict each other"),
    ({"compatibility": {"kubernetes": "1.33"}}, "compatibility: expected a list of rows, got mapping"),
    ({"compatibility_extra": "1.34"}, "compatibility_extra: expected a list of rows, got string"),
    ({"compatibility": ["1.33"]}, "compatibility[0]: expected a mapping, got string"),
    ({"compatibility": [{}]}, "compatibility[0]: empty row; a row needs at least `kubernetes`"),
    ({"compatibility": [{"driver": ">=550"}]}, "compatibility[0]: missing required key `kubernetes`"),
    ({"compatibility": [{"kubernetes": "1.33", "toolkit": ">=1.17"}]},
     "compatibility[0].toolkit: unknown key; allowed: kubernetes, device_plugin, driver,"),
    ({"compatibility_extra": [{"kubernetes": "1.34", "driver": ">= "}]},
     "bad constraint '>= ' at compatibility_extra[0].driver: operator '>=' has no version after it"),
    ({"compatibility": [{"kubernetes": "1.33", "source": 2026}]},
     "compatibility[0].source: expected a string, got integer"),
])
def test_schema_errors(matrix, expected):
    errors = errors_of(matrix)
    assert any(error.startswith(expected) or expected in error for error in errors), errors
    assert len(errors) == 1, errors


def test_all_errors_are_reported_at_once():
    matrix = h100_matrix()
    profile = matrix["profiles"]["h100-serving"]
    profile["sysctl_typo"] = {"vm.max_map_count": 1}
    profile["kernel"]["release"] = "=>5.15"
    profile["services"]["containerd"] = "up"
    errors = errors_of(matrix)
    assert errors == [
        "profiles.h100-serving.sysctl_typo: unknown key; allowed: " + ", ".join(sm.PROFILE_KEYS),
        "profiles.h100-serving.kernel.release: bad constraint '=>5.15' at profiles.h100-serving.kernel.release: "
        "unknown operator '=>'; use one of >= <= == != > <",
        "profiles.h100-serving.services.containerd: unknown service state 'up'; use one of " +
        ", ".join(sm.SERVICE_STATES) + " (or a list of them)",
    ]
    message = str(sm.SpecMatrixError(errors))
    assert "\n" not in message and message.count(";") >= 2


def test_user_matrix_is_not_modified():
    matrix = h100_matrix()
    before = copy.deepcopy(matrix)
    sm.validate_matrix(matrix)
    assert matrix == before


# ---- compatibility table -----------------------------------------------------
def test_default_table_is_the_brief():
    table = sm.validate_matrix({})["compatibility"]
    assert [row["row"]["kubernetes"] for row in table] == ["1.35", "1.34", "1.33", "1.32", "1.31"]
    assert sm.public_compatibility(table)[2]["driver"] == ">=550"
    assert all(row["row"]["source"] for row in table)


@pytest.mark.parametrize("kubelet, row", [
    ("1.33.2", "1.33"), ("v1.33.0", "1.33"), ("1.32.9", "1.32"), ("1.31.0", "1.31"),
    ("1.30.5", None), ("1.34.0", "1.34"), ("1.35.1", "1.35"), ("1.36.0", None), ("1.3", None), (None, None),
])
def test_lookup_in_the_default_table(kubelet, row):
    found = sm.find_compatibility_row(sm.validate_matrix({})["compatibility"], kubelet)
    assert (found["row"]["kubernetes"] if found else None) == row


def test_rows_can_be_added_in_front_or_the_table_replaced():
    extra = sm.validate_matrix({"compatibility_extra": [{"kubernetes": ">=1.34, <1.35", "driver": ">=570"}]})
    assert [r["row"]["kubernetes"] for r in extra["compatibility"]] == [
        ">=1.34, <1.35", "1.35", "1.34", "1.33", "1.32", "1.31"]
    assert sm.find_compatibility_row(extra["compatibility"], "1.34.1")["row"]["driver"] == ">=570"
    replaced = sm.validate_matrix({"compatibility": [{"kubernetes": "/^1\\.3[0-3]\\./", "driver": ">=535"}]})
    assert len(replaced["compatibility"]) == 1
    assert sm.find_compatibility_row(replaced["compatibility"], "1.30.1")["row"]["driver"] == ">=535"
    assert sm.validate_matrix({"compatibility": []})["compatibility"] == []


def by_key(results):
    return dict(("%s.%s" % (r["check"], r["name"]), r) for r in results)


def test_compatibility_pass_on_the_h100_node(h100_root):
    facts = node_facts(h100_root, h100_tools())
    matrix = sm.validate_matrix(h100_matrix())
    results = by_key(sm.judge_compatibility(matrix["compatibility"], facts, matrix["profiles"]["h100-serving"]))
    assert results["compatibility.row"]["actual"] == "kubernetes 1.33"
    assert results["compatibility.row"]["note"] == "kubelet 1.33.2"
    assert results["compatibility.driver"] == {
        "check": "compatibility", "name": "driver", "expected": ">=550", "actual": "565.57.01", "status": "pass",
        "note": "row kubernetes 1.33"}
    assert results["compatibility.container_toolkit"]["actual"] == "1.17.3"
    assert results["compatibility.device_plugin"]["actual"] == "0.17.1"
    assert all(r["status"] == "pass" for r in results.values())


def test_compatibility_failures_name_the_row(h100_root):
    facts = node_facts(h100_root, h100_tools(nvidia_ctk=(0, "NVIDIA Container Toolkit CLI version 1.16.2\n", "")))
    profile = sm.validate_matrix(h100_matrix(device_plugin={"version": "0.16.2"}))["profiles"]["h100-serving"]
    table = sm.validate_matrix({})["compatibility"]
    results = by_key(sm.judge_compatibility(table, facts, profile))
    assert results["compatibility.container_toolkit"]["status"] == "fail"
    assert results["compatibility.container_toolkit"]["actual"] == "1.16.2"
    assert results["compatibility.device_plugin"]["status"] == "fail"
    assert sm.drift_line(results["compatibility.device_plugin"]) == (
        "compatibility.device_plugin: expected >=0.17, got 0.16.2 (row kubernetes 1.33; declared in profile)")


def test_no_row_applies(h100_root):
    facts = node_facts(h100_root, h100_tools(kubelet=(0, "Kubernetes v1.29.4\n", "")))
    table = sm.validate_matrix({})["compatibility"]
    results = sm.judge_compatibility(table, facts, {})
    assert results == [{"check": "compatibility", "name": "row", "expected": "a row for the node's Kubernetes version",
                        "actual": None, "status": "fail",
                        "note": "no row covers kubernetes 1.29.4 (rows: 1.35, 1.34, 1.33, 1.32, 1.31)"}]


def test_compatibility_without_kubelet_or_declared_plugin(h100_root, nogpu_root):
    results = sm.judge_compatibility(sm.validate_matrix({})["compatibility"],
                                     node_facts(nogpu_root, FakeTools({})), {})
    assert [(r["name"], r["status"], r["note"]) for r in results] == [
        ("row", "fail", "kubelet not installed; no row can be chosen")]
    profile = sm.validate_matrix(h100_matrix(device_plugin={"version": ">=0.17"}))["profiles"]["h100-serving"]
    results = by_key(sm.judge_compatibility(sm.validate_matrix({})["compatibility"],
                                            node_facts(h100_root, h100_tools()), profile))
    assert results["compatibility.device_plugin"]["status"] == "unknown"
    assert "declare the deployed plugin as device_plugin.version" in results["compatibility.device_plugin"]["note"]


def test_compatibility_components_missing_on_node(nogpu_root):
    tools = FakeTools({"kubelet": (0, "Kubernetes v1.32.1\n", "")})
    table = sm.validate_matrix({"compatibility": [{"kubernetes": "1.32", "driver": ">=535", "cuda": ">=12.2",
                                                   "containerd": ">=1.7"}]})["compatibility"]
    results = by_key(sm.judge_compatibility(table, node_facts(nogpu_root, tools), {}))
    assert results["compatibility.driver"]["status"] == "fail"
    assert results["compatibility.driver"]["note"] == (
        "row kubernetes 1.32; driver not loaded: no /proc/driver/nvidia/version")
    assert results["compatibility.cuda"]["status"] == "fail"
    assert results["compatibility.containerd"]["note"] == "row kubernetes 1.32; containerd not installed"


# ---- profile selection -----------------------------------------------------------
def test_selection_by_option_match_and_default(h100_root):
    facts = node_facts(h100_root, h100_tools())
    matrix = sm.validate_matrix({"profiles": {
        "a100-training": {"match": {"gpu_product": "/A100/"}},
        "h100-serving": {"match": {"gpu_product": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "os_id": "ubuntu"}},
        "fallback": {},
    }})
    assert sm.select_profile(matrix, facts) == ("h100-serving", "match")
    assert sm.select_profile(matrix, facts, "a100-training") == ("a100-training", "requested")
    matrix["profiles"]["h100-serving"]["match"]["gpu_count"] = parse_constraint(4)
    assert sm.select_profile(matrix, facts) == ("fallback", "default")
    only = sm.validate_matrix({"profiles": {"only": {"os": {"id": "ubuntu"}}}})
    assert sm.select_profile(only, facts) == ("only", "default")


def test_first_matching_profile_wins(h100_root):
    facts = node_facts(h100_root, h100_tools())
    matrix = sm.validate_matrix({"profiles": {
        "hostnames": {"match": {"hostname": "/^gpu-h100-/"}},
        "product": {"match": {"gpu_product": "/H100/"}},
    }})
    assert sm.select_profile(matrix, facts) == ("hostnames", "match")


@pytest.mark.parametrize("profiles, requested, message", [
    ({}, None, "the matrix has no profiles. Fix: add at least one entry under gpu_native_spec_matrix.profiles"),
    ({"a": {}}, "b", "profile 'b' is not in the matrix (profiles: a). Fix: pass one of those names as profile"),
    ({"a": {"match": {"gpu_product": "/A100/"}}}, None,
     "no profile matches this node (gpu_product=NVIDIA H100 80GB HBM3; os=ubuntu 22.04). "
     "Fix: pass profile=<name> or adjust the profiles' match"),
    ({"a": {}, "b": {}}, None, "no profile matches this node (os=ubuntu 22.04) and 2 profiles have no match (a, b), "
                               "so none is the default. Fix: pass profile=<name> or adjust the profiles' match"),
])
def test_selection_errors(h100_root, profiles, requested, message):
    facts = node_facts(h100_root, h100_tools())
    with pytest.raises(sm.ProfileSelectionError) as info:
        sm.select_profile(sm.validate_matrix({"profiles": profiles}), facts, requested)
    assert str(info.value) == message


def test_selection_error_without_driver(nogpu_root):
    facts = node_facts(nogpu_root, FakeTools({}))
    matrix = sm.validate_matrix({"profiles": {"h100": {"match": {"gpu_product": "/H100/"}}}})
    with pytest.raises(sm.ProfileSelectionError) as info:
        sm.select_profile(matrix, facts)
    assert "gpu_product=none (driver not loaded)" in str(info.value)


# ---- judging ------------------------------------------------------------------
def test_h100_profile_passes_in_full(h100_root):
    tools = h100_tools()
    facts = node_facts(h100_root, tools)
    matrix = sm.validate_matrix(h100_matrix())
    results = sm.judge_profile(matrix, "h100-serving", facts)
    failing = [sm.drift_line(r) for r in results if r["status"] != "pass"]
    assert failing == []
    summary = sm.summarize(results)
    assert summary == {"pass": 35, "fail": 0, "unknown": 0, "total": 35}
    assert [r["check"] for r in results][:3] == ["os", "os", "os"]
    assert results[-1]["check"] == "compatibility"
    keyed = by_key(results)
    assert keyed["kernel_modules.ext4"]["actual"] == "built-in"
    assert keyed["kernel_modules.nvidia-peermem"]["actual"] == "loaded"
    assert keyed["packages.nvidia-fabricmanager-565"]["actual"] == "565.57.01-1"
    assert keyed["services.nvidia-fabricmanager"]["actual"] == "running, enabled"
    assert keyed["gpu.count"]["actual"] == 8
    assert keyed["gpu.ecc_mode"]["expected"] == "enabled"
    assert keyed["sysctl.net.bridge.bridge-nf-call-iptables"]["expected"] == "1"
    assert len(tools.calls) == 5
    assert all(set(r) == {"check", "name", "expected", "actual", "status", "note"} for r in results)


def test_drift_is_reported_item_by_item(h100_root):
    tools = h100_tools(containerd=(0, "containerd containerd.io 2.0.2 c507a02\n", ""))
    facts = node_facts(h100_root, tools)
    profile = copy.deepcopy(H100_PROFILE)
    profile["sysctl"]["vm.max_map_count"] = "1048576"
    profile["kernel_modules"]["absent"].append("nvidia_drm")
    profile["packages"]["unattended-upgrades"] = "absent"
    profile["packages"]["nvidia-dcgm"] = "present"
    profile["services"]["nvidia-persistenced"] = "stopped"
    profile["gpu"]["count"] = ">=16"
    profile["kernel"]["release"] = ">=5.15.0-110"
    matrix = sm.validate_matrix({"profiles": {"h100": profile}})
    results = sm.judge_profile(matrix, "h100", facts)
    lines = [sm.drift_line(r) for r in results if r["status"] != "pass"]
    assert lines == [
        "kernel.release: expected >=5.15.0-110, got 5.15.0-105-generic",
        "containerd.version: expected >=1.7, <2.0, got 2.0.2",
        "kernel_modules.nvidia_drm: expected not loaded, got loaded",
        "sysctl.vm.max_map_count: expected 1048576, got 262144",
        "packages.unattended-upgrades: expected absent, got 2.8ubuntu1 (installed)",
        "packages.nvidia-dcgm: expected present, got null (not installed)",
        "services.nvidia-persistenced: expected stopped, got running, enabled",
        "gpu.count: expected >=16, got 8",
    ]
    message = sm.drift_message("h100", results)
    assert message.startswith("spec drift against profile h100: 8 item(s) not compliant: kernel.release: expected")
    assert "\n" not in message and message.endswith("correct gpu_native_spec_matrix if the profile is wrong")


def test_gpu_fields_per_gpu(h100_root):
    fake = {"driver_version": "550.127.08", "cuda_version": "12.4", "attached_gpus": 3, "gpus": [
        {"index": i, "pci_bus_id": "0000:%02x:00.0" % (0x18 + i), "product": "NVIDIA H200",
         "persistence_mode": "Enabled" if i < 2 else "Disabled", "ecc_mode": "Enabled", "ecc_mode_pending": "Enabled",
         "mig_mode": "Disabled", "mig_mode_pending": "Enabled" if i == 1 else "Disabled", "memory_total_mib": 143771}
        for i in range(3)]}
    facts = node_facts(h100_root, h100_tools(), parser=lambda text: fake)
    matrix = sm.validate_matrix({"profiles": {"h200": {"gpu": {
        "count": 3, "product": "NVIDIA H200", "persistence_mode": "enabled", "mig_mode": "disabled",
        "memory_total_mib": ">=140000"}}}})
    results = by_key(sm.judge_profile(matrix, "h200", facts))
    assert results["gpu.persistence_mode"]["status"] == "fail"
    assert results["gpu.persistence_mode"]["actual"] == "enabled x2, disabled x1"
    assert results["gpu.persistence_mode"]["note"] == "GPU 2 (0000:1a:00.0): disabled"
    assert results["gpu.mig_mode"]["status"] == "pass"
    assert results["gpu.mig_mode"]["note"] == "pending change on GPU 1 (takes effect after a GPU reset)"
    assert results["gpu.memory_total_mib"]["actual"] == 143771
    assert results["gpu.count"]["note"] == "8 NVIDIA GPU(s) on the PCI bus but nvidia-smi lists 3"
    assert results["gpu.count"]["status"] == "pass"


def test_gpu_items_without_driver_are_failures_with_a_reason(nogpu_root):
    facts = node_facts(nogpu_root, FakeTools({}))
    matrix = sm.validate_matrix(h100_matrix())
    results = sm.judge_profile(matrix, "h100-serving", facts)
    keyed = by_key(results)
    for key in ("driver.version", "cuda.version", "gpu.count", "gpu.product", "gpu.mig_mode"):
        assert keyed[key]["status"] == "fail" and keyed[key]["actual"] is None, key
    assert keyed["driver.version"]["note"] == "driver not loaded: no /proc/driver/nvidia/version"
    assert keyed["gpu.count"]["note"] == "driver not loaded; 1 NVIDIA GPU(s) on the PCI bus"
    assert keyed["cuda.version"]["note"] == "driver not loaded"
    assert keyed["kernel_modules.nouveau"]["actual"] == "loaded"
    assert keyed["services.nvidia-persistenced"]["status"] == "unknown"
    assert keyed["packages.nvidia-container-toolkit"]["status"] == "unknown"
    assert keyed["sysctl.kernel.numa_balancing"]["status"] == "fail"
    assert keyed["sysctl.kernel.numa_balancing"]["note"] == "no such key under /proc/sys"
    assert sm.drift_line(keyed["services.nvidia-persistenced"]) == (
        "services.nvidia-persistenced: expected running, got unknown (systemd is not running on this host)")


def test_gpu_items_unknown_when_nvidia_smi_fails(h100_root):
    facts = node_facts(h100_root, h100_tools(nvidia_smi=(15, "Unable to determine the device handle for GPU "
                                                             "0000:0B:00.0: Unknown Error\n", "")))
    matrix = sm.validate_matrix({"profiles": {"p": {"gpu": {"count": 8, "product": "/H100/"}, "cuda": {
        "version": ">=12"}}}})
    results = by_key(sm.judge_profile(matrix, "p", facts))
    assert results["gpu.count"]["status"] == "unknown"
    assert results["gpu.count"]["note"].startswith("nvidia-smi failed: Unable to determine the device handle")
    assert results["cuda.version"]["status"] == "unknown"


def test_no_gpus_listed(h100_root):
    facts = node_facts(h100_root, h100_tools(), parser=lambda text: {"gpus": [], "attached_gpus": 0})
    matrix = sm.validate_matrix({"profiles": {"p": {"gpu": {"count": 8, "product": "/H100/"}}}})
    results = by_key(sm.judge_profile(matrix, "p", facts))
    assert results["gpu.count"]["actual"] == 0 and results["gpu.count"]["status"] == "fail"
    assert results["gpu.product"]["note"] == "nvidia-smi lists no GPUs"


@pytest.mark.parametrize("states, info, expected", [
    (["running"], {"load_state": "loaded", "active_state": "active", "unit_file_state": "disabled"}, "pass"),
    (["running", "enabled"], {"load_state": "loaded", "active_state": "active", "unit_file_state": "disabled"}, "fail"),
    (["stopped"], {"load_state": "loaded", "active_state": "failed", "unit_file_state": "enabled"}, "pass"),
    (["disabled"], {"load_state": "loaded", "active_state": "inactive", "unit_file_state": "disabled"}, "pass"),
    (["enabled"], {"load_state": "loaded", "active_state": "inactive", "unit_file_state": "static"}, "pass"),
    (["masked"], {"load_state": "masked", "active_state": "inactive", "unit_file_state": "masked"}, "pass"),
    (["absent"], {"load_state": "not-found", "active_state": "inactive", "unit_file_state": None}, "pass"),
    (["present"], {"load_state": "not-found", "active_state": "inactive", "unit_file_state": None}, "fail"),
    (["absent"], {"load_state": "loaded", "active_state": "inactive", "unit_file_state": "disabled"}, "fail"),
    (["masked"], {"load_state": "loaded", "active_state": "inactive", "unit_file_state": "disabled"}, "fail"),
    (["stopped"], {"load_state": "loaded", "active_state": "active", "unit_file_state": "disabled"}, "fail"),
    (["disabled"], {"load_state": "loaded", "active_state": "active", "unit_file_state": "enabled"}, "fail"),
    (["present", "stopped"], {"load_state": "loaded", "active_state": "inactive", "unit_file_state": "enabled"},
     "pass"),
])
def test_service_states(h100_root, states, info, expected):
    facts = node_facts(h100_root, FakeTools({}))
    facts._cache["services"] = {"x.service": info}
    matrix = sm.validate_matrix({"profiles": {"p": {"services": {"x": states}}}})
    [result] = sm.judge_profile(matrix, "p", facts)
    assert result["status"] == expected
    assert result["expected"] == ", ".join(states)


def test_kubernetes_compatibility_can_be_switched_off(h100_root):
    facts = node_facts(h100_root, h100_tools())
    matrix = sm.validate_matrix({"profiles": {"p": {"kubernetes": {"version": "1.33", "compatibility": False}}}})
    results = sm.judge_profile(matrix, "p", facts)
    assert [(r["check"], r["status"]) for r in results] == [("kubernetes", "pass")]


def test_matrix_wanted_names():
    matrix = sm.validate_matrix({"profiles": {"a": {"packages": {"x": "1"}, "sysctl": {"vm.a": 1}},
                                              "b": {"services": {"s": "running"}, "packages": {"y": "present"}}}})
    assert sm.matrix_wanted_names(matrix) == (["x", "y"], ["s"], ["vm.a"])
