# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (modules, the gpu_readiness agent): standard library only, Python 3.8+.
"""One wall-clock deadline for a whole HTTP exchange, and for a whole task.

A socket timeout bounds one read: a server that drips one byte every half
second, answers ``100 Continue`` forever or streams ``: keep-alive`` comments
never trips it.  Here every socket operation of an exchange (connect, TLS
handshake, sending, status line, headers, every ``1xx`` answer, body, stream
lines) gets only the time left until one deadline, so the exchange as a whole
ends by it (issue 27, reproducers 10 and 11).

* :class:`Deadline` -- the time left, shared by every request of a task;
* :class:`Exchange` -- one request over ``http.client``: no redirect is ever
  followed (a ``3xx`` is returned to the caller, so a credential goes only
  where it was sent), no proxy from the environment, the body read with a cap;
* :func:`task_deadline` -- for code that talks through a library whose sockets
  we do not own (the kubernetes client of ``gpu_pod_eviction``): ``SIGALRM`` at
  the deadline raises :class:`TaskDeadlineExceeded` wherever the main thread
  blocks, and if something swallows it, ends the process a few seconds later, so
  a module never outlives its task.

Name resolution (``getaddrinfo``) takes no timeout in the standard library; only
:func:`task_deadline` bounds it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager
from http.client import HTTPConnection, HTTPSConnection, IncompleteRead

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

#: Bytes sent per socket call, so that a server reading slowly meets the deadline too.
_SEND_CHUNK = 65536
#: Longest status, header or stream line read (http.client's own limit is 65536).
MAX_LINE_BYTES = 65536


class DeadlineExceeded(FleetError, socket.timeout):
    """The exchange's deadline passed: a timeout of the whole exchange, not of one read."""


class ResponseTooLarge(FleetError, ValueError):
    """The body (or the stream) is longer than the caller reads."""


class TaskDeadlineExceeded(BaseException):
    """The task's deadline passed while the main thread was blocked.

    A ``BaseException`` like ``KeyboardInterrupt``: libraries that catch ``Exception`` (or ``OSError``, and retry)
    must not swallow it. The code that armed :func:`task_deadline` catches it and fails cleanly. It is therefore the
    one exception class of the shared code that is not a ``FleetError`` (tests/unit/.../_common/test_errors.py)."""


class Deadline(object):
    """``seconds`` from now, on the monotonic clock."""

    def __init__(self, seconds, clock=time.monotonic):
        self.seconds = seconds
        self._clock = clock
        self.end = clock() + seconds

    def left(self):
        return self.end - self._clock()

    def passed(self):
        return self.left() <= 0

    def timeout(self, cap=None):
        """Seconds a blocking call may take now (at most ``cap``); raises :class:`DeadlineExceeded` once passed."""
        remaining = self.left()
        if remaining <= 0:
            raise DeadlineExceeded("timed out: the %s s deadline passed" % self.seconds)
        return remaining if cap is None else min(remaining, cap)


class _DeadlineSocket(object):
    """A connected socket whose every read and write gets only the deadline's time left."""

    def __init__(self, sock, deadline):
        self._sock = sock
        self._deadline = deadline
        # As socket.socket does: the response's file keeps the socket open after the connection lets it go.
        self._io_refs = 0
        self._closed = False

    def _call(self, method, *args):
        self._sock.settimeout(self._deadline.timeout())
        try:
            return method(*args)
        except socket.timeout:
            raise DeadlineExceeded("timed out: the %s s deadline passed" % self._deadline.seconds)

    def recv(self, *args):
        return self._call(self._sock.recv, *args)

    def recv_into(self, *args):
        return self._call(self._sock.recv_into, *args)

    def send(self, data, *args):
        return self._call(self._sock.send, data[:_SEND_CHUNK], *args)

    def sendall(self, data, *args):
        view = memoryview(data).cast("B")
        while len(view):
            sent = self._call(self._sock.send, view[:_SEND_CHUNK], *args)
            view = view[sent:]

    def makefile(self, mode="rb", *_args, **_kwargs):
        if mode != "rb":
            raise ValueError("only binary reads go through the deadline socket")
        self._io_refs += 1
        return io.BufferedReader(socket.SocketIO(self, "rb"))

    def _decref_socketios(self):  # called by socket.SocketIO.close()
        self._io_refs = max(0, self._io_refs - 1)
        if self._closed and not self._io_refs:
            self._sock.close()

    def settimeout(self, _value):  # the deadline sets the timeout of every call
        pass

    def close(self):
        self._closed = True
        if not self._io_refs:
            self._sock.close()

    def __getattr__(self, name):
        return getattr(self._sock, name)


