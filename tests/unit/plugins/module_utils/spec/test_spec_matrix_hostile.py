"""spec_matrix on hostile input (issue #10 items 1, 13, 12) and the rule of each fact (issue #11).

Each test here failed on the code before the fix it guards.
"""
import json
import os

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import spec_matrix as sm
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import sysctl_relative_path
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.versions import Version
from ansible_collections.gpu_native.fleet.plugins.modules import spec_matrix as module

from spec_matrix_support import REPO, FakeTools, h100_tools, make_root, node_facts

SECRET = "root:$6$not-a-real-hash:19000:0:99999:7:::\n"


@pytest.fixture
def h100_root(tmp_path):
    return make_root(tmp_path, "root_h100")


def errors_of(matrix):
    with pytest.raises(sm.SpecMatrixError) as info:
        sm.validate_matrix(matrix)
    return info.value.errors


def run_module(monkeypatch, capsys, args, root, tools):
    monkeypatch.setattr(module, "NodeFacts", lambda: node_facts(root, tools))
    with patch_module_args(args):
        with pytest.raises(SystemExit) as info:
            module.main()
    return info.value.code, json.loads(capsys.readouterr().out)


def plant_secrets(tmp_path, root):
    """A file where ../ from the fake /proc/sys leads: both the fake root's /etc and the one above it."""
    for base in (str(tmp_path), root):
        os.makedirs(os.path.join(base, "etc"), exist_ok=True)
        with open(os.path.join(base, "etc", "shadow"), "w") as handle:
            handle.write(SECRET)


# ---- issue #10 item 1: sysctl keys name files under /proc/sys only -------------
def test_issue_payload_is_refused_before_anything_is_read(monkeypatch, capsys, tmp_path, h100_root):
    plant_secrets(tmp_path, h100_root)
    args = {"matrix": {"version": 1, "profiles": {"p": {"sysctl": {"../../../etc/shadow": "x"}}}},
            "fail_on_drift": False}
    tools = h100_tools()
    code, result = run_module(monkeypatch, capsys, args, h100_root, tools)
    assert code == 1 and result["failed"]
    assert "profiles.p.sysctl.../../../etc/shadow: sysctl key '../../../etc/shadow' contains '..'" in result["msg"]
    assert "not-a-real-hash" not in json.dumps(result)
    assert tools.calls == []


@pytest.mark.parametrize("key, reason", [
    ("../../../etc/shadow", "contains '..'"),
    ("kernel/../../../etc/shadow", "contains '..'"),
    ("vm..max_map_count", "contains '..'"),
    ("/etc/shadow", "is an absolute path"),
    ("/proc/sys/vm/max_map_count", "is an absolute path"),
    ("vm//max_map_count", "has an empty component"),
    ("vm.", "has an empty component"),
    (".vm", "has an empty component"),
    ("net/./ipv4", "has an empty component"),
    ("vm\\max_map_count", "contains '\\\\'"),
    ("vm.max\x00map", "contains '\\x00'"),
    ("vm.max\nmap", "contains '\\n'"),
    ("vm max", "contains ' '"),
    ("", "empty sysctl key"),
    ("a." * 20 + "b", "more than 16 components"),
    ("v" * 256, "longer than 255 characters"),
])
def test_bad_sysctl_keys_are_validation_errors_naming_their_path(key, reason):
    errors = errors_of({"profiles": {"p": {"sysctl": {key: "1"}}}})
    assert len(errors) == 1, errors
    assert errors[0].startswith("profiles.p.sysctl.") or errors[0].startswith("profiles.p.sysctl[")
    assert reason in errors[0]
    assert "Fix: name a sysctl as sysctl(8) does" in errors[0]


def test_odd_keys_are_named_readably():
    errors = errors_of({"profiles": {"": {"sysctl": {"a\nb": "1"}}, "q": {"bogus " * 100: 1}}})
    assert errors[0].startswith("profiles['']" + ".sysctl['a\\nb']: sysctl key"), errors
    assert errors[1].startswith("profiles.q['bogus bogus") and len(errors[1].split(": ")[0]) <= 200, errors


