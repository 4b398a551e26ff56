"""fleet_compliance: the containerd, readiness, isolation and gpu_health checks, and the tool-run cache."""
import os
import stat

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import fleet_compliance as fc

V2 = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "%s"
"""


def _runner(out, rc=0):
    """A CachedTools whose processes are faked: every call answers ``out`` with ``rc``."""
    calls = []

    def run(argv, timeout, env_update=None):
        calls.append(argv)
        return rc, out.encode(), b"", False, False, 0.0
    return fc.CachedTools(runner=run, finder=lambda name: "/usr/bin/" + name), calls


def test_containerd_handler():
    runner, calls = _runner(V2 % "/usr/bin/nvidia-container-runtime")
    assert fc.check_containerd(runner, "nvidia", "/usr/bin/nvidia-container-runtime")["status"] == "pass"
    fc.check_containerd(runner, "nvidia", "/usr/bin/nvidia-container-runtime")
    assert len(calls) == 1  # cached
    runner, calls = _runner(V2 % "/usr/bin/runc")
    result = fc.check_containerd(runner, "nvidia", "/usr/bin/nvidia-container-runtime")
    assert result["status"] == "fail" and "/usr/bin/runc" in result["actual"]
    runner, calls = _runner(V2 % "x")
    assert fc.check_containerd(runner, "other", "x")["status"] == "fail"
    runner, calls = _runner("", rc=1)
    assert fc.check_containerd(runner, "nvidia", "x")["status"] == "fail"
    runner, calls = _runner("version = [")
    assert fc.check_containerd(runner, "nvidia", "x")["status"] == "error"


def test_readiness_freshness(tmp_path):
    path = tmp_path / "r.prom"
    path.write_text('# TYPE m gauge\ngpu_native_node_validation_last_success_ts_seconds{node="n"} 1000\n')
    assert fc.check_readiness(str(path), 600, now=1500)["status"] == "pass"
    assert fc.check_readiness(str(path), 600, now=1700)["status"] == "fail"
    path.write_text("other_metric 1\n")
    assert "absent" in fc.check_readiness(str(path), 600, now=1000)["actual"]
    assert fc.check_readiness(str(tmp_path / "missing"), 600)["status"] == "fail"


def test_unselected_checks_are_skipped_and_not_counted():
    result = fc.run_checks({"checks": ["readiness"]})
    assert [c["status"] for c in result["checks"]] == ["skip"] * 5
    assert [c["check"] for c in result["checks"]] == ["spec", "gpu_health", "containerd", "readiness", "isolation"]
    assert result["compliant"] is True and result["tool_runs"] == 0


# What the container_toolkit role leaves in the toolkit's config (the package's commented defaults around it).
TOOLKIT_OK = """accept-nvidia-visible-devices-as-volume-mounts = true
accept-nvidia-visible-devices-envvar-when-unprivileged = false
disable-require = false
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
ldconfig = "@/sbin/ldconfig.real"

