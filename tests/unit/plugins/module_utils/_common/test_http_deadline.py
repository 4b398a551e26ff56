# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_common/http_deadline.py: one deadline for a whole HTTP exchange, TLS included; redirects returned,
never followed; bodies and streams capped. Against tests/hostile_http.py and a local TLS server.

The time bounds asserted are the deadline plus a few seconds: hang bounds, not performance figures."""
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import http_deadline as hd

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")))
import hostile_http  # noqa: E402

SLACK_S = 3


@pytest.mark.parametrize("mode", ["drip-body", "drip-headers", "continue-forever", "drip-500"])
def test_an_endless_answer_meets_the_deadline(mode):
    with hostile_http.HostileServer(mode, drip=0.1) as server:
        started = time.monotonic()
        with pytest.raises(hd.DeadlineExceeded):
            with hd.Exchange(server.url + "/x", hd.Deadline(2)) as exchange:
                exchange.read(1 << 20)
        assert time.monotonic() - started < 2 + SLACK_S


def test_keep_alive_lines_meet_the_deadline():
    with hostile_http.HostileServer("sse-keep-alive", drip=0.1) as server:
        started = time.monotonic()
        with pytest.raises(hd.DeadlineExceeded):
            with hd.Exchange(server.url + "/x", hd.Deadline(2), method="POST", body=b'{"stream": true}') as exchange:
                for _line in exchange.lines(1 << 20, 100000):
                    pass
        assert time.monotonic() - started < 2 + SLACK_S


def test_a_redirect_is_returned_not_followed():
    with hostile_http.HostileServer("ok") as witness, \
            hostile_http.HostileServer("redirect-307", redirect_to=witness.url) as server:
        with hd.Exchange(server.url + "/v1/models", hd.Deadline(5), headers={"Authorization": "Bearer k"}) as exchange:
            assert exchange.status == 307 and exchange.location == witness.url + "/v1/models"
        assert witness.requests == []


@pytest.mark.parametrize("mode,limit", [("huge", 1 << 20), ("flood", 1 << 20)])
def test_a_body_past_the_cap_is_refused(mode, limit):
    with hostile_http.HostileServer(mode) as server:
        with pytest.raises(hd.ResponseTooLarge):
            with hd.Exchange(server.url + "/x", hd.Deadline(10)) as exchange:
                exchange.read(limit)


def test_a_stream_past_its_line_count_is_refused():
    with hostile_http.HostileServer("sse-keep-alive", drip=0) as server:
        with pytest.raises(hd.ResponseTooLarge):
            with hd.Exchange(server.url + "/x", hd.Deadline(10), method="POST", body=b'{"stream": true}') as exchange:
                for _line in exchange.lines(1 << 20, 500):
                    pass


def test_a_short_body_is_incomplete():
    from http.client import IncompleteRead
    with hostile_http.HostileServer("short-body") as server:
        with pytest.raises(IncompleteRead):
            with hd.Exchange(server.url + "/x", hd.Deadline(5)) as exchange:
                exchange.read(1 << 20)


def test_a_silent_tls_server_meets_the_deadline():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    try:
        started = time.monotonic()
        with pytest.raises(hd.DeadlineExceeded):
            hd.Exchange("https://127.0.0.1:%d/" % listener.getsockname()[1], hd.Deadline(2))
        assert time.monotonic() - started < 2 + SLACK_S
    finally:
        listener.close()


@pytest.fixture
def tls_server(tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make the test certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days",
                    "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server naming
            body = json.dumps({"path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "https://127.0.0.1:%d" % server.server_address[1], cert
    server.shutdown()


def test_https_with_the_given_ca_and_without(tls_server):
    url, cert = tls_server
    context = ssl.create_default_context(cafile=cert)
    with hd.Exchange(url + "/api/v1/nodes/n1", hd.Deadline(5), context=context) as exchange:
        assert exchange.status == 200 and json.loads(exchange.read(4096)) == {"path": "/api/v1/nodes/n1"}
    with pytest.raises(ssl.SSLCertVerificationError):
        hd.Exchange(url + "/", hd.Deadline(5))


def test_the_deadline_is_shared_and_refuses_once_passed():
    clock = [100.0]
    deadline = hd.Deadline(5, clock=lambda: clock[0])
    assert deadline.timeout(30) == 5 and deadline.timeout(2) == 2
    clock[0] += 5
    with pytest.raises(hd.DeadlineExceeded, match="the 5 s deadline passed"):
        deadline.timeout()
    assert issubclass(hd.DeadlineExceeded, socket.timeout)


def test_only_http_urls():
    with pytest.raises(ValueError, match="is not an http"):
        hd.Exchange("file:///etc/passwd", hd.Deadline(1))
