"""The shared runner: each distinct failure is its own status, live and replayed."""
import os
import stat
import time

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeTools, NodeToolsError

from testlib import modules_loaded_by


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_ok_runs_with_c_locale(tmp_path):
    tool = _script(tmp_path, "nvidia-smi", 'echo "LC_ALL=$LC_ALL"')
    result = NodeTools(paths={"nvidia-smi": tool}).run("nvidia-smi", ["-L"])
    assert result.status == node_tools.OK
    assert result.stdout.strip() == "LC_ALL=C"
    assert result.argv == [tool, "-L"]


def test_missing_binary(tmp_path):
    result = NodeTools(paths={"nvidia-smi": str(tmp_path / "absent")}).run("nvidia-smi", ["-q"])
    assert result.status == node_tools.MISSING
    assert "was not found" in result.message


def test_missing_on_path(tmp_path):
    result = NodeTools(path_dirs=[str(tmp_path)]).run("definitely-not-a-tool-xyz", [])
    assert result.status == node_tools.MISSING


def test_no_driver_whatever_the_exit_code(tmp_path):
    tool = _script(tmp_path, "nvidia-smi",
                   "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                   "Make sure that the latest NVIDIA driver is installed and running.\"; exit 9")
    result = NodeTools(paths={"nvidia-smi": tool}).run("nvidia-smi", [])
    assert result.status == node_tools.NO_DRIVER
    assert "could not communicate with the NVIDIA driver" in result.message


def test_timeout_kills_the_process_group(tmp_path):
    marker = tmp_path / "child-survived"
    # The child outlives its parent unless the whole group is killed.
    tool = _script(tmp_path, "nvidia-smi", "(sleep 3; touch %s) & sleep 30" % marker)
    started = time.time()
    result = NodeTools(paths={"nvidia-smi": tool}, timeout=1).run("nvidia-smi", [])
    assert time.time() - started < 10
    assert result.status == node_tools.TIMEOUT
    assert result.message == "nvidia-smi did not answer within 1 s."
    time.sleep(3.5)
    assert not marker.exists()


def test_non_zero_exit(tmp_path):
    tool = _script(tmp_path, "lspci", "echo 'pcilib: cannot open /sys/bus/pci' >&2; exit 1")
    result = NodeTools(paths={"lspci": tool}).run("lspci", ["-nnD"])
    assert result.status == node_tools.FAILED
    assert result.message == "lspci exited with rc=1: pcilib: cannot open /sys/bus/pci"


def test_garbage_output_is_unreadable(tmp_path):
    tool = _script(tmp_path, "nvidia-smi", r"printf 'GPU\000\001\002'")
    result = NodeTools(paths={"nvidia-smi": tool}).run("nvidia-smi", [])
    assert result.status == node_tools.UNREADABLE
    assert "NUL" in result.message


def test_output_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(node_tools, "MAX_OUTPUT_BYTES", 1024)
    tool = _script(tmp_path, "dmesg", "head -c 5000 /dev/zero | tr '\\0' x")
    result = NodeTools(paths={"dmesg": tool}).run("dmesg", [])
    assert result.status == node_tools.UNREADABLE
    assert len(result.stdout) == 1024


def test_invalid_utf8_becomes_replacement_characters(tmp_path):
    tool = _script(tmp_path, "nvidia-smi", r"printf 'NVIDIA \377\376 H100\n'")
    result = NodeTools(paths={"nvidia-smi": tool}).run("nvidia-smi", [])
    assert result.status == node_tools.OK
    assert result.stdout == "NVIDIA \ufffd\ufffd H100\n"
    result.stdout.encode("utf-8")


def test_captured_replay_goes_through_the_same_checks():
    tools = NodeTools(source="captured", captured={
        "nvidia_smi": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "lspci": "0000:17:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2330] (rev a1)\n",
    })
    assert tools.run("nvidia-smi", [], capture_key="nvidia_smi").status == node_tools.NO_DRIVER
    lspci = tools.run("lspci", ["-nnD"], capture_key="lspci")
    assert lspci.status == node_tools.OK and lspci.source == "captured"
    absent = tools.run("nvidia-smi", ["-q", "-x"], capture_key="nvidia_smi_xml")
    assert absent.status == node_tools.NOT_CAPTURED
    assert [call.status for call in tools.calls] == ["no_driver", "ok", "not_captured"]


def test_captured_surrogates_are_replaced():
    text = b"<name>\xff\xfe</name>".decode("utf-8", "surrogateescape")
    result = NodeTools(source="captured", captured={"x": text}).run("nvidia-smi", [], capture_key="x")
    result.stdout.encode("utf-8")