def test_non_string_sysctl_key_is_refused():
    errors = errors_of({"profiles": {"p": {"sysctl": {1: "1"}}}})
    assert errors == ["profiles.p.sysctl.1: a sysctl key must be a string, got int. Fix: name a sysctl as "
                      "sysctl(8) does (vm.max_map_count)"]


@pytest.mark.parametrize("key, parts", [
    ("vm.max_map_count", ["vm", "max_map_count"]),
    ("net.ipv4.ip_local_port_range", ["net", "ipv4", "ip_local_port_range"]),
    ("net/ipv4/conf/eth0.100/forwarding", ["net", "ipv4", "conf", "eth0.100", "forwarding"]),
    ("net.bridge.bridge-nf-call-iptables", ["net", "bridge", "bridge-nf-call-iptables"]),
])
def test_good_sysctl_keys(key, parts):
    assert sysctl_relative_path(key) == parts
    assert list(sm.validate_matrix({"profiles": {"p": {"sysctl": {key: "1"}}}})["profiles"]["p"]["sysctl"]) == [key]


def test_symlink_leaving_proc_sys_is_not_followed(tmp_path, h100_root):
    plant_secrets(tmp_path, h100_root)
    proc_sys = os.path.join(h100_root, "proc", "sys")
    os.makedirs(os.path.join(proc_sys, "fs"), exist_ok=True)
    os.symlink(os.path.join(h100_root, "etc", "shadow"), os.path.join(proc_sys, "fs", "leak"))
    os.symlink(os.path.join(h100_root, "etc"), os.path.join(proc_sys, "escape"))
    os.symlink("../../../etc/shadow", os.path.join(proc_sys, "relative_leak"))
    facts = node_facts(h100_root, h100_tools())
    facts.want(sysctl=["fs.leak", "escape.shadow", "escape/shadow", "relative_leak", "vm.max_map_count"])
    values = facts.sysctl()
    assert values["fs.leak"] is None and values["escape.shadow"] is None and values["relative_leak"] is None
    assert values["escape/shadow"] is None
    assert values["vm.max_map_count"] is not None
    assert facts.notes["sysctl.fs.leak"] == "refused: /proc/sys/fs/leak leads outside /proc/sys"
    assert facts.notes["sysctl.escape/shadow"] == "refused: /proc/sys/escape/shadow leads outside /proc/sys"
    assert "not-a-real-hash" not in json.dumps(facts.as_dict())
    # refused is not "absent": the judged item is unknown, not a plain drift
    assert "sysctl.fs.leak" not in facts.absent


def test_symlink_leaving_proc_sys_judged_unknown_in_the_module(monkeypatch, capsys, tmp_path, h100_root):
    plant_secrets(tmp_path, h100_root)
    os.symlink(os.path.join(h100_root, "etc", "shadow"), os.path.join(h100_root, "proc", "sys", "leak"))
    args = {"matrix": {"profiles": {"p": {"sysctl": {"leak": "x"}}}}, "fail_on_drift": False}
    code, result = run_module(monkeypatch, capsys, args, h100_root, h100_tools())
    assert code == 0
    assert result["results"] == [{"check": "sysctl", "name": "leak", "expected": "x", "actual": None,
                                  "status": "unknown", "note": "refused: /proc/sys/leak leads outside /proc/sys"}]
    assert result["facts"]["sysctl"] == {"leak": None}
    assert "not-a-real-hash" not in json.dumps(result)


def test_symlink_inside_proc_sys_and_special_files(tmp_path, h100_root):
    # (the old reader blocked for ever on the FIFO)
    proc_sys = os.path.join(h100_root, "proc", "sys")
    os.symlink(os.path.join(proc_sys, "vm", "max_map_count"), os.path.join(proc_sys, "alias"))
    os.mkfifo(os.path.join(proc_sys, "fifo"))
    facts = node_facts(h100_root, h100_tools())
    facts.want(sysctl=["alias", "fifo", "vm"])
    values = facts.sysctl()
    assert values["alias"] == facts_value(h100_root, "vm/max_map_count")
    assert values["fifo"] is None and facts.notes["sysctl.fifo"] == "refused: /proc/sys/fifo is not a regular file"
    assert values["vm"] is None  # a directory


