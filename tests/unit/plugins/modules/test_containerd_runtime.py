# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime module: drives main() against files in a temp dir."""
import json
import os
import shutil
import stat
import subprocess
import tomllib

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import containerd_runtime

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "containerd")
V2 = "io.containerd.grpc.v1.cri"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


@pytest.fixture
def node(tmp_path):
    """A fake node: config dir, drop-in dir path and an executable runtime binary."""
    etc = tmp_path / "etc" / "containerd"
    etc.mkdir(parents=True)
    binary = tmp_path / "nvidia-container-runtime"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)

    class Node:
        config = etc / "config.toml"
        drop_in_dir = etc / "conf.d"
        drop_in = etc / "conf.d" / "99-nvidia.toml"
        binary_path = str(binary)

        def args(self, **extra):
            args = dict(config_path=str(self.config), drop_in_dir=str(self.drop_in_dir),
                        binary_path=self.binary_path)
            args.update(extra)
            return args

        def snapshot(self):
            files = {}
            for path in sorted(etc.rglob("*")):
                if path.is_file():
                    files[str(path)] = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
            return files

    return Node()


def run(args, capsys, check_mode=False, diff=False):
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            containerd_runtime.main()
    result = json.loads(capsys.readouterr().out)
    result["rc"] = exit_info.value.code
    return result


def warnings(result):
    """Warning texts (ansible-core 2.19 returns them as structured summaries)."""
    texts = []
    for warning in result.get("warnings", []):
        texts.append(warning if isinstance(warning, str) else warning.get("event", {}).get("msg", str(warning)))
    return texts


def test_present_v2_writes_drop_in_and_imports(node, capsys):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    node.config.chmod(0o600)
    result = run(node.args(), capsys)
    assert result["rc"] == 0 and result["changed"] and result["effective_changed"] and result["written"]
    assert result["config_version"] == 2 and result["cri_plugin"] == V2
    assert result["drop_in_path"] == str(node.drop_in)
    assert sorted(result["files_changed"]) == sorted([str(node.config), str(node.drop_in)])
    assert tomllib.loads(node.config.read_text())["imports"] == [str(node.drop_in_dir) + "/*.toml"]
    nvidia = tomllib.loads(node.drop_in.read_text())["plugins"][V2]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"] == {"SystemdCgroup": True, "BinaryName": node.binary_path}
    assert stat.S_IMODE(node.config.stat().st_mode) == 0o600  # mode kept across the atomic rename
    # The drop-in copies the CRI table (registry credentials may be in it): not more readable than the main file.
    assert stat.S_IMODE(node.drop_in.stat().st_mode) == 0o600
    assert not [p for p in os.listdir(node.drop_in_dir) if p.startswith(".")]  # no temp files left


def test_new_files_default_to_0644(node, capsys):
    run(node.args(), capsys)
    assert stat.S_IMODE(node.config.stat().st_mode) == 0o644
    assert stat.S_IMODE(node.drop_in.stat().st_mode) == 0o644


def test_second_run_is_unchanged(node, capsys):
    node.config.write_text(fixture("v3_containerd20_default.toml"))
    first = run(node.args(set_as_default=True, enable_cdi=True), capsys)
    before = node.snapshot()
    second = run(node.args(set_as_default=True, enable_cdi=True), capsys)
    assert first["changed"] and not second["changed"]
    assert not second["effective_changed"] and second["files_changed"] == [] and not second["written"]
    assert node.snapshot() == before


def test_check_mode_writes_nothing(node, capsys):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    before = node.snapshot()
    result = run(node.args(), capsys, check_mode=True)
    assert result["changed"] and result["effective_changed"] and not result["written"]
    assert node.snapshot() == before
    assert not node.drop_in_dir.exists()


def test_check_mode_on_missing_config_creates_nothing(node, capsys):
    result = run(node.args(), capsys, check_mode=True)
    assert result["changed"] and result["config_version"] == 2
    assert node.snapshot() == {}


def test_diff_has_before_and_after_per_file(node, capsys):
    node.config.write_text(fixture("v2_imports_other_globs.toml"))
    result = run(node.args(), capsys, check_mode=True, diff=True)
    by_header = {d["after_header"]: d for d in result["diff"]}
    main = by_header[str(node.config)]
    assert main["before"] == fixture("v2_imports_other_globs.toml")
    assert str(node.drop_in_dir) + "/*.toml" in main["after"]
    drop_in = by_header[str(node.drop_in)]
    assert drop_in["before"] == "" and drop_in["before_header"].endswith("(absent)")
    assert "BinaryName" in drop_in["after"]


