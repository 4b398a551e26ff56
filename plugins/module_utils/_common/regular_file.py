# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Open a file a user named, for reading, only when it is a regular file.

``open()`` on a FIFO blocks until a writer comes (forever, for a planted one),
a character device can stream without end, and a directory fails with an
``IsADirectoryError`` far from the option that named it. :func:`open_regular`
opens with ``O_NONBLOCK`` (which never waits for a FIFO's writer), checks the
opened descriptor with ``fstat`` (no race between a check and the open), and
only then clears ``O_NONBLOCK`` for ordinary reads (``/dev/null`` is let through:
it reads as an empty file and users pass it to mean "nothing"). Anything else raises
:class:`NotRegularFileError`, an ``OSError`` (so callers' ``except OSError``
still match) with ``strerror`` saying what the path is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import os
import stat

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFileError(FleetError, OSError):
    """The path cannot be read as a regular file (``strerror`` says why)."""


def kind_of(mode):
    """``"a FIFO"``, ``"a directory"`` ... for an ``st_mode`` that is not a regular file, else ``None``."""
    if stat.S_ISREG(mode):
        return None
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _is_dev_null(info):
    """``/dev/null`` (by device number) reads as an empty file: callers pass it to mean "nothing"."""
    if not stat.S_ISCHR(info.st_mode):
        return False
    try:
        return os.stat(os.devnull).st_rdev == info.st_rdev
    except OSError:
        return False


def open_regular(path, follow_symlinks=True):
    """A binary file object for ``path``, which must be a regular file; never blocks on a FIFO.

    Raises :class:`NotRegularFileError` (errno ``EINVAL``) for a directory,
    FIFO, device (``/dev/null`` excepted: it reads as empty) or socket and for a path holding a NUL byte, and the usual
    ``OSError`` (``ENOENT``, ``EACCES``, ``ELOOP`` for a symlink when
    ``follow_symlinks`` is false) when it cannot be opened.
    """
    if not isinstance(path, str) or "\x00" in path:
        raise NotRegularFileError(errno.EINVAL, "the path holds a NUL byte" if isinstance(path, str)
                                  else "the path is not text")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    descriptor = os.open(path, flags)
    try:
        info = os.fstat(descriptor)
        kind = kind_of(info.st_mode)
        if kind is not None and not _is_dev_null(info):
            raise NotRegularFileError(errno.EINVAL, "it is %s, not a regular file" % kind)
        status = fcntl.fcntl(descriptor, fcntl.F_GETFL)
        fcntl.fcntl(descriptor, fcntl.F_SETFL, status & ~os.O_NONBLOCK)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path, max_bytes, follow_symlinks=True):
    """At most ``max_bytes + 1`` bytes of the regular file ``path`` (one more than allowed tells "too large")."""
    with open_regular(path, follow_symlinks=follow_symlinks) as handle:
        return handle.read(max_bytes + 1)