[nvidia-container-runtime]
mode = "auto"
"""


def test_isolation_passes_on_the_roles_settings(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(TOOLKIT_OK)
    result = fc.check_isolation(str(path))
    assert result["status"] == "pass", result
    assert result["actual"] == ("accept-nvidia-visible-devices-envvar-when-unprivileged = false, "
                                "accept-nvidia-visible-devices-as-volume-mounts = true")
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in result["expected"]
    # through run_checks, with the module's option
    checks = fc.run_checks({"checks": ["isolation"], "toolkit_config": str(path)})
    assert checks["compliant"] is True and checks["checks"][-1]["status"] == "pass"


@pytest.mark.parametrize("text,fragment", [
    (TOOLKIT_OK.replace("unprivileged = false", "unprivileged = true"),
     "accept-nvidia-visible-devices-envvar-when-unprivileged = true"),
    (TOOLKIT_OK.replace("mounts = true", "mounts = false"), "accept-nvidia-visible-devices-as-volume-mounts = false"),
    # the package's own file: both keys commented out, so the toolkit's defaults (envvar accepted) apply
    (TOOLKIT_OK.replace("accept-nvidia", "#accept-nvidia"),
     "accept-nvidia-visible-devices-envvar-when-unprivileged is absent: the toolkit's default true applies"),
    (TOOLKIT_OK.replace("unprivileged = false", 'unprivileged = "false"'),
     "accept-nvidia-visible-devices-envvar-when-unprivileged = 'false'"),
    # the key inside a table is not the top-level setting the toolkit reads
    ("[nvidia-container-runtime]\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
     "accept-nvidia-visible-devices-as-volume-mounts = true\n", "is absent"),
])
def test_isolation_fails_on_drift(tmp_path, text, fragment):
    path = tmp_path / "config.toml"
    path.write_text(text)
    result = fc.check_isolation(str(path))
    assert result["status"] == "fail", result
    assert any(fragment in item for item in result["items"]), result
    assert "Fix: run the container_toolkit role" in result["actual"]
    checks = fc.run_checks({"checks": ["isolation"], "toolkit_config": str(path)})
    assert checks["compliant"] is False


def test_isolation_missing_unreadable_and_hostile_files(tmp_path):
    missing = fc.check_isolation(str(tmp_path / "absent.toml"))
    assert missing["status"] == "fail" and "is missing: the toolkit's defaults apply" in missing["actual"]
    broken = tmp_path / "broken.toml"
    broken.write_text("accept-nvidia-visible-devices-envvar-when-unprivileged = \n[")
    result = fc.check_isolation(str(broken))
    assert result["status"] == "error" and "invalid TOML" in result["actual"], result
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (fc.TOOLKIT_CONFIG_MAX_BYTES + 10))
    result = fc.check_isolation(str(big))
    assert result["status"] == "error" and "larger than" in result["actual"]
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe = 1\n")
    assert fc.check_isolation(str(binary))["status"] == "error"
    # not a regular file: a FIFO would block a plain open(); a directory is refused too
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(str(fifo))
    result = fc.check_isolation(str(fifo))
    assert result["status"] == "error", result
    assert fc.check_isolation(str(tmp_path))["status"] == "error"


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
STANDINS = os.path.join(REPO, "tests", "standins")
XID79 = "[ 1234.567] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"


def _tool(folder, name, body):
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _node_without_root(tmp_path, monkeypatch):
    """A healthy H100 node (nvidia-smi stand-in) whose kernel log the remote user may not read: journalctl answers
    rc=0 with systemd's hint and no entries, dmesg fails with EPERM (kernel.dmesg_restrict=1)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "journalctl", 'echo "-- No entries --"\n'
          'echo "Hint: You are currently not seeing messages from other users and the system." >&2\nexit 0\n')
    _tool(bin_dir, "dmesg", 'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("NVIDIA_SMI_STANDIN_CAPTURE", os.path.join(STANDINS, "captures", "h100x8-healthy"))
    return {"checks": ["gpu_health"], "nvidia_smi": os.path.join(STANDINS, "nvidia-smi"),
            "lspci": str(tmp_path / "no-lspci"), "pci_sysfs_root": str(tmp_path / "no-sysfs")}


def test_an_unreadable_kernel_log_is_an_error_naming_the_source_and_become(tmp_path, monkeypatch):
    params = _node_without_root(tmp_path, monkeypatch)
    result = fc.run_checks(params)
    health = [c for c in result["checks"] if c["check"] == "gpu_health"][0]
    assert health["status"] == "error" and result["compliant"] is False
    assert "the kernel log cannot be read (unavailable (journalctl: You are currently not seeing messages" in \
        health["actual"]
    assert "dmesg exited with rc=1: dmesg: read kernel buffer failed: Operation not permitted" in health["actual"]
    assert "Fix: run as root (become: true" in health["actual"]


def test_a_readable_kernel_log_file_is_judged(tmp_path, monkeypatch):
    params = _node_without_root(tmp_path, monkeypatch)
    log = tmp_path / "kern.log"
    log.write_text(XID79)
    health = fc.check_gpu_health(fc.tools_for(params), dict(params, kernel_log=str(log)))
    assert health["status"] == "fail" and "79" in health["actual"]
    log.write_text("")
    health = fc.check_gpu_health(fc.tools_for(params), dict(params, kernel_log=str(log)))
    assert health["status"] in ("pass", "fail") and "kernel log cannot be read" not in health["actual"]