def test_absent_removes_only_what_present_added(node, capsys):
    original = fixture("v2_imports_other_globs.toml")
    node.config.write_text(original)
    run(node.args(), capsys)
    result = run(node.args(state="absent"), capsys, diff=True)
    assert result["changed"] and result["effective_changed"]
    assert node.config.read_text() == original
    assert not node.drop_in.exists()
    assert any(d["after_header"].endswith("(removed)") for d in result["diff"])
    again = run(node.args(state="absent"), capsys)
    assert not again["changed"]


def test_absent_does_not_need_the_binary(node, capsys):
    node.config.write_text(fixture("v2_imports_present.toml"))
    result = run(node.args(state="absent", binary_path="/nonexistent/runtime"), capsys)
    assert result["rc"] == 0 and not result["changed"]


def test_rewrite_without_imports_is_repaired(node, capsys):
    template = fixture("v2_kubespray_style.toml")
    node.config.write_text(template)
    run(node.args(), capsys)
    configured = node.config.read_text()
    node.config.write_text(template)  # a config tool re-renders its template
    result = run(node.args(), capsys)
    assert result["changed"] and result["effective_changed"]
    assert result["files_changed"] == [str(node.config)]
    assert node.config.read_text() == configured


def test_backup(node, capsys):
    node.config.write_text(fixture("v2_imports_other_globs.toml"))
    result = run(node.args(backup=True), capsys)
    with open(result["backup_file"]) as handle:
        assert handle.read() == fixture("v2_imports_other_globs.toml")


@pytest.mark.parametrize("name, expected", [
    ("broken_unclosed_table.toml", "line 7"),
    ("unsupported_version5.toml", "version 5"),
    ("v1_legacy_no_version.toml", "config version 1 is not supported: run `containerd config migrate`"),
])
def test_bad_config_fails_and_writes_nothing(node, capsys, name, expected):
    node.config.write_text(fixture(name))
    before = node.snapshot()
    result = run(node.args(), capsys)
    assert result["failed"] and result["rc"] == 1
    assert str(node.config) in result["msg"] and expected in result["msg"]
    assert "Fix:" in result["msg"] or "run `containerd config migrate`" in result["msg"]
    assert node.snapshot() == before


def test_missing_binary_fails(node, capsys):
    node.config.write_text(fixture("v2_imports_present.toml"))
    before = node.snapshot()
    result = run(node.args(binary_path="/nonexistent/nvidia-container-runtime"), capsys)
    assert result["failed"]
    assert "/nonexistent/nvidia-container-runtime does not exist" in result["msg"]
    assert "allow_missing_binary" in result["msg"]
    assert node.snapshot() == before


def test_missing_binary_warns_in_check_mode(node, capsys):
    node.config.write_text(fixture("v2_imports_present.toml"))
    result = run(node.args(binary_path="/nonexistent/nvidia-container-runtime"), capsys, check_mode=True)
    assert not result.get("failed") and result["changed"]
    assert any("does not exist" in w for w in warnings(result))


def test_missing_binary_allowed(node, capsys):
    node.config.write_text(fixture("v2_imports_present.toml"))
    result = run(node.args(binary_path="/nonexistent/nvidia-container-runtime", allow_missing_binary=True), capsys)
    assert not result.get("failed") and result["changed"]
    assert any("does not exist" in w for w in warnings(result))
    assert "/nonexistent/nvidia-container-runtime" in node.drop_in.read_text()


def test_broken_other_drop_in_fails(node, capsys):
    node.config.write_text(fixture("v2_imports_present.toml"))
    node.drop_in_dir.mkdir()
    (node.drop_in_dir / "10-site.toml").write_text("version = 2\n[plugins\n")
    before = node.snapshot()
    result = run(node.args(), capsys)
    assert result["failed"] and "10-site.toml" in result["msg"] and "line 2" in result["msg"]
    assert node.snapshot() == before


def test_invalid_runtime_name(node, capsys):
    result = run(node.args(runtime_name="NVIDIA"), capsys)
    assert result["failed"] and "DNS label" in result["msg"]
    assert node.snapshot() == {}


def test_no_toml_reader_fails_clearly(node, capsys, monkeypatch):
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common import toml_compat

    def unavailable():
        raise toml_compat.TomlUnavailableError("no TOML reader (tomllib, tomli or toml) can be imported. "
                                               + toml_compat.TOML_PACKAGES_HINT)

    monkeypatch.setattr(toml_compat, "backend_name", unavailable)
    result = run(node.args(), capsys)
    assert result["failed"] and "python3-tomli" in result["msg"] and "Fix:" in result["msg"]


