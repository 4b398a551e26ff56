# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_config on the configs real node images ship (issue #13) and hostile input (issue #10)."""
import tomllib

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd import containerd_config as cc

from containerd_support import BINARY, CONFIG, DROP_IN, DROP_IN_DIR, after, fixture, run_plan

V2 = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"


def merged(result, text):
    """What containerd < 2.0 loads: the drop-in's CRI table replaces the main one."""
    data = tomllib.loads(after(result, CONFIG) or text)
    drop_in = after(result, DROP_IN)
    if drop_in is not None:
        data.setdefault("plugins", {})[result.cri_plugin] = tomllib.loads(drop_in)["plugins"][result.cri_plugin]
    return data


def runtimes_of(data, cri):
    return data["plugins"][cri]["containerd"]["runtimes"]


# ---------------------------------------------------------------- an existing handler


def test_existing_nvidia_default_with_same_binary_is_a_no_op():
    text = fixture("v2_gpu_image_nvidia_default.toml")
    for binary in (BINARY, None):
        result = run_plan(text, binary_path=binary, set_as_default=True, enable_cdi=True)
        assert not result.changed and not result.effective_changed
        assert result.existing_handler == result.handler and result.handler_changes() == []
        assert result.inherited_from is None


def test_existing_handler_keeps_every_key_and_only_binary_changes():
    text = fixture("v2_gpu_image_nvidia_default.toml")
    before = tomllib.loads(text)
    result = run_plan(text, binary_path="/opt/nvidia/bin/nvidia-container-runtime")
    assert result.changed and result.effective_changed
    data = merged(result, text)
    nvidia = runtimes_of(data, V2)["nvidia"]
    expected = dict(runtimes_of(before, V2)["nvidia"])
    expected["options"] = dict(expected["options"], BinaryName="/opt/nvidia/bin/nvidia-container-runtime")
    assert nvidia == expected
    assert nvidia["options"]["SystemdCgroup"] is True
    assert nvidia["base_runtime_spec"] == "/etc/containerd/base-runtime-spec.json"
    assert data["plugins"][V2]["containerd"]["default_runtime_name"] == "nvidia"
    assert runtimes_of(data, V2)["runc"] == runtimes_of(before, V2)["runc"]
    assert result.handler_changes() == [
        'options.BinaryName: "/usr/bin/nvidia-container-runtime" -> "/opt/nvidia/bin/nvidia-container-runtime"']


def test_existing_handler_v3_keeps_settings_and_binary_when_not_asked():
    text = fixture("v3_gpu_image_nvidia_default.toml")
    result = run_plan(text, binary_path=None)
    assert not result.changed
    changed = run_plan(text)
    nvidia = runtimes_of(merged(changed, text), V3)["nvidia"]
    assert nvidia["options"] == {"BinaryName": BINARY, "SystemdCgroup": True}
    assert nvidia["base_runtime_spec"] == "/etc/containerd/base-runtime-spec.json"
    assert nvidia["privileged_without_host_devices"] is False


def test_existing_handler_systemd_cgroup_override_is_reported():
    text = fixture("v2_gpu_image_nvidia_default.toml")
    result = run_plan(text, systemd_cgroup=False)
    assert runtimes_of(merged(result, text), V2)["nvidia"]["options"]["SystemdCgroup"] is False
    assert result.handler_changes() == ["options.SystemdCgroup: true -> false"]


def test_existing_handler_no_op_becomes_change_when_default_is_asked_for():
    text = fixture("v2_gpu_image_nvidia_default.toml").replace(
        'default_runtime_name = "nvidia"', 'default_runtime_name = "runc"')
    assert not run_plan(text).changed
    result = run_plan(text, set_as_default=True)
    assert merged(result, text)["plugins"][V2]["containerd"]["default_runtime_name"] == "nvidia"


def test_existing_handler_that_is_not_a_table_is_refused():
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nnvidia = "x"\n'
    with pytest.raises(cc.ContainerdConfigError, match="not a table"):
        run_plan(text)


# ---------------------------------------------------------------- inheritance