def facts_value(root, relative):
    with open(os.path.join(root, "proc", "sys", relative)) as handle:
        return " ".join(handle.read().split())


def test_huge_sysctl_file_is_read_in_bounds(h100_root):
    with open(os.path.join(h100_root, "proc", "sys", "big"), "w") as handle:
        handle.write("1 " * 200000)
    facts = node_facts(h100_root, h100_tools())
    facts.want(sysctl=["big"])
    assert len(facts.sysctl()["big"]) <= 65536


# ---- issue #10 item 13: a value the constraint language cannot read ---------------
@pytest.mark.parametrize("profile, path", [
    ({"driver": {"version": "550.*.*"}}, "profiles.p.driver.version"),
    ({"driver": {"version": "550.*"}}, "profiles.p.driver.version"),
    ({"kernel": {"release": "5.15.*"}}, "profiles.p.kernel.release"),
    ({"packages": {"nvidia-driver-550": "550.*"}}, "profiles.p.packages.nvidia-driver-550"),
    ({"containerd": {"version": ">=1.7.*"}}, "profiles.p.containerd.version"),
])
def test_wildcard_versions_are_validation_errors(profile, path):
    errors = errors_of({"profiles": {"p": profile}})
    assert len(errors) == 1 and errors[0].startswith(path + ": bad constraint"), errors
    assert "wildcards are not supported" in errors[0]


@pytest.mark.parametrize("profile, path", [
    ({"driver": {"version": "latest"}}, "profiles.p.driver.version"),
    ({"container_toolkit": {"version": "1.17 3"}}, "profiles.p.container_toolkit.version"),
    ({"kubernetes": {"version": "one.thirty"}}, "profiles.p.kubernetes.version"),
    ({"device_plugin": {"version": "v0.17.1 "}}, None),  # fine: v-prefix and whitespace
    ({"os": {"version": "twelve"}}, "profiles.p.os.version"),
    ({"match": {"os_version": "x"}}, "profiles.p.match.os_version"),
    ({"packages": {"containerd": "new"}}, "profiles.p.packages.containerd"),
])
def test_version_fields_need_versions(profile, path):
    if path is None:
        sm.validate_matrix({"profiles": {"p": profile}})
        return
    errors = errors_of({"profiles": {"p": profile}})
    assert len(errors) == 1 and errors[0].startswith(path + ": bad constraint") and "not a version" in errors[0]


@pytest.mark.parametrize("value", ["v1.7.22", ">=v1.7, <2", ">=1.7, <V2"])
def test_package_versions_have_no_v_prefix(value):
    errors = errors_of({"profiles": {"p": {"packages": {"containerd": value}}}})
    assert errors == ["profiles.p.packages.containerd: package versions have no 'v' prefix (%s); the package "
                      "manager would compare the 'v' as a letter. Fix: drop the 'v'" % value]


def test_compatibility_rows_need_versions():
    errors = errors_of({"compatibility_extra": [{"kubernetes": "1.36", "driver": "580.*"}]})
    assert errors[0].startswith("compatibility_extra[0].driver: bad constraint '580.*'")


def test_text_fields_stay_text():
    matrix = sm.validate_matrix({"profiles": {"p": {
        "os": {"id": "ubuntu", "codename": "jammy"}, "sysctl": {"net.ipv4.ip_local_port_range": "32768 60999"},
        "gpu": {"product": "NVIDIA H100 80GB HBM3"}, "match": {"hostname": "/^gpu-a\\d+$/"}}}})
    assert matrix["profiles"]["p"]["sysctl"]["net.ipv4.ip_local_port_range"].matches("32768\t60999")