class _DeadlineConnectionMixin(object):
    def connect(self):
        self.timeout = self._deadline.timeout()  # connect and TLS handshake: CPython bounds each as a whole
        try:
            super(_DeadlineConnectionMixin, self).connect()
        except socket.timeout:
            raise DeadlineExceeded("timed out: the %s s deadline passed" % self._deadline.seconds)
        self.sock = _DeadlineSocket(self.sock, self._deadline)


class _HTTPConnection(_DeadlineConnectionMixin, HTTPConnection):
    def __init__(self, host, port, deadline):
        self._deadline = deadline
        HTTPConnection.__init__(self, host, port, timeout=deadline.timeout())


class _HTTPSConnection(_DeadlineConnectionMixin, HTTPSConnection):
    def __init__(self, host, port, deadline, context):
        self._deadline = deadline
        HTTPSConnection.__init__(self, host, port, timeout=deadline.timeout(), context=context)


class Exchange(object):
    """One HTTP request under ``deadline``; the response's ``status``, ``reason``, ``headers``, then ``read()`` or
    ``lines()``.  Redirects are not followed (``location`` names the target of a ``3xx``); no proxy is used.

    Raises what ``http.client`` raises for broken framing (``HTTPException`` and its subclasses), ``OSError`` for
    network errors, :class:`DeadlineExceeded` (an ``OSError`` too) when the deadline passes."""

    def __init__(self, url, deadline, method="GET", headers=None, body=None, context=None):
        from urllib.parse import urlsplit  # pylint: disable=import-outside-toplevel
        parts = urlsplit(url)
        self.url = url
        self.deadline = deadline
        if parts.scheme == "https":
            if context is None:
                import ssl  # pylint: disable=import-outside-toplevel
                context = ssl.create_default_context()
            self.connection = _HTTPSConnection(parts.hostname, parts.port, deadline, context)
        elif parts.scheme == "http":
            self.connection = _HTTPConnection(parts.hostname, parts.port, deadline)
        else:
            raise ValueError("%s is not an http(s) URL" % url)
        target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        try:
            self.connection.request(method, target, body=body, headers=dict(headers or {}))
            self.response = self.connection.getresponse()
        except BaseException:
            self.connection.close()
            raise
        self.status = self.response.status
        self.reason = self.response.reason
        self.headers = self.response.msg
        self.location = self.headers.get("Location") if 300 <= self.status < 400 else None

    def read(self, max_bytes):
        """The whole body; :class:`ResponseTooLarge` past ``max_bytes``."""
        chunks = []
        size = 0
        while True:
            self.deadline.timeout()
            chunk = self.response.read(min(_SEND_CHUNK, max_bytes + 1 - size))
            if not chunk:
                if self.response.length:  # http.client returns a short body without a word when read in pieces
                    raise IncompleteRead(b"".join(chunks), self.response.length)
                return b"".join(chunks)
            size += len(chunk)
            if size > max_bytes:
                raise ResponseTooLarge("the response from %s is larger than %d bytes" % (self.url, max_bytes))
            chunks.append(chunk)

    def lines(self, max_bytes, max_lines):
        """The body line by line (a stream); every line, comments and keep-alives included, counts against
        ``max_bytes``, ``max_lines`` and the deadline."""
        size = 0
        count = 0
        while True:
            self.deadline.timeout()
            line = self.response.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            size += len(line)
            count += 1
            if len(line) > MAX_LINE_BYTES or size > max_bytes or count > max_lines:
                raise ResponseTooLarge("the stream from %s is longer than %d bytes or %d lines"
                                       % (self.url, max_bytes, max_lines))
            yield line

    def close(self):
        self.response.close()
        self.connection.close()

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()


def _print_and_exit(message):
    os.write(2, (message + "\n").encode("utf-8", "replace"))
    os._exit(1)  # pylint: disable=protected-access


@contextmanager
def task_deadline(seconds, message, grace=5.0, on_overrun=_print_and_exit):
    """Bound the ``with`` block to ``seconds`` of wall-clock time, wherever it blocks.

    At the deadline ``SIGALRM`` raises :class:`TaskDeadlineExceeded` (with ``message``) in the main thread. Should
    the block still run ``grace`` seconds later (the exception swallowed), ``on_overrun(message)`` is called, which
    by default writes the message to stderr and ends the process: a module never outlives its task.
    Outside the main thread, or where ``setitimer`` does not exist, the block runs unbounded."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    state = {"fired": False}

    def expire(_signum, _frame):
        if state["fired"]:
            on_overrun(message)
            return
        state["fired"] = True
        signal.setitimer(signal.ITIMER_REAL, grace)
        raise TaskDeadlineExceeded(message)

    previous_handler = signal.signal(signal.SIGALRM, expire)
    previous_left, _interval = signal.setitimer(signal.ITIMER_REAL, max(0.001, seconds))
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_left:  # an outer alarm (a test's, say) keeps what was left of it
            signal.setitimer(signal.ITIMER_REAL, max(0.001, previous_left - (time.monotonic() - started)))