# ---------------------------------------------------------------- one unit, symlinks, limits (issue #10)


def _chattr(flag, path):
    if not shutil.which("chattr") or os.geteuid() != 0:
        pytest.skip("needs root and chattr to make a file immutable")
    if subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False).returncode != 0:
        pytest.skip("this file system does not support chattr %s" % flag)


@pytest.fixture
def immutable():
    done = []

    def make(path):
        _chattr("+i", path)
        done.append(path)

    yield make
    for path in done:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def _assert_refused(result, path):
    assert result["failed"] and result["rc"] == 1
    assert result["path"] == str(path), result["msg"]
    assert result["msg"].startswith("Cannot write %s:" % path)
    assert "Nothing was changed" in result["msg"] and "Fix:" in result["msg"] and "\n" not in result["msg"]


def test_immutable_config_file_restores_the_drop_in(node, capsys, immutable):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    before = node.snapshot()
    immutable(node.config)
    result = run(node.args(), capsys)
    _assert_refused(result, node.config)
    assert node.snapshot() == before  # the drop-in written first is gone again
    assert not node.drop_in_dir.exists()  # and so is the directory made for it


def test_read_only_config_folder_restores_the_drop_in(node, capsys, immutable):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    node.drop_in_dir.mkdir()
    before = node.snapshot()
    immutable(node.config.parent)  # an immutable directory refuses new entries and renames
    result = run(node.args(drop_in_dir=str(node.config.parent.parent / "conf.d")), capsys)
    assert result["failed"] and "Nothing was changed" in result["msg"]
    assert str(node.config.parent) in result["path"]
    assert node.snapshot() == before
    assert not (node.config.parent.parent / "conf.d").exists()


def test_read_only_drop_in_folder_changes_nothing(node, capsys, immutable):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    node.drop_in_dir.mkdir()
    before = node.snapshot()
    immutable(node.drop_in_dir)
    result = run(node.args(), capsys)
    _assert_refused(result, node.drop_in_dir)
    assert node.snapshot() == before


def test_failed_config_replace_restores_the_drop_in_monkeypatched(node, capsys, monkeypatch):
    """Without chattr: os.replace refuses the main config; the new drop-in is removed."""
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    node.drop_in_dir.mkdir()
    before = node.snapshot()
    real_replace = os.replace

    def replace(src, dst):
        if str(dst) == str(node.config):
            raise PermissionError(1, "Operation not permitted")
        return real_replace(src, dst)

    monkeypatch.setattr(containerd_runtime.os, "replace", replace)
    result = run(node.args(), capsys)
    _assert_refused(result, node.config)
    assert node.snapshot() == before
    assert os.listdir(node.drop_in_dir) == []  # no temp file left either


def test_failed_config_replace_restores_an_existing_drop_in(node, capsys, monkeypatch):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    run(node.args(), capsys)
    node.config.write_text(fixture("v2_kubespray_style.toml").replace("pause:3.9", "pause:3.10"))
    before = node.snapshot()
    real_replace = os.replace

    def replace(src, dst):
        if str(dst) == str(node.config):
            raise OSError(30, "Read-only file system")
        return real_replace(src, dst)

    monkeypatch.setattr(containerd_runtime.os, "replace", replace)
    result = run(node.args(), capsys)
    _assert_refused(result, node.config)
    assert node.snapshot() == before  # the regenerated drop-in was put back as it was


def test_absent_with_failing_drop_in_removal_restores_the_config(node, capsys, monkeypatch):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    run(node.args(), capsys)
    before = node.snapshot()
    real_unlink = os.unlink

    def unlink(path):
        if str(path) == str(node.drop_in):
            raise PermissionError(1, "Operation not permitted")
        return real_unlink(path)

    monkeypatch.setattr(containerd_runtime.os, "unlink", unlink)
    result = run(node.args(state="absent"), capsys)
    _assert_refused(result, node.drop_in)
    assert node.snapshot() == before


def test_symlinked_config_is_edited_behind_the_link(node, capsys, tmp_path):
    real = tmp_path / "managed" / "containerd.toml"
    real.parent.mkdir()
    real.write_text(fixture("v2_kubespray_style.toml"))
    node.config.symlink_to(real)
    result = run(node.args(), capsys)
    assert result["rc"] == 0 and result["written"]
    assert node.config.is_symlink() and os.path.realpath(node.config) == str(real)
    assert tomllib.loads(real.read_text())["imports"] == [str(node.drop_in_dir) + "/*.toml"]
    assert not [name for name in os.listdir(real.parent) if name != "containerd.toml"]
    assert run(node.args(), capsys)["changed"] is False


