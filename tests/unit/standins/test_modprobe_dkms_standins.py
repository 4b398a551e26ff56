# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modprobe and dkms stand-ins answer like kmod 30 and DKMS 3.0.10, in a prefixed temp root."""
import json
import os
import subprocess

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_driver import (
    dkms_state_for_kernel,
    parse_dkms_status,
)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODPROBE = os.path.join(REPO, "tests", "standins", "modprobe")
DKMS = os.path.join(REPO, "tests", "standins", "dkms")
KERNEL = "6.1.0-28-amd64"
VERSION = "535.261.03"
ROLE_UNLOAD_ORDER = ["nvidia_peermem", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]


def dkms_conf(root, name="nvidia-current", version=VERSION):
    source = root / "usr" / "src" / ("%s-%s" % (name, version))
    source.mkdir(parents=True, exist_ok=True)
    (source / "dkms.conf").write_text('PACKAGE_NAME="%s"\nPACKAGE_VERSION="%s"\nAUTOINSTALL=yes\n' % (name, version))
    return source


def snapshot(root):
    """Everything under root: files with their content, links with their target, directories."""
    seen = {}
    for base, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, str(root))
            if os.path.islink(path):
                seen[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                seen[rel] = ("dir",)
            else:
                with open(path) as handle:
                    seen[rel] = ("file", handle.read())
    return seen


class Host(object):
    def __init__(self, root):
        self.root = root
        self.env = dict(os.environ, GPU_NATIVE_STANDIN_ROOT=str(root), GPU_NATIVE_STANDIN_KERNEL=KERNEL,
                        GPU_NATIVE_STANDIN_ARCH="x86_64", MODPROBE_STANDIN_REAL="", DKMS_STANDIN_REAL="")

    def run(self, tool, *args):
        proc = subprocess.run([tool] + list(args), env=self.env, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def modprobe(self, *args):
        return self.run(MODPROBE, *args)

    def dkms(self, *args):
        return self.run(DKMS, *args)

    def sysmod(self, *parts):
        return self.root.joinpath("sys", "module", *parts)

    def loaded(self):
        return sorted(name for name in os.listdir(str(self.sysmod())) if not name.startswith("."))

    def hold(self, pid, fd, target):
        """A fake /proc/<pid>/fd/<fd> link, as the kernel shows an open file."""
        fd_dir = self.root / "proc" / str(pid) / "fd"
        fd_dir.mkdir(parents=True, exist_ok=True)
        os.symlink(target, str(fd_dir / str(fd)))


@pytest.fixture
def host(tmp_path):
    dkms_conf(tmp_path)
    for folder in ("sys/module", "proc", "dev"):
        (tmp_path / folder).mkdir(parents=True)
    return Host(tmp_path)


def fake_real(tmp_path, name, code):
    """A stand-in for the real tool: records its argv (one line per argument) and exits ``code``."""
    log = tmp_path / (name + ".argv")
    script = tmp_path / name
    script.write_text('#!/bin/sh\nfor a in "$0" "$@"; do echo "$a"; done >> %s\nexit %d\n' % (log, code))
    script.chmod(0o755)
    return str(script), log


# ---- modprobe: load

def test_load_creates_dependencies_first_with_version_and_holders(host):
    assert host.modprobe("nvidia_uvm") == (0, "", "")
    assert host.loaded() == ["nvidia", "nvidia_uvm"]
    for name in ("nvidia", "nvidia_uvm"):
        assert host.sysmod(name, "version").read_text() == VERSION + "\n"
        assert host.sysmod(name, "initstate").read_text() == "live\n"
    assert os.readlink(str(host.sysmod("nvidia", "holders", "nvidia_uvm"))) == "../../nvidia_uvm"
    assert host.sysmod("nvidia", "refcnt").read_text() == "1\n"
    assert host.sysmod("nvidia_uvm", "refcnt").read_text() == "0\n"


def test_drm_loads_nvidia_then_modeset_and_verbose_prints_kmods_insmod_lines(host):
    rc, out, err = host.modprobe("-v", "nvidia-drm", "modeset=1", "fbdev")
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        "insmod /lib/modules/%s/updates/dkms/nvidia-current.ko " % KERNEL,
        "insmod /lib/modules/%s/updates/dkms/nvidia-current-modeset.ko " % KERNEL,
        "insmod /lib/modules/%s/updates/dkms/nvidia-current-drm.ko modeset=1 fbdev" % KERNEL,
    ]
    assert host.loaded() == ["nvidia", "nvidia_drm", "nvidia_modeset"]
    assert sorted(os.listdir(str(host.sysmod("nvidia", "holders")))) == ["nvidia_modeset"]
    assert sorted(os.listdir(str(host.sysmod("nvidia_modeset", "holders")))) == ["nvidia_drm"]
    assert host.sysmod("nvidia_drm", "parameters", "modeset").read_text() == "1\n"
    assert host.sysmod("nvidia_drm", "parameters", "fbdev").read_text() == "Y\n"
    assert os.listdir(str(host.sysmod("nvidia", "parameters"))) == []


def test_load_is_idempotent_and_first_time_fails_like_kmod(host):
    assert host.modprobe("nvidia_uvm")[0] == 0
    before = snapshot(host.root)
    assert host.modprobe("nvidia_uvm") == (0, "", "")
    assert host.modprobe("nvidia-uvm") == (0, "", "")
    assert snapshot(host.root) == before
    assert host.modprobe("--first-time", "nvidia_uvm") == (
        1, "", "modprobe: ERROR: could not insert 'nvidia_uvm': Module already in kernel\n")
    assert host.modprobe("-q", "--first-time", "nvidia_uvm") == (1, "", "")
    # an already loaded dependency is no error, even with --first-time
    assert host.modprobe("--first-time", "nvidia_modeset") == (0, "", "")
    assert host.loaded() == ["nvidia", "nvidia_modeset", "nvidia_uvm"]


def test_dry_run_changes_nothing(host):
    before = snapshot(host.root)
    rc, out, err = host.modprobe("-n", "-v", "nvidia_uvm")
    assert (rc, err) == (0, "")
    assert len(out.splitlines()) == 2
    assert host.modprobe("--dry-run", "nvidia_drm") == (0, "", "")
    assert snapshot(host.root) == before
    host.modprobe("nvidia_drm")
    before = snapshot(host.root)
    assert host.modprobe("-n", "-r", "-v", "nvidia_drm") == (0, "rmmod nvidia_drm\n", "")
    assert host.modprobe("-n", "-r", "nvidia") == (1, "", "modprobe: FATAL: Module nvidia is in use.\n")
    assert snapshot(host.root) == before


def test_debian_renamed_modules_map_to_the_kernel_names(host):
    assert host.modprobe("nvidia-current")[0] == 0
    assert host.modprobe("nvidia-current-open-uvm")[0] == 0
    assert host.modprobe("nvidia_current_modeset")[0] == 0
    assert host.loaded() == ["nvidia", "nvidia_modeset", "nvidia_uvm"]
    assert host.modprobe("-r", "nvidia-current-uvm", "nvidia-current-open-modeset", "nvidia-current") == (0, "", "")
    assert host.loaded() == []


def test_newest_of_several_built_versions_is_loaded(host):
    dkms_conf(host.root, version="535.54.03")
    dkms_conf(host.root, name="nvidia-current-open", version="550.163.01")
    assert host.modprobe("nvidia") == (0, "", "")
    assert host.sysmod("nvidia", "version").read_text() == "550.163.01\n"


def test_without_a_built_module_kmods_not_found_and_nothing_changes(tmp_path):
    (tmp_path / "sys" / "module").mkdir(parents=True)
    host = Host(tmp_path)
    before = snapshot(tmp_path)
    assert host.modprobe("nvidia-current") == (
        1, "", "modprobe: FATAL: Module nvidia-current not found in directory /lib/modules/%s\n" % KERNEL)
    assert host.modprobe("-r", "nvidia") == (1, "", "modprobe: FATAL: Module nvidia not found.\n")
    assert host.modprobe("-q", "nvidia") == (1, "", "")
    assert snapshot(tmp_path) == before


def test_an_old_loaded_nvidia_stays_and_new_dependents_are_refused(host):
    old = dkms_conf(host.root, version="525.147.05")
    (host.root / "usr" / "src" / ("nvidia-current-" + VERSION) / "dkms.conf").unlink()
    assert host.modprobe("nvidia")[0] == 0
    (old / "dkms.conf").unlink()
    dkms_conf(host.root)                      # the upgrade: 535 built, 525 still in the kernel
    assert host.modprobe("nvidia") == (0, "", "")
    assert host.sysmod("nvidia", "version").read_text() == "525.147.05\n"
    assert host.modprobe("nvidia_uvm") == (1, "", "modprobe: ERROR: could not insert 'nvidia_uvm': Invalid argument\n")
    assert host.loaded() == ["nvidia"]
    assert host.modprobe("-r", "nvidia")[0] == 0
    assert host.modprobe("nvidia_uvm")[0] == 0
    assert host.sysmod("nvidia", "version").read_text() == VERSION + "\n"


def test_bad_parameter_is_refused_and_nothing_loaded(host):
    before = snapshot(host.root)
    assert host.modprobe("nvidia", "=1") == (
        1, "", "modprobe: ERROR: could not insert 'nvidia': Unknown symbol in module, or unknown parameter (see dmesg)\n")
    assert snapshot(host.root) == before


# ---- modprobe: remove

def test_the_roles_unload_order_removes_everything(host):
    for name in ("nvidia_uvm", "nvidia_drm", "nvidia_peermem"):
        assert host.modprobe(name)[0] == 0
    assert len(host.loaded()) == 5
    for name in ROLE_UNLOAD_ORDER:
        assert host.modprobe("--remove", name) == (0, "", ""), name
    assert host.loaded() == []


def test_remove_refused_while_a_module_holds_nvidia_and_nothing_after_is_removed(host):
    host.modprobe("nvidia_uvm")
    host.modprobe("nvidia_peermem")
    assert host.modprobe("-r", "nvidia_peermem", "nvidia", "nvidia_uvm") == (
        1, "", "modprobe: FATAL: Module nvidia is in use.\n")
    assert host.loaded() == ["nvidia", "nvidia_uvm"]           # peermem went, uvm was never reached
    assert host.sysmod("nvidia", "refcnt").read_text() == "1\n"
    assert host.modprobe("-r", "nvidia_uvm", "nvidia") == (0, "", "")
    assert host.loaded() == []


def test_remove_all_warns_and_goes_on(host):
    host.modprobe("nvidia_uvm")
    host.modprobe("nvidia_peermem")
    assert host.modprobe("-r", "-a", "nvidia", "nvidia_peermem") == (
        1, "", "modprobe: WARNING: Module nvidia is in use.\n")
    assert host.loaded() == ["nvidia", "nvidia_uvm"]


def test_removing_the_last_holder_also_removes_an_unused_dependency(host):
    host.modprobe("nvidia_uvm")
    host.modprobe("nvidia_modeset")
    assert host.modprobe("-r", "-v", "nvidia_uvm") == (0, "rmmod nvidia_uvm\n", "")
    assert host.loaded() == ["nvidia", "nvidia_modeset"]       # modeset still holds nvidia
    assert host.modprobe("-r", "-v", "nvidia_modeset") == (0, "rmmod nvidia_modeset\nrmmod nvidia\n", "")
    assert host.loaded() == []


def test_remove_of_a_module_not_loaded(host):
    assert host.modprobe("-r", "nvidia") == (0, "", "")
    assert host.modprobe("-r", "--first-time", "nvidia-current") == (
        1, "", "modprobe: FATAL: Module nvidia is not in kernel.\n")


def test_remove_refused_while_a_process_holds_a_device_node(host):
    host.modprobe("nvidia_uvm")
    host.hold(4242, 3, "/dev/nvidia-uvm")
    (host.root / "proc" / "77").mkdir()
    (host.root / "proc" / "77" / "fd").write_text("unreadable as a directory\n")   # skipped, like fuser
    (host.root / "proc" / "self").mkdir()
    before = snapshot(host.root)
    assert host.modprobe("-r", "nvidia_uvm") == (1, "", "modprobe: FATAL: Module nvidia_uvm is in use.\n")
    assert host.modprobe("-r", "nvidia") == (1, "", "modprobe: FATAL: Module nvidia is in use.\n")
    assert snapshot(host.root) == before
    os.unlink(str(host.root / "proc" / "4242" / "fd" / "3"))
    host.hold(4243, 7, str(host.root / "dev" / "nvidiactl"))   # a link into the prefix counts as /dev/nvidiactl
    host.hold(4243, 8, "/dev/nvidia-caps-imex-channels")         # not an nvidia.ko node in the fuser pattern
    assert host.modprobe("-r", "nvidia_uvm") == (0, "", "")     # nvidia stays: nvidiactl is open
    assert host.loaded() == ["nvidia"]
    assert host.modprobe("-r", "-q", "nvidia") == (1, "", "")
    assert host.loaded() == ["nvidia"]


def test_remove_refused_while_this_process_really_has_the_device_open(host):
    host.modprobe("nvidia")
    (host.root / "proc").rmdir()
    os.symlink("/proc", str(host.root / "proc"))                # the real /proc: this process's own fds
    device = host.root / "dev" / "nvidia0"
    device.write_text("")
    with open(str(device)) as handle:
        assert not handle.closed
        assert host.modprobe("-r", "nvidia") == (1, "", "modprobe: FATAL: Module nvidia is in use.\n")
        assert host.loaded() == ["nvidia"]
    assert host.modprobe("-r", "nvidia") == (0, "", "")
    assert host.loaded() == []


# ---- modprobe: options and other modules

@pytest.mark.parametrize("args, message", [
    (["--foo", "nvidia"], "unrecognized option '--foo'"),
    (["-x", "nvidia"], "invalid option -- 'x'"),
    (["-rx", "nvidia"], "invalid option -- 'x'"),
    (["--first-time=3", "nvidia"], "option '--first-time' doesn't allow an argument"),
    (["nvidia", "-w"], "option requires an argument -- 'w'"),
    (["--re", "nvidia"], "option '--re' is ambiguous; possibilities: '--remove' '--remove-dependencies' "
                         "'--remove-holders' '--resolve-alias'"),
])
def test_bad_options_give_getopts_error(host, args, message):
    before = snapshot(host.root)
    rc, out, err = host.modprobe(*args)
    assert (rc, out) == (1, "")
    assert err == "%s: %s\n" % (MODPROBE, message)
    assert snapshot(host.root) == before


def test_kmod_options_not_emulated_are_refused_and_no_name_is_missing_parameters(host):
    assert host.modprobe("-f", "nvidia") == (
        1, "", "modprobe: FATAL: stand-in: option '-f' is not emulated for the NVIDIA modules\n")
    assert host.modprobe("--remove-holders", "-r", "nvidia") == (
        1, "", "modprobe: FATAL: stand-in: option '--remove-holders' is not emulated for the NVIDIA modules\n")
    assert host.modprobe("-q") == (1, "", "modprobe: ERROR: missing parameters. See -h.\n")
    assert host.loaded() == []
    # abbreviations getopt_long accepts
    assert host.modprobe("--dry", "--verb", "nvidia")[0:2] == (0, "insmod /lib/modules/%s/updates/dkms/nvidia-current.ko \n" % KERNEL)
    assert host.loaded() == []


def test_other_modules_go_to_the_real_modprobe(host, tmp_path):
    real, log = fake_real(tmp_path, "real-modprobe", 7)
    host.env["MODPROBE_STANDIN_REAL"] = real
    assert host.modprobe("-q", "dummy", "numdummies=2") == (7, "", "")
    assert log.read_text().splitlines() == [real, "-q", "dummy", "numdummies=2"]
    log.unlink()
    host.modprobe("nvidia_uvm")
    assert not log.exists()                                    # NVIDIA names never reach it
    assert host.modprobe("-r", "-a", "nvidia_uvm", "dummy") == (1, "", "")
    assert log.read_text().splitlines() == [real, "-r", "-a", "dummy"]
    assert host.loaded() == []


def test_other_modules_without_a_real_modprobe_get_kmods_not_found(host):
    assert host.modprobe("dummy") == (
        1, "", "modprobe: FATAL: Module dummy not found in directory /lib/modules/%s\n" % KERNEL)
    assert host.modprobe("-r", "dummy") == (1, "", "modprobe: FATAL: Module dummy not found.\n")


# ---- dkms

def test_dkms_status_parses_as_installed_for_the_running_kernel(host):
    dkms_conf(host.root, name="nvidia-current-open", version="550.163.01")
    (host.root / "usr" / "src" / "linux-headers-x").mkdir()
    rc, out, err = host.dkms("status")
    assert (rc, err) == (0, "")
    assert out == ("nvidia-current/535.261.03, 6.1.0-28-amd64, x86_64: installed\n"
                   "nvidia-current-open/550.163.01, 6.1.0-28-amd64, x86_64: installed\n")
    entries = parse_dkms_status(out)
    assert dkms_state_for_kernel(entries, "nvidia-current", KERNEL, "535.261.03") == "installed"
    assert dkms_state_for_kernel(entries, "nvidia-current", KERNEL, "550.163.01") is None
    assert dkms_state_for_kernel(entries, "nvidia-current", "6.1.0-99-amd64") == "added"
    assert dkms_state_for_kernel(entries, "nvidia-current-open", KERNEL) == "installed"


def test_dkms_status_filters(host):
    dkms_conf(host.root, version="550.163.01")
    assert host.dkms("status", "-m", "nvidia-current", "-v", "550.163.01")[1] == (
        "nvidia-current/550.163.01, 6.1.0-28-amd64, x86_64: installed\n")
    assert host.dkms("status", "nvidia-current/535.261.03")[1] == (
        "nvidia-current/535.261.03, 6.1.0-28-amd64, x86_64: installed\n")
    assert host.dkms("status", "-m", "nvidia-current/535.261.03", "-k", "6.1.0-99-amd64")[1] == (
        "nvidia-current/535.261.03: added\n")
    assert host.dkms("status", "--module=other") == (0, "", "")
    out = host.dkms("status", "-k", KERNEL + "/aarch64")[1]
    assert parse_dkms_status(out)[0]["state"] == "added"
    assert host.dkms("-q", "status") == (0, "", "")


def test_dkms_errors_and_other_actions(host, tmp_path):
    rc, out, err = host.dkms("status", "--foo")
    assert (rc, err) == (2, "Error!  Unknown option: --foo\n")
    assert out.startswith("Usage: %s [action] [options]\n" % DKMS)
    assert host.dkms("build", "-m", "nvidia-current", "-v", VERSION) == (
        1, "", "Error! The dkms stand-in answers only 'status' and /usr/sbin/dkms is not installed: build was not run.\n")
    rc, out, err = host.dkms()
    assert (rc, err) == (1, 'Error! Unknown action specified: ""\n')
    real, log = fake_real(tmp_path, "real-dkms", 0)
    host.env["DKMS_STANDIN_REAL"] = real
    assert host.dkms("autoinstall", "-k", KERNEL) == (0, "", "")
    assert log.read_text().splitlines() == [real, "autoinstall", "-k", KERNEL]
    assert host.dkms("status")[1].endswith(": installed\n")   # status never goes to the real one


def test_calls_are_recorded_with_the_watched_units_states_only_when_asked(host, tmp_path):
    record = host.root / "var" / "log" / "gpu-native-test" / "modprobe-calls.jsonl"
    assert host.modprobe("nvidia")[0] == 0
    assert not record.exists()
    systemctl = tmp_path / "systemctl"
    systemctl.write_text('#!/bin/sh\n[ "$2" = timer-on.timer ] && { echo active; exit 0; }\necho inactive\nexit 3\n')
    systemctl.chmod(0o755)
    host.env["MODPROBE_STANDIN_SYSTEMCTL"] = str(systemctl)
    (host.root / "etc" / "modprobe-standin").mkdir(parents=True)
    (host.root / "etc" / "modprobe-standin" / "watch-units").write_text("# watched\ntimer-on.timer\ntimer-off.timer\n")
    assert host.modprobe("-r", "nvidia")[0] == 0
    host.env["MODPROBE_STANDIN_SYSTEMCTL"] = str(tmp_path / "no-such-systemctl")
    assert host.modprobe("nvidia")[0] == 0
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines == [{"argv": ["-r", "nvidia"], "units": {"timer-on.timer": "active", "timer-off.timer": "inactive"}},
                     {"argv": ["nvidia"], "units": {"timer-on.timer": "unknown", "timer-off.timer": "unknown"}}]
    assert host.loaded() == ["nvidia"]
