# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""One way to run the node's NVIDIA and system tools.

Every module, ``spec_facts`` and the readiness agent run ``nvidia-smi``,
``dcgmi``, ``lspci``, ``nvidia-ctk``, ``nvidia-mig-parted``, ``journalctl`` and
``dmesg`` through :class:`NodeTools`.  It

- finds the binary on ``PATH`` and the usual sbin/bin folders, or takes an
  explicit path;
- runs it with ``LC_ALL=C``, no stdin, in its own process group, with a
  timeout per call; on timeout the whole group is killed (``nvidia-smi`` on a
  GPU that fell off the bus can block for minutes, and it forks helpers);
- keeps at most :data:`MAX_OUTPUT_BYTES` of each stream (spooled to a
  temporary file, so a tool that prints gigabytes cannot exhaust memory);
- tells apart, as distinct statuses: the binary is missing, the driver is not
  loaded, the call timed out, it exited non-zero, its output is unreadable;
- replays captured output through the same code path: with
  ``source='captured'`` the bytes come from a dict instead of a process, and
  the driver and readability checks are the same.

Standard library only, Python 3.8+: this file is also copied onto nodes for
the readiness agent.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import time

# The signal numbers without importing signal or subprocess: together they cost the readiness agent, which runs
# every minute on every GPU node, about a seventh of a run (enum conversions, threading, selectors; issue #32).
# _signal is the interpreter's own C module, loaded at start-up; signal re-exports the same numbers.
import _signal  # pylint: disable=wrong-import-order

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import first_line

#: Statuses of a :class:`ToolResult`.
OK = "ok"
MISSING = "missing"
NO_DRIVER = "no_driver"
TIMEOUT = "timeout"
FAILED = "failed"
UNREADABLE = "unreadable"
NOT_CAPTURED = "not_captured"
STATUSES = (OK, MISSING, NO_DRIVER, TIMEOUT, FAILED, UNREADABLE, NOT_CAPTURED)

#: Default timeout in seconds per tool.  ``dcgmi diag`` callers pass their
#: own (a level-3 run takes about 15 minutes).
DEFAULT_TIMEOUTS = {
    "nvidia-smi": 30,
    "dcgmi": 120,
    "lspci": 15,
    "nvidia-ctk": 30,
    "nvidia-mig-parted": 600,
    "journalctl": 30,
    "dmesg": 15,
    "dkms": 120,
    "modinfo": 15,
    "mokutil": 15,
}
FALLBACK_TIMEOUT = 30

#: Each stream is cut after this many bytes and the result marked unreadable:
#: no healthy tool prints this much, and the parsers are bounded by it too.
MAX_OUTPUT_BYTES = 32 * 1024 * 1024

#: Folders searched after ``PATH`` (nvidia-smi, lspci and kubelet often live
#: outside a non-login ``PATH``).
SYSTEM_BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

#: What ``nvidia-smi`` (and NVML users such as ``dcgmi``) print when the
#: kernel module is not loaded or does not answer; the exit code varies.
NO_DRIVER_MARKERS = (
    "couldn't communicate with the nvidia driver",
    "could not communicate with the nvidia driver",
    "nvidia-smi has failed because",
    "nvml: driver not loaded",
    "driver/library version mismatch",
)

_NO_DRIVER_TOOLS = ("nvidia-smi",)


