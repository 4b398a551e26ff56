# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm_smoke against the hostile HTTP server (tests/hostile_http.py): issue 27 reproducer 10 and issue 26 item 4.

Each endless answer used to keep the probe for about 46 s with ``timeout: 5`` (a socket timeout bounds one read,
not the exchange); a redirect carried the API key to another server; a key with a newline came back in the message.
The bound asserted here is the documented timeout plus a few seconds: a hang bound, not a performance figure.
"""
import json
import os
import sys
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.module_utils.serving import llm_probe
from ansible_collections.gpu_native.fleet.plugins.modules import llm_smoke

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
import hostile_http  # noqa: E402

KEY = "sk-hostile-0123456789"
#: Seconds past the timeout a probe may take to give up (start-up, the last read, closing).
SLACK_S = 4


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            llm_smoke.main()
    return json.loads(capsys.readouterr().out)


#: The endless answers run to the timeout: 1 s, the smallest, keeps five of them from costing 25 s.
ENDLESS_TIMEOUT = 1


@pytest.mark.parametrize("mode,reason", [
    ("drip-body", "did not answer within the 1 s timeout"),
    ("drip-headers", "did not answer within the 1 s timeout"),
    ("continue-forever", "did not answer within the 1 s timeout"),
    ("drip-500", "did not answer within the 1 s timeout"),
    ("sse-keep-alive", "did not answer within the 1 s timeout"),
])
def test_10_an_endless_answer_ends_at_the_timeout(capsys, mode, reason):
    with hostile_http.HostileServer(mode, drip=0.2) as server:
        started = time.monotonic()
        result = run(capsys, {"base_url": server.url + "/v1", "model": "m", "timeout": ENDLESS_TIMEOUT,
                              "fail_on_failure": False})
        elapsed = time.monotonic() - started
    assert elapsed < ENDLESS_TIMEOUT + SLACK_S, "%s kept the probe %.1f s with timeout %d" % (
        mode, elapsed, ENDLESS_TIMEOUT)
    assert result["passed"] is False and len(result["reasons"]) == 1
    assert reason in result["reasons"][0], result["reasons"]


@pytest.mark.parametrize("mode,reason", [
    ("flood", "is larger than 4194304 bytes"),
    ("header-flood", "broke the HTTP exchange"),
    ("huge", "is larger than 4194304 bytes"),
    ("deep", "nested deeper than 64 levels"),
    ("bad-chunk", "broke the HTTP exchange: IncompleteRead"),
    ("short-body", "broke the HTTP exchange: IncompleteRead"),
    ("garbage", "broke the HTTP exchange: BadStatusLine"),
])
def test_a_broken_answer_is_one_reason(capsys, mode, reason):
    with hostile_http.HostileServer(mode) as server:
        started = time.monotonic()
        result = run(capsys, {"base_url": server.url + "/v1", "model": "m", "timeout": 5, "fail_on_failure": False})
    assert time.monotonic() - started < 5 + SLACK_S
    assert result["passed"] is False and len(result["reasons"]) == 1, result["reasons"]
    assert reason in result["reasons"][0], result["reasons"]


@pytest.mark.parametrize("mode", ["redirect-302", "redirect-307"])
@pytest.mark.parametrize("model", [None, "m"], ids=["get-models", "post-completion"])
def test_26_a_redirect_fails_the_gate_and_the_key_stays_home(capsys, mode, model):
    with hostile_http.HostileServer("ok") as witness, \
            hostile_http.HostileServer(mode, redirect_to=witness.url) as server:
        args = {"base_url": server.url + "/v1", "timeout": 5, "api_key": KEY, "fail_on_failure": False}
        if model:
            args["model"] = model
        result = run(capsys, args)
        assert witness.requests == []  # the witness passed the gate before: the POST became its GET
        assert server.requests[0]["headers"]["authorization"] == "Bearer " + KEY
    assert result["passed"] is False
    [reason] = result["reasons"]
    assert "answered HTTP %s Moved redirecting to %s/v1/" % (mode[-3:], witness.url) in reason
    assert "follows no redirect" in reason and KEY not in json.dumps(result)


@pytest.mark.parametrize("key,why", [
    (KEY + "\n", "leading or trailing whitespace (a pasted newline?)"),
    (" " + KEY, "leading or trailing whitespace"),
    ("sk-one two", "whitespace or control characters"),
    ("sk-\x1b[31m", "whitespace or control characters"),
    ("sk-\u00e9t\u00e9", "whitespace or control characters"),
    ("k" * 5000, "more than 4096 characters"),
])
def test_26_a_key_that_cannot_be_a_header_is_refused_without_showing_it(capsys, key, why):
    with hostile_http.HostileServer("ok") as server:
        result = run(capsys, {"base_url": server.url + "/v1", "model": "m", "api_key": key})
        assert server.requests == []  # refused before anything is sent
    assert result["failed"] is True and why in result["msg"] and "Fix:" in result["msg"]
    assert key.strip() not in result["msg"] and "sk-" not in result["msg"]


def test_26_the_key_is_sent_to_base_url(capsys):
    with hostile_http.HostileServer("ok") as server:
        result = run(capsys, {"base_url": server.url + "/v1", "model": "m", "api_key": KEY})
        assert [r["headers"]["authorization"] for r in server.requests] == ["Bearer " + KEY]
    assert result["passed"] is True and result["completion_tokens"] == 12


def test_26_a_server_echoing_the_key_does_not_put_it_in_the_reasons(capsys):
    body = json.dumps({"error": "bad key Bearer %s" % KEY}).encode()
    raw = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    with hostile_http.HostileServer("raw", raw=raw) as server:
        result = run(capsys, {"base_url": server.url + "/v1", "model": "m", "api_key": KEY, "fail_on_failure": False})
    assert "answered HTTP 401 Unauthorized" in result["reasons"][0] and "Bearer ***" in result["reasons"][0]
    assert KEY not in json.dumps(result)


@pytest.mark.parametrize("base_url", [
    "http://user:hunter2@127.0.0.1:9/v1",
    "http://user:hunter2@[::1/v1",
    "http://:hunter2@127.0.0.1/v1?x=1",
])
def test_26_url_credentials_are_never_repeated(capsys, base_url):
    result = run(capsys, {"base_url": base_url})
    assert result["failed"] is True and "hunter2" not in result["msg"] and "***@" in result["msg"]


def test_the_shared_deadline_covers_every_request_of_the_probe():
    """/models, the completion and the stream share one deadline: three slow requests cannot take 3 x timeout."""
    client = llm_probe.Client("http://127.0.0.1:9/v1", 5)
    assert client.deadline.seconds == 5 and 4 < client.deadline.left() <= 5