@pytest.mark.parametrize("bad", [True, "30", 0, -1, 10 ** 9])
def test_bad_timeouts_are_refused(bad):
    with pytest.raises(NodeToolsError):
        NodeTools(timeout=bad)


def test_run_command_adapter(tmp_path):
    tool = _script(tmp_path, "journalctl", "sleep 5")
    tools = NodeTools(timeout=1)
    assert tools.run_command([str(tmp_path / "nope")])[0] == 127
    rc, _out, err = tools.run_command([tool, "-k"])
    assert rc == 124 and "did not answer within 1 s" in err


def test_an_overall_deadline_bounds_each_call_and_then_stops_running():
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common.http_deadline import Deadline
    clock = [0.0]
    given = []

    def runner(argv, timeout, env_update=None):
        given.append(timeout)
        clock[0] += 25  # each call takes 25 s
        return 0, b"ok\n", b"", False, False, 25.0
    tools = NodeTools(runner=runner, finder=lambda name: "/usr/bin/" + name, deadline=Deadline(60, clock=lambda: clock[0]))
    results = [tools.run("nvidia-smi", ["-i", str(i)]) for i in range(5)]
    assert [r.status for r in results] == [node_tools.OK, node_tools.OK, node_tools.OK, node_tools.TIMEOUT,
                                           node_tools.TIMEOUT]
    assert given == [30, 30, 10]  # nvidia-smi's own 30 s, then only what is left of the 60 s
    assert results[3].message == "nvidia-smi not run: the task's overall deadline passed."


# -- temporary files without the tempfile module (issue #32: the readiness agent's imports) ----------------------
def test_temporary_file_is_anonymous_in_the_first_tmpdir(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with node_tools.temporary_file() as handle:
        handle.write(b"out\x00put")
        handle.seek(0)
        assert handle.read() == b"out\x00put"
        assert "b" in handle.mode and "+" in handle.mode
        assert os.listdir(str(tmp_path)) == []  # O_TMPFILE: no name, nothing left behind
        assert os.fstat(handle.fileno()).st_dev == os.stat(str(tmp_path)).st_dev
        assert not os.get_inheritable(handle.fileno())


def test_temporary_file_falls_back_to_tempfile_where_the_folder_is_refused(tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path / "missing"))
    calls = []
    original = tempfile.TemporaryFile
    monkeypatch.setattr(tempfile, "TemporaryFile", lambda: calls.append(1) or original(dir=str(tmp_path)))
    with node_tools.temporary_file() as handle:
        handle.write(b"x")
        handle.seek(0)
        assert handle.read() == b"x"
    assert calls == [1]


def test_run_process_output_through_the_temporary_files(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    rc, out, err, timed_out, truncated, _duration = node_tools.run_process(
        ["sh", "-c", "printf out; printf err >&2"], 10)
    assert (rc, out, err, timed_out, truncated) == (0, b"out", b"err", False, False)
    assert os.listdir(str(tmp_path)) == []


def test_make_temporary_is_mkstemp(tmp_path):
    handle, path = node_tools.make_temporary(str(tmp_path), ".metrics.prom.", ".tmp")
    try:
        assert os.path.isabs(path) and os.path.dirname(path) == str(tmp_path)
        name = os.path.basename(path)
        assert name.startswith(".metrics.prom.") and name.endswith(".tmp") and len(name) > len(".metrics.prom..tmp")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert not os.get_inheritable(handle)
        os.write(handle, b"data")
    finally:
        os.close(handle)
    with open(path, "rb") as stream:
        assert stream.read() == b"data"
    other, other_path = node_tools.make_temporary(str(tmp_path), ".metrics.prom.", ".tmp")
    os.close(other)
    assert other_path != path


def test_make_temporary_never_reuses_or_follows_an_existing_name(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    names = iter([b"\x00" * 6, b"\x00" * 6, b"\x01" * 6])
    monkeypatch.setattr(node_tools.os, "urandom", lambda size: next(names))
    os.symlink(str(victim), str(tmp_path / (".f." + "00" * 6 + ".tmp")))
    handle, path = node_tools.make_temporary(str(tmp_path), ".f.", ".tmp")
    os.close(handle)
    assert os.path.basename(path) == ".f." + "01" * 6 + ".tmp"
    assert victim.read_text() == "keep"


def test_importing_node_tools_does_not_import_tempfile():
    assert modules_loaded_by(
        "from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools",
        ("tempfile", "shutil", "random", "bz2", "lzma")) == []