class ToolResult(object):
    """The outcome of one tool call, live or replayed."""

    __slots__ = ("tool", "argv", "status", "rc", "stdout", "stderr", "duration_s", "timeout_s", "source", "detail")

    def __init__(self, tool, argv, status, rc=None, stdout="", stderr="", duration_s=0.0, timeout_s=None,
                 source="live", detail=""):
        self.tool = tool
        self.argv = list(argv)
        self.status = status
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.duration_s = duration_s
        self.timeout_s = timeout_s
        self.source = source
        self.detail = detail

    @property
    def ok(self):
        return self.status == OK

    @property
    def command(self):
        """The command line as text (``captured:<key>`` for replays)."""
        return " ".join(self.argv)

    @property
    def message(self):
        """One line saying what happened, for ``reasons`` and ``fail_json``."""
        name = self.tool
        if self.status == OK:
            return "%s answered (rc=%s)." % (name, self.rc)
        if self.status == MISSING:
            return "%s was not found%s." % (name, " (%s)" % self.detail if self.detail else "")
        if self.status == NOT_CAPTURED:
            return "%s output was not captured (%s)." % (name, self.detail)
        if self.status == NO_DRIVER:
            cause = first_line(self.detail or self.stdout or self.stderr, 240)
            return "%s could not communicate with the NVIDIA driver: %s" % (name, cause)
        if self.status == TIMEOUT and self.detail:
            return "%s %s." % (name, self.detail)
        if self.status == TIMEOUT:
            return "%s did not answer within %s s." % (name, _fmt_seconds(self.timeout_s))
        if self.status == FAILED:
            return "%s exited with rc=%s: %s" % (
                name, self.rc, first_line(self.stderr or self.stdout, 240) or "no output")
        return "%s output is unreadable: %s" % (name, self.detail or "unknown reason")

    def as_dict(self):
        return {
            "tool": self.tool,
            "command": self.command,
            "status": self.status,
            "rc": self.rc,
            "duration_s": round(self.duration_s, 3),
            "timeout_s": self.timeout_s,
            "source": self.source,
            "message": self.message,
        }


class NodeToolsError(FleetError):
    """A caller mistake (bad option), not a tool failure."""


def _fmt_seconds(value):
    if value is None:
        return "?"
    if float(value) == int(value):
        return str(int(value))
    return "%.1f" % value


def _looks_like_no_driver(tool, text):
    if tool not in _NO_DRIVER_TOOLS:
        return False
    lowered = (text or "").lower()
    return any(marker in lowered for marker in NO_DRIVER_MARKERS)


def decode_output(data):
    """Bytes -> text.  Invalid UTF-8 becomes U+FFFD (never lone surrogates,
    which ElementTree and JSON encoders refuse)."""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    if data is None:
        return ""
    text = str(data)
    # Text that arrived through Ansible may carry surrogate escapes.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogateescape" if _has_only_escapes(text) else "replace").decode(
            "utf-8", "replace")
    return text


def _has_only_escapes(text):
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


def _unreadable_reason(text):
    if "\x00" in text:
        return "it holds NUL bytes (binary data, not tool output)"
    return ""