def test_crlf_config_keeps_crlf(node, capsys):
    node.config.write_bytes(fixture("v2_kubespray_style.toml").replace("\n", "\r\n").encode())
    run(node.args(), capsys)
    raw = node.config.read_bytes()
    assert raw.count(b"\n") == raw.count(b"\r\n")


def test_oversized_config_fails_and_writes_nothing(node, capsys):
    node.config.write_text("version = 2\n" + "#" * (2 * 1024 * 1024) + "\n")
    before = node.snapshot()
    result = run(node.args(), capsys)
    assert result["failed"] and "larger than" in result["msg"] and "Fix:" in result["msg"]
    assert node.snapshot() == before


def test_too_many_drop_ins_fail(node, capsys, monkeypatch):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    node.drop_in_dir.mkdir()
    for index in range(4):
        (node.drop_in_dir / ("%02d.toml" % index)).write_text("version = 2\n")
    monkeypatch.setattr(containerd_runtime, "MAX_DROP_INS", 3)
    result = run(node.args(), capsys)
    assert result["failed"] and "more than the 3" in result["msg"]


# ---------------------------------------------------------------- handler options and results


def test_existing_handler_same_binary_is_unchanged(node, capsys):
    node.config.write_text(fixture("v2_gpu_image_nvidia_default.toml").replace(
        "/usr/bin/nvidia-container-runtime", node.binary_path))
    before = node.snapshot()
    result = run(node.args(), capsys)
    assert result["rc"] == 0 and not result["changed"] and result["handler_existed"]
    assert result["handler_changes"] == [] and result["inherited_from"] is None
    assert node.snapshot() == before


def test_existing_handler_diff_shows_only_the_binary(node, capsys):
    node.config.write_text(fixture("v2_gpu_image_nvidia_default.toml"))
    result = run(node.args(), capsys, diff=True)
    assert result["handler_changes"] == [
        'options.BinaryName: "/usr/bin/nvidia-container-runtime" -> "%s"' % node.binary_path]
    handler_diff = result["diff"][-1]
    assert "runtime nvidia" in handler_diff["before_header"]
    before_lines = set(handler_diff["before"].splitlines())
    after_lines = set(handler_diff["after"].splitlines())
    assert before_lines - after_lines == {'BinaryName = "/usr/bin/nvidia-container-runtime"'}
    assert after_lines - before_lines == {'BinaryName = "%s"' % node.binary_path}
    nvidia = tomllib.loads(node.drop_in.read_text())["plugins"][V2]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["SystemdCgroup"] is True and nvidia["base_runtime_spec"]


def test_no_runc_inherits_from_the_default_runtime(node, capsys):
    node.config.write_text(fixture("v2_gpu_image_only_nvidia_runtime.toml"))
    result = run(node.args(), capsys)
    assert result["inherited_from"] == "nvidia-container-runtime" and not result["handler_existed"]
    assert result["handler"]["options"]["SystemdCgroup"] is True


@pytest.mark.parametrize("value, expected", [(True, True), ("false", False), ("inherit", None)])
def test_systemd_cgroup_option(node, capsys, value, expected):
    node.config.write_text(fixture("v2_no_runc_type_runtime.toml"))
    result = run(node.args(systemd_cgroup=value), capsys)
    assert result["handler"]["options"].get("SystemdCgroup") is expected
    warned = any("SystemdCgroup" in text and str(node.config) in text for text in warnings(result))
    assert warned is (expected is None)


def test_bad_systemd_cgroup_value(node, capsys):
    node.config.write_text(fixture("v2_kubespray_style.toml"))
    before = node.snapshot()
    result = run(node.args(systemd_cgroup="maybe"), capsys)
    assert result["failed"] and "true, false or inherit" in result["msg"]
    assert node.snapshot() == before


def test_missing_binary_of_a_kept_handler_is_reported(node, capsys):
    node.config.write_text(fixture("v3_gpu_image_nvidia_default.toml"))
    args = node.args()
    del args["binary_path"]
    result = run(args, capsys)
    assert result["failed"] and "/usr/local/nvidia/toolkit/nvidia-container-runtime" in result["msg"]
    assert "pass binary_path" in result["msg"]