@pytest.mark.parametrize("name, source, cri", [
    ("v2_gpu_image_only_nvidia_runtime.toml", "nvidia-container-runtime", V2),
    ("v2_crun_default_no_runc.toml", "crun", V2),
    ("v2_kind_style_parents_after.toml", "runc", V2),
    ("v2_kubespray_style.toml", "runc", V2),
    ("v4_installer_no_runc.toml", "nvidia-container-runtime", V3),
])
def test_new_handler_inherits_and_names_the_source(name, source, cri):
    text = fixture(name)
    result = run_plan(text)
    assert result.inherited_from == source and result.existing_handler is None and not result.warnings
    before = runtimes_of(tomllib.loads(text), cri)
    runtimes = runtimes_of(merged(result, text), cri)
    nvidia = runtimes["nvidia"]
    assert nvidia["runtime_type"] == cc.RUNC_V2
    assert nvidia["options"]["BinaryName"] == BINARY
    assert nvidia["options"].get("SystemdCgroup") == before[source]["options"].get("SystemdCgroup")
    for key, value in before[source].items():
        if key not in ("options", "runtime_type"):
            assert nvidia[key] == value
    for runtime, entry in before.items():
        assert runtimes[runtime] == entry  # every runtime survives unchanged


def test_default_runtime_comes_before_runc():
    text = fixture("v2_kubespray_style.toml").replace('default_runtime_name = "runc"', 'default_runtime_name = "crun"')
    text += ('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]\n  runtime_type = "io.containerd.runc.v2"\n'
             '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]\n  BinaryName = "/usr/bin/crun"\n')
    assert 'default_runtime_name = "crun"' in text
    assert run_plan(text).inherited_from == "crun"


def test_runc_comes_before_crun_and_systemd_cgroup_runtimes():
    text = fixture("v2_crun_default_no_runc.toml").replace('default_runtime_name = "crun"', 'default_runtime_name = "x"')
    text += ('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n')
    assert run_plan(text).inherited_from == "runc"
    no_runc = fixture("v2_crun_default_no_runc.toml").replace(
        'default_runtime_name = "crun"', 'default_runtime_name = "x"')
    assert run_plan(no_runc).inherited_from == "crun"


def test_any_runc_type_runtime_with_systemd_cgroup_is_the_last_resort():
    text = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.plain]\n'
            '  runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpu-old]\n'
            '  runtime_type = "io.containerd.runc.v2"\n'
            '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpu-old.options]\n'
            '    SystemdCgroup = true\n    BinaryName = "/usr/bin/old"\n')
    result = run_plan(text)
    assert result.inherited_from == "gpu-old"
    assert result.handler["options"] == {"SystemdCgroup": True, "BinaryName": BINARY}


def test_kata_default_is_not_copied_and_the_missing_systemd_cgroup_is_warned():
    text = fixture("v2_no_runc_type_runtime.toml")
    result = run_plan(text)
    assert result.inherited_from is None
    assert result.handler == {"runtime_type": cc.RUNC_V2, "options": {"BinaryName": BINARY}}
    assert len(result.warnings) == 1 and "SystemdCgroup" in result.warnings[0]
    assert "systemd_cgroup: true" in result.warnings[0]


@pytest.mark.parametrize("value", [True, False])
def test_systemd_cgroup_option_sets_a_new_handler_and_silences_the_warning(value):
    result = run_plan(fixture("v2_no_runc_type_runtime.toml"), systemd_cgroup=value)
    assert result.handler["options"]["SystemdCgroup"] is value and not result.warnings
    inherited = run_plan(fixture("v2_kubespray_style.toml"), systemd_cgroup=value)
    assert inherited.handler["options"]["SystemdCgroup"] is value


# ---------------------------------------------------------------- version rule


@pytest.mark.parametrize("name, version", [
    ("v2_kubespray_style.toml", 2), ("v2_gpu_image_only_nvidia_runtime.toml", 2),
    ("v3_containerd20_default.toml", 3), ("v3_gpu_image_nvidia_default.toml", 3),
    ("v4_containerd23_constructed.toml", 4), ("v4_installer_no_runc.toml", 4),
])
def test_drop_in_version_equals_the_root_version(name, version):
    result = run_plan(fixture(name), binary_path="/opt/other/runtime")
    assert tomllib.loads(after(result, DROP_IN))["version"] == version == result.version


def test_other_drop_in_with_a_higher_version_is_warned():
    other = {"/etc/containerd/conf.d/10-x.toml": "version = 3\n"}
    result = run_plan(fixture("v2_kubespray_style.toml"), other_drop_ins=other)
    assert any("10-x.toml declares version 3" in w and "2.3.0 to 2.3.4" in w for w in result.warnings)