def find_tool(name, path_dirs=None):
    """Absolute path of ``name`` (a bare name or an explicit path), or ``None``."""
    if not name:
        return None
    if os.path.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    dirs = list(path_dirs) if path_dirs is not None else [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    dirs.extend(d for d in SYSTEM_BIN_DIRS if d not in dirs)
    for directory in dirs:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


# Temporary files without the tempfile module: importing it loads shutil, bz2, lzma, random and weakref (about a
# fifth of the readiness agent's imports, issue #32), and the runner only needs the two calls below.  Where the
# short path is refused, tempfile itself does the work, with its own search for a usable folder.
_TMPDIR_VARIABLES = ("TMPDIR", "TEMP", "TMP")


def _temporary_dir():
    """The folder tempfile.gettempdir() tries first: $TMPDIR, $TEMP, $TMP, else /tmp."""
    for name in _TMPDIR_VARIABLES:
        value = os.environ.get(name)
        if value:
            return value
    return "/tmp"


def temporary_file():
    """An anonymous read-write binary file, deleted when closed: ``tempfile.TemporaryFile()``.

    Linux's O_TMPFILE (what tempfile.TemporaryFile uses there too) in the first folder tempfile would try; anywhere
    that is refused (no O_TMPFILE, the folder missing or not writable), tempfile.TemporaryFile() itself."""
    flags = getattr(os, "O_TMPFILE", 0)
    if flags:
        try:
            handle = os.open(_temporary_dir(), flags | os.O_RDWR | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError:
            pass
        else:
            return os.fdopen(handle, "w+b")
    import tempfile  # pylint: disable=import-outside-toplevel
    return tempfile.TemporaryFile()


def make_temporary(directory, prefix, suffix):
    """``(fd, absolute path)`` of a new file only this user may read and write in ``directory``, named
    ``prefix + random + suffix``: ``tempfile.mkstemp(prefix=, suffix=, dir=)`` (O_EXCL, never through a link)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for _attempt in range(100):
        path = os.path.join(directory, prefix + os.urandom(6).hex() + suffix)
        try:
            return os.open(path, flags, 0o600), os.path.abspath(path)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name in %s" % directory)


def _read_capped(handle, limit):
    handle.seek(0)
    data = handle.read(limit + 1)
    return data[:limit], len(data) > limit


def _kill_group(pid):
    try:
        os.killpg(pid, _signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, _signal.SIGKILL)
        except OSError:
            pass


class _Timeout(FleetError):
    """The process did not exit within the time given to :func:`_wait`."""


def _exit_code(status):
    """``Popen.returncode`` of a ``waitpid`` status: the exit code, or minus the signal that killed the process."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return status  # pragma: no cover - stopped processes are not reported without WUNTRACED


def _wait(pid, timeout):
    """The exit code of child ``pid``, waiting at most ``timeout`` seconds (None: no limit), as
    ``subprocess.Popen.wait`` polls (``waitpid(WNOHANG)``, sleeps doubling from 0.5 ms to 50 ms); raises
    :class:`_Timeout`."""
    try:
        if timeout is None:
            return _exit_code(os.waitpid(pid, 0)[1])
        end = time.monotonic() + timeout
        delay = 0.0005
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return _exit_code(status)
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise _Timeout()
            delay = min(delay * 2, remaining, 0.05)
            time.sleep(delay)
    except ChildProcessError:
        return 0  # reaped elsewhere: what Popen.wait answers then


def _spawn(argv, env, out_fd, err_fd):
    """Start ``argv`` as ``subprocess.Popen(argv, stdin=DEVNULL, stdout=out_fd, stderr=err_fd, env=env,
    close_fds=True, start_new_session=True)`` starts it, with ``os.posix_spawn``; return its pid.

    The child gets /dev/null as stdin, the two files as stdout and stderr, no other inherited descriptor, its own
    session (and so process group), and SIGPIPE and SIGXFSZ at their defaults (Popen's restore_signals).  A binary
    that cannot be executed raises OSError, as Popen does."""
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0),
               (os.POSIX_SPAWN_DUP2, out_fd, 1), (os.POSIX_SPAWN_DUP2, err_fd, 2)]
    # close_fds: descriptors are created non-inheritable (PEP 446), so only ones made inheritable on purpose
    # would reach the child; close those
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        try:
            fd = int(name)
            if fd > 2 and fd not in (out_fd, err_fd) and os.get_inheritable(fd):
                actions.append((os.POSIX_SPAWN_CLOSE, fd))
        except (ValueError, OSError):
            continue  # the listing's own descriptor, closed by now
    defaults = tuple(getattr(_signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(_signal, name))
    program = argv[0]
    if os.path.sep not in program:
        # a bare name is looked up as Popen looks it up: in the PATH of the child's environment
        found = [os.path.join(directory, program) for directory in os.get_exec_path(env)]
        found = [path for path in found if os.path.isfile(path) and os.access(path, os.X_OK)]
        if not found:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", program)
        program = found[0]
    return os.posix_spawn(program, argv, env, file_actions=actions, setsid=True, setsigdef=defaults)


def _popen_run(argv, timeout, env, out_file, err_file):
    """``(rc, timed_out)`` through subprocess, where os.posix_spawn is missing (not Linux, or an old Python)."""
    import subprocess  # pylint: disable=import-outside-toplevel
    proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
        argv, stdin=subprocess.DEVNULL, stdout=out_file, stderr=err_file, env=env,
        close_fds=True, start_new_session=True)
    try:
        return proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process in D state
            pass
        return None, True


def run_process(argv, timeout, env_update=None, max_bytes=None):
    """Run ``argv``; return ``(rc, stdout_bytes, stderr_bytes, timed_out, truncated, duration)``.

    ``rc`` is ``None`` when the process was killed on timeout.  Raises
    ``OSError`` when it cannot be started.
    """
    if max_bytes is None:
        max_bytes = MAX_OUTPUT_BYTES
    env = dict(os.environ)
    env.update({"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C"})
    if env_update:
        env.update(env_update)
    started = time.time()
    with temporary_file() as out_file, temporary_file() as err_file:
        if not hasattr(os, "posix_spawn"):
            rc, timed_out = _popen_run(argv, timeout, env, out_file, err_file)
        else:
            pid = _spawn(list(argv), env, out_file.fileno(), err_file.fileno())
            timed_out = False
            try:
                rc = _wait(pid, timeout)
            except _Timeout:
                timed_out = True
                _kill_group(pid)
                try:
                    _wait(pid, 5)
                except _Timeout:  # pragma: no cover - a process in D state
                    pass
                rc = None
        out, out_cut = _read_capped(out_file, max_bytes)
        err, err_cut = _read_capped(err_file, max_bytes)
    return rc, out, err, timed_out, out_cut or err_cut, time.time() - started


