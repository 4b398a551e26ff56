# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Opening a user-named file (module_utils/_common/regular_file.py): regular files only, never blocking on a FIFO."""
import errno
import os
import signal
import socket

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.module_args import nul_byte_message
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.regular_file import (
    NotRegularFileError, open_regular, read_regular)


@pytest.fixture(autouse=True)
def alarm():
    """A FIFO that blocks would hang the test: the alarm fails it instead."""
    def expire(_signum, _frame):
        raise AssertionError("blocked")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_regular_file_reads_and_blocks_normally_after_the_open(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    assert read_regular(str(path), 3) == b"hell"  # one byte past the limit tells "too large"
    with open_regular(str(path)) as handle:
        assert handle.read() == b"hello"
        assert os.get_blocking(handle.fileno())  # O_NONBLOCK was cleared after the check
    (tmp_path / "link").symlink_to(path)
    assert read_regular(str(tmp_path / "link"), 10) == b"hello"
    with pytest.raises(OSError) as info:
        read_regular(str(tmp_path / "link"), 10, follow_symlinks=False)
    assert info.value.errno == errno.ELOOP


def test_dev_null_reads_as_empty():
    assert read_regular(os.devnull, 10) == b""


@pytest.mark.parametrize("kind,what", [("fifo", "a FIFO"), ("directory", "a directory"), ("device", "a character device")])
def test_anything_else_is_refused_without_blocking(tmp_path, kind, what):
    path = str(tmp_path / kind)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    else:
        path = "/dev/zero"  # endless: a read would never end
    with pytest.raises(NotRegularFileError) as info:
        read_regular(path, 10)
    assert info.value.strerror == "it is %s, not a regular file" % what
    assert isinstance(info.value, FleetError) and isinstance(info.value, OSError) and info.value.errno == errno.EINVAL


def test_a_socket_cannot_be_opened(tmp_path):
    path = str(tmp_path / "socket")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    try:
        with pytest.raises(OSError):  # ENXIO from the open itself
            read_regular(path, 10)
    finally:
        server.close()


def test_missing_and_nul_paths(tmp_path):
    with pytest.raises(OSError) as info:
        read_regular(str(tmp_path / "missing"), 10)
    assert info.value.errno == errno.ENOENT
    with pytest.raises(NotRegularFileError, match="NUL byte"):
        read_regular("a\x00b", 10)


def test_nul_byte_message_names_the_option():
    params = {"library": "ok", "devices": ["GPU-1", "GPU-2\x00"], "kernel": None, "nested": {"a": {"b": "x\x00"}}}
    assert nul_byte_message(params, ("library", "kernel")) is None
    assert nul_byte_message(params, ("library", "devices")).startswith("devices[1] holds a NUL byte")
    assert nul_byte_message(params, ("nested",)).startswith("nested.a.b holds a NUL byte")
    assert "Fix:" in nul_byte_message(params, ("devices",))
