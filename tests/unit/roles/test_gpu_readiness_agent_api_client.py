# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness agent's API client sends its token only where it was told (issue 26 item 4) and ends within its
deadline whatever the server does (issue 27: one deadline for every HTTP exchange).

Before: an http:// api_url got the token in clear, a redirect carried it to another server, and the answer was
read without a size limit or an exchange-wide deadline."""
import os
import sys
import time

import pytest

from test_gpu_readiness_agent import agent  # noqa: F401  pylint: disable=unused-import

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
import hostile_http  # noqa: E402

NODE = b'{"kind": "Node", "status": {"allocatable": {"nvidia.com/gpu": "8"}}}'
OK = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(NODE), NODE)


@pytest.fixture
def token(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret-token\n")
    return str(path)


def test_http_api_url_is_refused_without_insecure(token, capsys):
    with hostile_http.HostileServer("raw", raw=OK) as server:
        assert agent.device_plugin_count({"api_url": server.url, "token_file": token}, "n1") is None
        assert server.requests == []  # the token never left the node
        assert agent.device_plugin_count({"api_url": server.url, "token_file": token, "insecure": True}, "n1") == 8
        assert server.requests[0]["headers"]["authorization"] == "Bearer s3cret-token"
    err = capsys.readouterr().err
    assert "is not an https:// URL, so the token is not sent" in err and "gpu_readiness_kube_insecure" in err
    assert "s3cret" not in err


@pytest.mark.parametrize("mode", ["redirect-302", "redirect-307"])
def test_a_redirect_is_not_followed_with_the_token(token, capsys, mode):
    with hostile_http.HostileServer("raw", raw=OK) as witness, \
            hostile_http.HostileServer(mode, redirect_to=witness.url) as server:
        kube = {"api_url": server.url, "token_file": token, "insecure": True}
        assert agent.device_plugin_count(kube, "n1") is None
        assert witness.requests == [] and len(server.requests) == 1
    assert "HTTP %s redirecting elsewhere (not followed)" % mode[-3:] in capsys.readouterr().err


def test_a_huge_answer_is_not_read_to_the_end(token, monkeypatch):
    monkeypatch.setattr(agent, "API_MAX_RESPONSE_BYTES", 1024)
    with hostile_http.HostileServer("huge") as server:
        assert agent.device_plugin_count({"api_url": server.url, "token_file": token, "insecure": True}, "n1") is None


@pytest.mark.parametrize("mode", ["drip-body", "drip-headers", "continue-forever"])
def test_an_endless_answer_ends_at_the_deadline(token, monkeypatch, mode):
    monkeypatch.setattr(agent, "API_TIMEOUT_S", 2)
    with hostile_http.HostileServer(mode, drip=0.2) as server:
        started = time.monotonic()
        assert agent.device_plugin_count({"api_url": server.url, "token_file": token, "insecure": True}, "n1") is None
        assert time.monotonic() - started < 2 + 4  # it used to take 10 s per read, without end for a drip
