# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_config: versions, handler, drop-in, imports edits and their undo."""
import os
import shutil
import subprocess
import sys
import tomllib

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd import containerd_config as cc
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import toml_compat

from containerd_support import BINARY, CONFIG, DROP_IN, DROP_IN_DIR, FIXTURES, after, fixture, run_plan


def effective(main_text, drop_in_text, cri):
    """What containerd < 2.0 would load: the drop-in's plugin table replaces the main one."""
    merged = tomllib.loads(main_text)
    if drop_in_text is not None:
        imported = tomllib.loads(drop_in_text)
        merged.setdefault("plugins", {})[cri] = imported["plugins"][cri]
    return merged


@pytest.mark.parametrize("name, version, cri", [
    ("v2_kubespray_style.toml", 2, "io.containerd.grpc.v1.cri"),
    ("v2_containerd16_default.toml", 2, "io.containerd.grpc.v1.cri"),
    ("v2_debian12_packaged.toml", 2, "io.containerd.grpc.v1.cri"),
    ("v3_containerd20_default.toml", 3, "io.containerd.cri.v1.runtime"),
    ("v4_containerd23_constructed.toml", 4, "io.containerd.cri.v1.runtime"),
])
def test_detects_version_and_cri_plugin(name, version, cri):
    result = run_plan(fixture(name))
    assert (result.version, result.cri_plugin) == (version, cri)
    assert result.drop_in_path == DROP_IN


@pytest.mark.parametrize("text", [None, "", "\n", "# only a comment\n"])
def test_missing_or_empty_config_is_v2(text):
    result = run_plan(text)
    assert result.version == 2
    main = after(result, CONFIG)
    assert tomllib.loads(main) == {"version": 2, "imports": [DROP_IN_DIR + "/*.toml"]}
    drop_in = tomllib.loads(after(result, DROP_IN))
    assert drop_in["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": BINARY}}


@pytest.mark.parametrize("name", ["v2_kubespray_style.toml", "v3_containerd20_default.toml",
                                  "v4_containerd23_constructed.toml", "v2_containerd16_default.toml"])