class NodeTools(object):
    """Runs tools live, or replays ``captured`` texts through the same checks.

    ``paths`` maps a tool name to an explicit path or another name
    (``{"nvidia-smi": "/opt/nvidia/bin/nvidia-smi"}``); ``timeouts`` overrides
    :data:`DEFAULT_TIMEOUTS` per tool, ``timeout`` all of them.
    ``captured`` maps a capture key (``nvidia_smi_xml``, ``lspci`` ...) to the
    text a tool printed; with ``source='captured'`` nothing is executed.
    """

    def __init__(self, source="live", captured=None, paths=None, timeout=None, timeouts=None, path_dirs=None,
                 runner=None, finder=None, deadline=None):
        if source not in ("live", "captured"):
            raise NodeToolsError("source must be live or captured, not %r." % (source,))
        if timeout is not None:
            _check_timeout("command_timeout", timeout)
        self.source = source
        self.captured = dict(captured or {})
        self.paths = dict(paths or {})
        self.timeout = timeout
        self.timeouts = dict(DEFAULT_TIMEOUTS)
        for name, value in (timeouts or {}).items():
            _check_timeout("timeout for %s" % name, value)
            self.timeouts[name] = value
        self.path_dirs = path_dirs
        # ``runner(argv, timeout)`` -> (rc, out_bytes, err_bytes, timed_out,
        # truncated, duration); tests inject one to avoid real processes.
        self._runner = runner or run_process
        # ``finder(name)`` -> path or None replaces the PATH lookup (tests).
        self._finder = finder
        # ``deadline`` (an object with ``left()``, such as http_deadline.Deadline): the task's overall bound. Each
        # call gets at most the time left; once it is spent, nothing more runs (status timeout), so a module that
        # runs a tool per device cannot take devices x timeout.
        self.deadline = deadline
        self.calls = []

    def timeout_for(self, tool, timeout=None):
        if timeout is not None:
            _check_timeout("timeout for %s" % tool, timeout)
            return timeout
        if self.timeout is not None:
            return self.timeout
        return self.timeouts.get(tool, FALLBACK_TIMEOUT)

    def which(self, tool):
        if self._finder is not None:
            return self._finder(self.paths.get(tool, tool))
        return find_tool(self.paths.get(tool, tool), self.path_dirs)

    def run(self, tool, args, capture_key=None, timeout=None, env_update=None):
        """Run ``tool args`` (or replay ``captured[capture_key]``); return a :class:`ToolResult`."""
        if self.source == "captured":
            return self._replay(tool, args, capture_key)
        limit = self.timeout_for(tool, timeout)
        if self.deadline is not None:
            left = self.deadline.left()
            if left < 1:
                result = ToolResult(tool, [self.paths.get(tool, tool)] + list(args), TIMEOUT, timeout_s=0,
                                    detail="not run: the task's overall deadline passed")
                self.calls.append(result)
                return result
            limit = min(limit, left) if limit else left
        binary = self.which(tool)
        if binary is None:
            wanted = self.paths.get(tool, tool)
            where = wanted if os.path.sep in wanted else "looked in PATH and %s" % ":".join(SYSTEM_BIN_DIRS)
            result = ToolResult(tool, [wanted] + list(args), MISSING, timeout_s=limit, detail=where)
            self.calls.append(result)
            return result
        argv = [binary] + list(args)
        try:
            rc, out, err, timed_out, truncated, duration = self._runner(argv, limit, env_update)
        except (OSError, ValueError) as exc:  # ValueError: an argument holds a NUL byte
            result = ToolResult(tool, argv, MISSING, timeout_s=limit, detail="%s: %s" % (
                binary, getattr(exc, "strerror", None) or exc))
            self.calls.append(result)
            return result
        result = self._judge(tool, argv, rc, decode_output(out), decode_output(err), timed_out, truncated,
                             duration, limit, "live")
        self.calls.append(result)
        return result

    def _replay(self, tool, args, capture_key):
        argv = ["captured:%s" % (capture_key or tool)]
        text = self.captured.get(capture_key) if capture_key else None
        if text is None:
            result = ToolResult(tool, argv, NOT_CAPTURED, source="captured",
                                detail="no captured.%s" % (capture_key or tool))
        else:
            raw = text
            truncated = False
            if isinstance(raw, bytes) and len(raw) > MAX_OUTPUT_BYTES:
                raw, truncated = raw[:MAX_OUTPUT_BYTES], True
            decoded = decode_output(raw)
            if len(decoded) > MAX_OUTPUT_BYTES:
                decoded, truncated = decoded[:MAX_OUTPUT_BYTES], True
            result = self._judge(tool, argv, 0, decoded, "", False, truncated, 0.0, None, "captured")
        self.calls.append(result)
        return result

    @staticmethod
    def _judge(tool, argv, rc, out, err, timed_out, truncated, duration, limit, source):
        if timed_out:
            return ToolResult(tool, argv, TIMEOUT, rc, out, err, duration, limit, source)
        if truncated:
            return ToolResult(tool, argv, UNREADABLE, rc, out, err, duration, limit, source,
                              "more than %d MiB of output" % (MAX_OUTPUT_BYTES // (1024 * 1024)))
        if _looks_like_no_driver(tool, out + "\n" + err):
            return ToolResult(tool, argv, NO_DRIVER, rc, out, err, duration, limit, source,
                              first_line(_no_driver_line(out + "\n" + err), 240))
        reason = _unreadable_reason(out)
        if reason:
            return ToolResult(tool, argv, UNREADABLE, rc, out, err, duration, limit, source, reason)
        if rc not in (0, None):
            return ToolResult(tool, argv, FAILED, rc, out, err, duration, limit, source)
        return ToolResult(tool, argv, OK, rc, out, err, duration, limit, source)

    def run_command(self, argv, timeout=None):
        """``(rc, stdout, stderr)`` for callers written against ``run_command``.

        ``argv[0]`` is the tool.  A missing binary gives rc 127 and a timeout
        rc 124, as a shell would.
        """
        tool = os.path.basename(argv[0])
        if os.path.sep in argv[0]:
            self.paths.setdefault(tool, argv[0])
        result = self.run(tool, argv[1:], timeout=timeout)
        if result.status == MISSING:
            return 127, "", result.message
        if result.status == TIMEOUT:
            return 124, result.stdout, result.message
        return (result.rc if result.rc is not None else 1), result.stdout, result.stderr


def _no_driver_line(text):
    for line in (text or "").splitlines():
        lowered = line.lower()
        if any(marker in lowered for marker in NO_DRIVER_MARKERS):
            return line
    return text


def _check_timeout(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NodeToolsError("%s must be a number of seconds, not %r. Fix: pass e.g. 30." % (name, value))
    if not 0 < value <= 86400:  # also refuses NaN
        raise NodeToolsError("%s is %g. Fix: pass a number of seconds above 0 and at most 86400." % (name, value))


#: Options every tool-running module shares (see doc fragment node_tools).
def argument_spec(default_timeout=None, tools=("nvidia_smi",), source=True):
    """``source`` (unless ``source=False``), ``command_timeout`` and one path option per tool.

    Modules with ``source`` add their own ``captured`` (its keys differ per module)."""
    spec = {"command_timeout": dict(type="float", default=default_timeout)}
    if source:
        spec["source"] = dict(type="str", choices=["live", "captured"], default="live")
    for option in tools:
        spec[option] = dict(type="str", default=option.replace("_", "-"))
    return spec


def from_module_params(params, captured=None, tools=("nvidia_smi",)):
    """A :class:`NodeTools` from a module's shared options."""
    paths = {}
    for option in tools:
        if params.get(option):
            paths[option.replace("_", "-")] = params[option]
    return NodeTools(source=params.get("source") or "live", captured=captured if captured is not None
                     else params.get("captured"), paths=paths, timeout=params.get("command_timeout"))