def test_regex_with_nested_repetition_is_refused():
    errors = errors_of({"profiles": {"p": {"match": {"hostname": "/^(a+)+$/"}}}})
    assert errors[0].startswith("profiles.p.match.hostname: bad constraint '/^(a+)+$/'")
    assert "nested repetition" in errors[0]


# ---- issue #12: counts from AWX surveys are strings; booleans are not counts ----------
@pytest.mark.parametrize("profile, path", [
    ({"gpu": {"count": True}}, "profiles.p.gpu.count"),
    ({"gpu": {"count": False}}, "profiles.p.gpu.count"),
    ({"match": {"gpu_count": True}}, "profiles.p.match.gpu_count"),
    ({"gpu": {"memory_total_mib": True}}, "profiles.p.gpu.memory_total_mib"),
    ({"gpu": {"count": "eight"}}, "profiles.p.gpu.count"),
    ({"gpu": {"count": -1}}, "profiles.p.gpu.count"),
    ({"gpu": {"count": ">=true"}}, "profiles.p.gpu.count"),
])
def test_counts_refuse_booleans_and_words(profile, path):
    errors = errors_of({"profiles": {"p": profile}})
    assert len(errors) == 1 and errors[0].startswith(path + ": bad constraint"), errors


@pytest.mark.parametrize("value, count, expected", [
    ("8", 8, True), (8, 8, True), (" 8 ", 8, True), ("8", 7, False), (">=4", 8, True), (">=4, <8", 8, False),
])
def test_counts_from_surveys(value, count, expected):
    constraint = sm.validate_matrix({"profiles": {"p": {"gpu": {"count": value}}}})["profiles"]["p"]["gpu"]["count"]
    assert constraint.matches(count) is expected


# ---- issue #11: each fact is compared with the rule of its source -----------------
def with_status(root, text):
    with open(os.path.join(root, "var", "lib", "dpkg", "status"), "a") as handle:
        handle.write(text)


def test_packages_compare_as_dpkg(h100_root):
    with_status(h100_root, "\nPackage: libgoodbye\nStatus: install ok installed\nVersion: 5.5.0+dfsg-2\n"
                           "\nPackage: libhello\nStatus: install ok installed\nVersion: 3.9.1+dfsg-1\n"
                           "\nPackage: libdfsg\nStatus: install ok installed\nVersion: 0.6.0+dfsg-1\n")
    matrix = sm.validate_matrix({"profiles": {"p": {"packages": {
        "libgoodbye": ">5.5.0-1", "libhello": ">3.9.1-6", "libdfsg": "<0.6.0+dfsg-6"}}}})
    results = sm.judge_profile(matrix, "p", node_facts(h100_root, h100_tools()))
    assert [(r["name"], r["status"]) for r in results] == [
        ("libgoodbye", "pass"), ("libhello", "pass"), ("libdfsg", "pass")]


def test_packages_compare_as_rpm(tmp_path):
    root = make_root(tmp_path, "root_nogpu")
    rpm_out = "nvidia-container-toolkit 0:1.17.8-1\nsnapshot 0:1.0^git20240101-1.el9\nnvidia-driver 3:575.57.08-1.el9\n"
    tools = FakeTools({"rpm": (0, rpm_out, "")})
    matrix = sm.validate_matrix({"profiles": {"p": {"packages": {
        "snapshot": ">1.0-9", "nvidia-driver": ">=575.57.08, <3:576"}, "container_toolkit": {"version": ">=1.17.8-1"}}}})
    facts = node_facts(root, tools)
    results = sm.judge_profile(matrix, "p", facts)
    assert facts.package_scheme() == "rpm"
    assert {r["name"]: r["status"] for r in results} == {"version": "pass", "snapshot": "pass",
                                                         "nvidia-driver": "pass"}