def test_drop_in_carries_whole_cri_table_plus_handler(name):
    text = fixture(name)
    result = run_plan(text)
    cri = result.cri_plugin
    source = tomllib.loads(text)["plugins"][cri]
    drop_in = tomllib.loads(after(result, DROP_IN))
    assert drop_in["version"] == tomllib.loads(text)["version"]
    table = drop_in["plugins"][cri]
    runtimes = table["containerd"]["runtimes"]
    nvidia = runtimes.pop("nvidia")
    assert table == source  # everything else copied unchanged (runc, kata, mirrors, ...)
    runc = source["containerd"]["runtimes"]["runc"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == BINARY
    assert nvidia["options"]["SystemdCgroup"] == runc["options"]["SystemdCgroup"]
    for key in runc:
        if key != "options":
            assert nvidia[key] == runc[key]


def test_systemd_cgroup_carried_over_and_runc_untouched():
    text = fixture("v2_kubespray_style.toml")
    result = run_plan(text)
    assert result.handler["options"] == {"SystemdCgroup": True, "BinaryName": BINARY}
    merged = effective(after(result, CONFIG), after(result, DROP_IN), result.cri_plugin)
    runtimes = merged["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["runc"]["options"] == {"SystemdCgroup": True, "BinaryName": "/usr/local/bin/runc"}
    assert runtimes["kata-qemu"]["runtime_type"] == "io.containerd.kata-qemu.v2"
    assert merged["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["mirrors"]["registry.example.invalid"] == {
        "endpoint": ["https://mirror.example.invalid:5000"]}


def test_main_file_edit_is_minimal_and_keeps_comments():
    text = fixture("v2_kubespray_style.toml")
    main = after(run_plan(text), CONFIG)
    added = [line for line in main.splitlines() if line not in text.splitlines()]
    assert added == [
        '# gpu_native.fleet.containerd_runtime: added imports line "/etc/containerd/conf.d/*.toml" '
        "(state=absent removes it)",
        'imports = ["/etc/containerd/conf.d/*.toml"]',
    ]
    assert main.replace("\n".join(added) + "\n", "") == text
    assert "# Kata Containers for untrusted workloads" in main


def test_existing_empty_imports_array_is_filled():
    text = fixture("v2_containerd16_default.toml")
    main = after(run_plan(text), CONFIG)
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in main
    assert tomllib.loads(main)["imports"] == [DROP_IN_DIR + "/*.toml"]
    assert main.count("imports = ") == 1


def test_imports_with_other_globs_keeps_them():
    text = fixture("v2_imports_other_globs.toml")
    main = after(run_plan(text), CONFIG)
    assert tomllib.loads(main)["imports"] == [
        "/etc/containerd/site.d/*.toml", "/etc/containerd/tenant.d/*.toml", "/etc/containerd/conf.d/*.toml"]
    assert "# site-wide settings" in main


def test_imports_already_present_is_left_alone():
    text = fixture("v2_imports_present.toml")
    result = run_plan(text)
    assert after(result, CONFIG) == text


@pytest.mark.parametrize("entry", ["/etc/containerd/conf.d/*", "/etc/containerd/conf.d/99-*.toml",
                                   "conf.d/*.toml", "/etc/containerd/conf.d/99-nvidia.toml"])
def test_equivalent_import_globs_count_as_covered(entry):
    text = 'version = 2\nimports = ["%s"]\n' % entry
    assert after(run_plan(text), CONFIG) == text


def test_absent_leaves_users_own_imports_entry():
    text = fixture("v2_imports_present.toml")
    present = run_plan(text)
    absent = run_plan(after(present, CONFIG), state="absent", drop_in=after(present, DROP_IN))
    assert after(absent, CONFIG) == text
    assert after(absent, DROP_IN) is None


@pytest.mark.parametrize("name", ["v2_kubespray_style.toml", "v2_containerd16_default.toml",
                                  "v2_imports_other_globs.toml", "v3_containerd20_default.toml",
                                  "v2_debian12_packaged.toml"])
def test_absent_restores_the_original_text(name):
    text = fixture(name)
    present = run_plan(text)
    absent = run_plan(after(present, CONFIG), state="absent", drop_in=after(present, DROP_IN))
    assert after(absent, CONFIG) == text
    assert after(absent, DROP_IN) is None


def test_absent_after_creating_the_file_removes_it():
    present = run_plan(None)
    absent = run_plan(after(present, CONFIG), state="absent", drop_in=after(present, DROP_IN))
    assert after(absent, CONFIG) is None


def test_absent_on_empty_existing_file_keeps_it_empty():
    present = run_plan("")
    absent = run_plan(after(present, CONFIG), state="absent", drop_in=after(present, DROP_IN))
    assert after(absent, CONFIG) == ""


def test_idempotent_second_plan_changes_nothing():
    text = fixture("v3_containerd20_default.toml")
    first = run_plan(text, set_as_default=True, enable_cdi=True)
    second = run_plan(after(first, CONFIG), drop_in=after(first, DROP_IN), set_as_default=True, enable_cdi=True)
    assert not second.changed
    assert not second.effective_changed


def test_rewrite_without_imports_is_repaired():
    text = fixture("v2_kubespray_style.toml")
    first = run_plan(text)
    # A config tool rewrites config.toml from its template: no imports, no marker.
    second = run_plan(text, drop_in=after(first, DROP_IN))
    assert second.changed and second.effective_changed
    assert [c.path for c in second.files if c.changed] == [CONFIG]
    assert after(second, CONFIG) == after(first, CONFIG)


def test_changed_cri_table_regenerates_the_drop_in():
    text = fixture("v2_kubespray_style.toml")
    first = run_plan(text)
    rewritten = after(first, CONFIG).replace('sandbox_image = "pause:3.9"', 'sandbox_image = "pause:3.10"')
    second = run_plan(rewritten, drop_in=after(first, DROP_IN))
    assert [c.path for c in second.files if c.changed] == [DROP_IN]
    assert tomllib.loads(after(second, DROP_IN))["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == "pause:3.10"


def test_stale_marker_is_replaced_not_duplicated():
    text = fixture("v2_kubespray_style.toml")
    main = after(run_plan(text), CONFIG)
    without_imports = main.replace('imports = ["/etc/containerd/conf.d/*.toml"]\n', "")
    repaired = after(run_plan(without_imports), CONFIG)
    assert repaired == main


def test_set_as_default_and_enable_cdi_v2():
    result = run_plan(fixture("v2_kubespray_style.toml"), set_as_default=True, enable_cdi=True)
    table = tomllib.loads(after(result, DROP_IN))["plugins"]["io.containerd.grpc.v1.cri"]
    assert table["containerd"]["default_runtime_name"] == "nvidia"
    assert table["enable_cdi"] is True


@pytest.mark.parametrize("name", ["v3_containerd20_default.toml", "v4_containerd23_constructed.toml"])
def test_set_as_default_and_enable_cdi_v3_plus(name):
    result = run_plan(fixture(name), set_as_default=True, enable_cdi=True)
    drop_in = tomllib.loads(after(result, DROP_IN))
    assert list(drop_in["plugins"]) == ["io.containerd.cri.v1.runtime"]
    table = drop_in["plugins"]["io.containerd.cri.v1.runtime"]
    assert table["containerd"]["default_runtime_name"] == "nvidia"
    assert table["enable_cdi"] is True
    assert table["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]


def test_false_flags_leave_main_settings():
    result = run_plan(fixture("v3_containerd20_default.toml"))
    table = tomllib.loads(after(result, DROP_IN))["plugins"]["io.containerd.cri.v1.runtime"]
    assert table["containerd"]["default_runtime_name"] == "runc"
    assert table["enable_cdi"] is False


def test_comment_only_change_is_not_effective():
    text = fixture("v2_imports_present.toml")
    first = run_plan(text)
    edited_drop_in = "# a comment someone added\n" + after(first, DROP_IN)
    second = run_plan(text, drop_in=edited_drop_in)
    assert second.changed and not second.effective_changed


def test_warns_about_other_drop_ins_with_the_cri_table():
    other = {"/etc/containerd/conf.d/99-zz.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nx = 1\n',
             "/etc/containerd/conf.d/10-other.toml": "version = 2\n[debug]\nlevel = \"info\"\n"}
    result = run_plan(fixture("v2_imports_present.toml"), other_drop_ins=other)
    assert len(result.warnings) == 1
    assert "99-zz.toml" in result.warnings[0] and "wins" in result.warnings[0]


# ---------------------------------------------------------------- bad input


def test_broken_toml_names_file_and_line():
    with pytest.raises(cc.ContainerdConfigError) as error:
        run_plan(fixture("broken_unclosed_table.toml"))
    message = str(error.value)
    assert CONFIG in message and "line 7" in message and "Fix:" in message


def test_unsupported_version_is_rejected():
    with pytest.raises(cc.ContainerdConfigError) as error:
        run_plan(fixture("unsupported_version5.toml"))
    assert "version 5" in str(error.value) and "supported: 2, 3, 4" in str(error.value)


def test_non_integer_version_is_rejected():
    with pytest.raises(cc.ContainerdConfigError, match="not an integer"):
        run_plan('version = "2"\n')


@pytest.mark.parametrize("name", ["Nvidia", "nvidia_gpu", "-x", "a" * 64, ""])
def test_runtime_name_must_be_a_dns_label(name):
    with pytest.raises(cc.ContainerdConfigError, match="DNS label"):
        run_plan("", runtime_name=name)


def test_relative_paths_are_rejected():
    with pytest.raises(cc.ContainerdConfigError, match="absolute"):
        run_plan("", drop_in_dir="conf.d")


def test_imports_not_an_array_is_rejected():
    with pytest.raises(cc.ContainerdConfigError, match="not an array"):
        run_plan('version = 2\nimports = "/etc/containerd/conf.d/*.toml"\n')


# ---------------------------------------------------------------- real containerd


def _containerd_binary():
    candidate = os.environ.get("GN_CONTAINERD_BIN") or shutil.which("containerd")
    if not candidate:
        pytest.skip("no containerd binary (set GN_CONTAINERD_BIN to check against a real one)")
    return candidate


@pytest.mark.parametrize("name", ["v2_kubespray_style.toml", "v2_containerd16_default.toml"])
def test_real_containerd_config_dump_shows_the_handler(tmp_path, name):
    binary = _containerd_binary()
    config = tmp_path / "config.toml"
    drop_in_dir = tmp_path / "conf.d"
    drop_in_dir.mkdir()
    result = cc.plan(str(config), fixture(name), str(drop_in_dir), None, "nvidia", BINARY)
    config.write_text(after(result, str(config)))
    (drop_in_dir / "99-nvidia.toml").write_text(after(result, str(drop_in_dir / "99-nvidia.toml")))
    dump = subprocess.run([binary, "--config", str(config), "config", "dump"], capture_output=True, text=True,
                          check=True).stdout
    runtimes = tomllib.loads(dump)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["nvidia"]["options"]["BinaryName"] == BINARY
    assert runtimes["nvidia"]["options"].get("SystemdCgroup", False) == \
        runtimes["runc"]["options"].get("SystemdCgroup", False)


# ---------------------------------------------------------------- other TOML readers


def _old_toml_package():
    try:
        import toml
        return toml
    except ImportError:
        pass
    debian = "/usr/lib/python3/dist-packages"  # Debian's python3-toml
    if not os.path.isfile(os.path.join(debian, "toml", "__init__.py")):
        pytest.skip("the toml package (python3-toml) is not installed")
    sys.path.append(debian)
    try:
        import toml
    finally:
        sys.path.remove(debian)
    return toml


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(FIXTURES) if n[:2] in ("v2", "v3", "v4")))
def test_old_toml_package_gives_the_same_result(monkeypatch, name):
    """Nodes on Python < 3.11 with only python3-toml must get byte-identical files."""
    text = fixture(name)
    expected = run_plan(text, set_as_default=True, enable_cdi=True)
    monkeypatch.setattr(toml_compat, "_BACKEND", ("toml", _old_toml_package()))
    result = run_plan(text, set_as_default=True, enable_cdi=True)
    assert [(c.path, c.after) for c in result.files] == [(c.path, c.after) for c in expected.files]
    drop_in = after(result, DROP_IN)
    absent = run_plan(after(result, CONFIG), state="absent", drop_in=drop_in)
    assert after(absent, CONFIG) == text


def test_old_toml_package_reports_the_line(monkeypatch):
    monkeypatch.setattr(toml_compat, "_BACKEND", ("toml", _old_toml_package()))
    with pytest.raises(cc.ContainerdConfigError, match="line 7"):
        run_plan(fixture("broken_unclosed_table.toml"))