# ---------------------------------------------------------------- real-file syntax


@pytest.mark.parametrize("name", ["v2_gpu_image_only_nvidia_runtime.toml", "v2_kind_style_parents_after.toml",
                                  "v2_crun_default_no_runc.toml", "v4_installer_no_runc.toml"])
def test_quoting_styles_round_trip(name):
    """Single quotes, tabs, parents after sub-tables, proxy_plugins, empty imports: only the imports entry changes."""
    text = fixture(name)
    result = run_plan(text)
    main = after(result, CONFIG)
    before, now = tomllib.loads(text), tomllib.loads(main)
    assert now.pop("imports") == [DROP_IN_DIR + "/*.toml"]
    before.pop("imports", None)
    assert now == before
    removed = [line for line in text.splitlines() if line not in main.splitlines()]
    assert removed in ([], ["imports = []"])
    absent = run_plan(main, state="absent", drop_in=after(result, DROP_IN))
    assert after(absent, CONFIG) == text
    again = run_plan(main, drop_in=after(result, DROP_IN))
    assert not again.changed


def test_kind_style_keeps_proxy_and_disabled_plugins():
    text = fixture("v2_kind_style_parents_after.toml")
    data = merged(run_plan(text), text)
    assert data["proxy_plugins"]["fuse-overlayfs"]["type"] == "snapshot"
    assert data["disabled_plugins"] == ["io.containerd.snapshotter.v1.btrfs"]
    assert runtimes_of(data, V2)["test-handler"] == {"runtime_type": cc.RUNC_V2}


def test_bare_binary_name_is_kept_when_binary_path_is_not_given():
    text = fixture("v2_gpu_image_only_nvidia_runtime.toml")
    result = run_plan(text, runtime_name="nvidia-container-runtime", binary_path=None)
    assert not result.changed
    assert result.handler["options"]["BinaryName"] == "nvidia-container-runtime"


def test_crlf_file_gets_crlf_lines_and_absent_restores_it():
    text = fixture("v2_kubespray_style.toml").replace("\n", "\r\n")
    result = run_plan(text)
    main = after(result, CONFIG)
    assert main.count("\n") == main.count("\r\n")
    assert "imports = [\"/etc/containerd/conf.d/*.toml\"]\r\n" in main
    absent = run_plan(main, state="absent", drop_in=after(result, DROP_IN))
    assert after(absent, CONFIG) == text


# ---------------------------------------------------------------- version 1, limits


@pytest.mark.parametrize("text", ["version = 1\n[plugins.cri]\nx = 1\n", None])
def test_version_1_is_refused_with_the_migrate_hint(text):
    if text is None:
        text = fixture("v1_legacy_no_version.toml")
    with pytest.raises(cc.ContainerdConfigError) as error:
        run_plan(text)
    message = str(error.value)
    assert "config version 1 is not supported: run `containerd config migrate` (containerd 1.7+) and retry; " \
           "nothing was changed" in message and CONFIG in message


def test_oversized_config_is_refused():
    text = "version = 2\n" + "# padding\n" * (cc.MAX_CONFIG_CHARS // 10 + 1)
    with pytest.raises(cc.ContainerdConfigError, match="more than the"):
        run_plan(text)


@pytest.mark.parametrize("text", [
    "version = 2\nx = " + "[" * 5000 + "]" * 5000 + "\n",
    "version = 2\n[" + ".".join("t%d" % i for i in range(40)) + "]\n",
])
def test_deep_nesting_is_refused(text):
    with pytest.raises(cc.ContainerdConfigError):
        run_plan(text)


def test_broken_own_drop_in_is_reported_not_raised():
    with pytest.raises(cc.ContainerdConfigError, match="99-nvidia.toml is not valid TOML"):
        run_plan(fixture("v2_kubespray_style.toml"), drop_in="[broken\n")


def test_damaged_marker_is_a_containerd_config_error():
    text = ('version = 2\n# gpu_native.fleet.containerd_runtime: added imports line "\\q" (state=absent removes it)\n'
            'imports = ["/x/*.toml"]\n')
    with pytest.raises(cc.ContainerdConfigError, match="marker"):
        run_plan(text, state="absent")
