# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A hostile HTTP server on 127.0.0.1, a test tool (issue 27, reproducers 10 and 11; issue 26 item 4).

It speaks raw bytes, so it can break HTTP the way a broken or malicious server does:

========================  ===========================================================================
mode                      answer
========================  ===========================================================================
``drip-body``             200 with a 1 MiB Content-Length, the body one byte every ``drip`` seconds
``drip-headers``          the status line, then headers one byte every ``drip`` seconds
``continue-forever``      ``100 Continue`` (with a header) every ``drip`` seconds, never a final answer
``drip-500``              500 with a body dripped one byte every ``drip`` seconds
``sse-keep-alive``        JSON without ``usage`` to plain requests; to ``"stream": true`` an event stream
                          of ``: keep-alive`` comments every ``drip`` seconds, never an event
``flood``                 200 without a length, an endless body as fast as the client reads
``header-flood``          200, then endless headers
``redirect-302``          302 to ``redirect_to`` (another server's URL, the same path)
``redirect-307``          307 to ``redirect_to``
``huge``                  200 with a 5 MiB JSON body
``deep``                  200 with 200,000 ``[``
``bad-chunk``             chunked framing with a chunk size that is not hexadecimal
``short-body``            Content-Length 1000, 10 bytes, then the connection closes
``garbage``               a status line that is not HTTP
``raw``                   ``raw`` bytes as given (the fuzz tests' answers), then close
``ok``                    a well-formed OpenAI answer, also a Kubernetes-ish ``{}`` (a witness)
========================  ===========================================================================

Every request's method, path and headers are kept in ``requests`` (a witness of where a credential went).
Every endless answer stops when the client goes away, when :meth:`close` is called, or after ``max_s`` seconds,
so no thread outlives its test for long.
"""
import json
import socket
import socketserver
import threading
import time

MODES = ("drip-body", "drip-headers", "continue-forever", "drip-500", "sse-keep-alive", "flood", "header-flood",
         "redirect-302", "redirect-307", "huge", "deep", "bad-chunk", "short-body", "garbage", "raw", "ok")
#: The modes that never end on their own: the client's deadline must end them.
ENDLESS = ("drip-body", "drip-headers", "continue-forever", "drip-500", "sse-keep-alive", "flood", "header-flood")

OK_ANSWER = {"id": "cmpl-hostile", "model": "m", "choices": [{"index": 0, "text": "GPUs are fast and parallel.",
                                                              "message": {"content": "GPUs are fast."}}],
             "usage": {"completion_tokens": 12}, "data": [{"id": "m"}]}


class HostileServer(object):
    def __init__(self, mode, drip=0.2, redirect_to=None, raw=b"", max_s=60.0):
        if mode not in MODES:
            raise ValueError("unknown mode %r" % mode)
        self.mode = mode
        self.drip = drip
        self.redirect_to = redirect_to
        self.raw = raw
        self.max_s = max_s
        self.requests = []
        self.stopped = threading.Event()
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                owner._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()

    # ---- the request --------------------------------------------------------------------------------------------
    def _read_request(self, sock):
        sock.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = sock.recv(4096)
            if not chunk:
                return None
            data += chunk
        head, _sep, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path = (lines[0].split(" ") + ["", ""])[:2]
        headers = {}
        for line in lines[1:]:
            name, _colon, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        while len(rest) < min(length, 1 << 20):
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        request = {"method": method, "path": path, "headers": headers, "body": rest[:length]}
        self.requests.append(request)
        return request

    def _endless(self, sock, first, piece):
        """Send ``first``, then ``piece`` every ``drip`` seconds until the client leaves or the server stops."""
        started = time.monotonic()
        sock.sendall(first)
        while not self.stopped.is_set() and time.monotonic() - started < self.max_s:
            if self.drip:
                time.sleep(self.drip)
            sock.sendall(piece)

    def _handle(self, sock):
        try:
            request = self._read_request(sock)
            if request is None:
                return
            self._answer(sock, request)
        except (OSError, ValueError):
            pass  # the client went away: what a hostile server wants anyway

    def _answer(self, sock, request):
        mode = self.mode
        if mode == "raw":
            sock.sendall(self.raw)
        elif mode == "ok":
            body = json.dumps(OK_ANSWER).encode()
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        elif mode == "drip-body":
            self._endless(sock, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n",
                          b" ")
        elif mode == "drip-headers":
            self._endless(sock, b"HTTP/1.1 200 OK\r\nX-Drip: ", b"a")
        elif mode == "continue-forever":
            self._endless(sock, b"", b"HTTP/1.1 100 Continue\r\nX-Again: 1\r\n\r\n")
        elif mode == "drip-500":
            self._endless(sock, b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1048576\r\n\r\n", b"e")
        elif mode == "sse-keep-alive":
            if b'"stream": true' not in request["body"]:
                answer = dict(OK_ANSWER)
                answer.pop("usage")
                body = json.dumps(answer).encode()
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            else:
                self._endless(sock, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
                              b": keep-alive\n\n")
        elif mode == "flood":
            saved, self.drip = self.drip, 0
            try:
                self._endless(sock, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
                              b"[1," * 16384)
            finally:
                self.drip = saved
        elif mode == "header-flood":
            saved, self.drip = self.drip, 0
            try:
                self._endless(sock, b"HTTP/1.1 200 OK\r\n", b"X-Flood: %s\r\n" % (b"f" * 100))
            finally:
                self.drip = saved
        elif mode in ("redirect-302", "redirect-307"):
            code = mode[-3:].encode()
            location = (self.redirect_to or "http://127.0.0.1:9").rstrip("/") + request["path"]
            sock.sendall(b"HTTP/1.1 %s Moved\r\nLocation: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                         % (code, location.encode()))
        elif mode == "huge":
            body = b'{"data": [{"id": "m"}], "pad": "' + b"x" * (5 * 1024 * 1024) + b'"}'
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % len(body) + body)
        elif mode == "deep":
            body = b"[" * 200000
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % len(body) + body)
        elif mode == "bad-chunk":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"zz\r\n{}\r\n0\r\n\r\n")
        elif mode == "short-body":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                         b'{"data": [')
        elif mode == "garbage":
            sock.sendall(b"HELLO THERE\r\n\r\n")
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
