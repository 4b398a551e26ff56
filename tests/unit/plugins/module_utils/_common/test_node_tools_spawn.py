# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runner starts tools with os.posix_spawn as subprocess.Popen started them (issue 32, item 3).

Popen(argv, stdin=DEVNULL, stdout=file, stderr=file, env=env, close_fds=True, start_new_session=True) gave the child
/dev/null as stdin, no other inherited descriptor, its own session, SIGPIPE at its default, a bare name looked up in
the child environment's PATH, and the exit code (minus the signal for a killed child); the runner keeps all of that
without importing subprocess or signal."""
import os
import subprocess
import sys

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools

from testlib import modules_loaded_by

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_spawn"), reason="os.posix_spawn is the path measured")


def _run(code, timeout=10, env_update=None):
    return node_tools.run_process([sys.executable, "-I", "-S", "-c", code], timeout, env_update)


def test_the_child_sees_what_popen_gave_it(tmp_path):
    # the ignored signals as the kernel shows them at exec (a Python child ignores SIGPIPE again itself), the
    # standard ones only: glibc's posix_spawn leaves its own internal signals 32 and 33 ignored
    code = ("import os, sys; "
            "fds = sorted(int(n) for n in os.listdir('/proc/self/fd') if int(n) > 2); "
            "ignored = int(open('/proc/self/status').read().split('SigIgn:')[1].split()[0], 16) & 0x7fffffff; "
            "print(os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid(), "
            "hex(ignored), os.readlink('/proc/self/fd/0'), "
            "os.environ['LC_ALL'], os.environ.get('EXTRA'), len(fds) <= 1)")
    inherited = os.open(str(tmp_path / "leak"), os.O_CREAT | os.O_WRONLY)
    os.set_inheritable(inherited, True)
    try:
        rc, out, err, timed_out, truncated, _duration = _run(code, env_update={"EXTRA": "x"})
    finally:
        os.close(inherited)
    assert (rc, err, timed_out, truncated) == (0, b"", False, False)
    assert out.split()[:2] == [b"True", b"True"] and out.split()[3:] == [b"/dev/null", b"C", b"x", b"True"]
    # the same probe under Popen, as the runner ran it before: the same answers
    popen = subprocess.run([sys.executable, "-I", "-S", "-c", code], stdin=subprocess.DEVNULL, capture_output=True,
                           env=dict(os.environ, LC_ALL="C", EXTRA="x"), close_fds=True, start_new_session=True,
                           check=True)
    assert popen.stdout.split() == out.split()


def test_exit_codes_and_signals_read_as_popen_returncode():
    assert _run("import sys; sys.exit(3)")[0] == 3
    assert _run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")[0] == -15


def test_a_bare_name_is_looked_up_in_the_childs_path(tmp_path):
    tool = tmp_path / "only-here"
    tool.write_text("#!/bin/sh\necho found\n")
    tool.chmod(0o755)
    rc, out, _err, _t, _c, _d = node_tools.run_process(["only-here"], 10, {"PATH": str(tmp_path)})
    assert (rc, out) == (0, b"found\n")
    with pytest.raises(FileNotFoundError):
        node_tools.run_process(["only-here"], 10, {"PATH": str(tmp_path / "none")})


def test_a_file_that_cannot_be_executed_raises_oserror(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    with pytest.raises(OSError):
        node_tools.run_process([str(plain)], 10)


def test_a_timeout_kills_the_group_and_gives_no_rc(tmp_path):
    marker = tmp_path / "child-alive"
    code = ("import os, sys, time; pid = os.fork()\n"
            "if pid == 0:\n    time.sleep(3); open(sys.argv[1], 'w').close(); os._exit(0)\n"
            "time.sleep(30)")
    rc, _out, _err, timed_out, _cut, duration = node_tools.run_process(
        [sys.executable, "-I", "-S", "-c", code, str(marker)], 0.5)
    assert (rc, timed_out) == (None, True) and duration < 5
    import time
    time.sleep(3.5)
    assert not marker.exists()  # the grandchild was in the killed group


def test_importing_node_tools_loads_neither_subprocess_nor_signal():
    assert modules_loaded_by(
        "from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools; "
        "node_tools.run_process(['/bin/true'], 5)", ("subprocess", "signal", "threading", "selectors")) == []