def test_toolkit_from_the_package_database_compares_as_dpkg(h100_root):
    # dpkg: 1.17.8+ds-1 > 1.17.8-5 ('+ds' after the upstream); the tool rule drops "+ds-1" as SemVer build metadata
    with_status(h100_root, "\nPackage: nvidia-container-toolkit\nStatus: install ok installed\n"
                           "Version: 1.17.8+ds-1\n")
    facts = node_facts(h100_root, h100_tools(nvidia_ctk=(1, "", "broken")))
    matrix = sm.validate_matrix({"profiles": {"p": {"container_toolkit": {"version": ">1.17.8-5"}}}})
    results = sm.judge_profile(matrix, "p", facts)
    assert facts.container_toolkit()["source"] == "package nvidia-container-toolkit"
    assert results[0]["actual"] == "1.17.8+ds-1" and results[0]["status"] == "pass", results
    assert not matrix["profiles"]["p"]["container_toolkit"]["version"].matches("1.17.8+ds-1")  # tool rule


# ---- issue #12 §4: the shipped defaults pass the shipped table ----------------------------
def _load(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


def _packed_floor():
    """The plugin version the device_plugin_config role's packed default needs (its own warning's bound)."""
    with open(os.path.join(REPO, "roles", "device_plugin_config", "tasks", "main.yml")) as handle:
        text = handle.read()
    marker = "is version('"
    return text[text.index(marker) + len(marker):].split("'")[0]


def test_shipped_defaults_pass_every_shipped_row():
    table = sm.validate_matrix({})["compatibility"]
    assert _load("roles", "device_plugin_config", "defaults", "main.yml")["device_plugin_config_allocation_policy"] \
        == "packed"
    plugin = _packed_floor()
    assert Version(plugin) == Version("0.20.0")
    toolkit_package = _load("roles", "container_toolkit", "defaults", "main.yml")["container_toolkit_version"]
    toolkit_cli = toolkit_package.rsplit("-", 1)[0]  # what nvidia-ctk --version prints
    newest_branches = []
    for name in sorted(os.listdir(os.path.join(REPO, "roles", "nvidia_driver", "vars"))):
        branches = _load("roles", "nvidia_driver", "vars", name).get("__nvidia_driver_branches") or {}
        if branches.get("cuda_repo"):
            newest_branches.append((name, max(branches["cuda_repo"], key=Version)))
    assert newest_branches
    for row in table:
        label = sm.row_label(row)
        constraints = row["constraints"]
        for newer in (plugin, "0.20.1", "0.21.0", "1.0.0"):
            assert constraints["device_plugin"].matches(newer), (label, newer)
        assert constraints["container_toolkit"].matches(toolkit_cli), (label, toolkit_cli)
        for scheme in ("dpkg", "rpm"):
            assert constraints["container_toolkit"].matches(toolkit_package, scheme), (label, toolkit_package, scheme)
        for vars_file, branch in newest_branches:
            assert constraints["driver"].matches(branch + ".0"), (label, vars_file, branch)
        assert row["row"]["source"]


def test_example_inventory_profiles_pass_the_shipped_table(h100_root):
    matrix = sm.validate_matrix(_load("inventories", "example", "group_vars", "gpu_nodes",
                                      "spec_matrix.yml")["gpu_native_spec_matrix"])
    for name, profile in matrix["profiles"].items():
        admitted = [row for row in matrix["compatibility"]
                    if profile["kubernetes"]["version"].matches(row["row"]["kubernetes"] + ".0")]
        assert admitted, name
        for row in admitted:
            for component in ("driver", "container_toolkit", "device_plugin"):
                declared = profile[component]["version"].text
                assert row["constraints"][component].matches(declared), (name, sm.row_label(row), component)


def test_kubernetes_134_and_135_have_rows():
    table = sm.validate_matrix({})["compatibility"]
    for kubelet in ("1.34.0", "v1.34.2", "1.35.0", "1.35.3"):
        row = sm.find_compatibility_row(table, kubelet)
        assert row is not None and row["row"]["kubernetes"] == kubelet.lstrip("v")[:4]
        assert row["constraints"]["device_plugin"].matches("0.20.0")
