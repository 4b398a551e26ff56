"""llm_smoke against the OpenAI-compatible stand-in on 127.0.0.1 (tests/standins/openai_standin.py)."""
import json
import os
import socket
import sys
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import llm_smoke

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "standins"))
import openai_standin  # noqa: E402


@pytest.fixture()
def server(request):
    started = []

    def start(mode="ok", delay=5.0):
        instance = openai_standin.serve(0, mode, delay)
        started.append(instance)
        return "http://127.0.0.1:%d/v1" % instance.server_address[1]

    yield start
    for instance in started:
        instance.shutdown()
        instance.server_close()


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            llm_smoke.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_tokens_from_usage_with_the_first_listed_model(capsys, server, api):
    result = run(capsys, {"base_url": server(), "api": api})
    assert result["passed"] is True and not result.get("failed")
    assert result["model"] == "standin/tiny-llm"
    assert result["completion_tokens"] == 11 and result["token_source"] == "usage"
    assert result["text"] == "GPUs run many threads in parallel to speed up math."


def test_no_usage_counts_streamed_chunks(capsys, server):
    result = run(capsys, {"base_url": server("no-usage") + "/", "api": "chat"})
    assert result["passed"] is True
    assert result["token_source"] == "stream_chunks" and result["completion_tokens"] == 11


@pytest.mark.parametrize("mode,reason", [
    ("few-tokens", "returned 3 completion tokens, fewer than min_tokens 8"),
    ("empty", "returned an empty completion"),
    ("empty-text", "returned an empty completion"),
    ("malformed", "returned malformed JSON"),
    ("http-500", "answered HTTP 500 Internal Server Error: {\"object\": \"error\", \"message\": \"CUDA error"),
    ("loading", "answered HTTP 503 Service Unavailable"),
])
def test_each_failure_is_a_clear_reason(capsys, server, mode, reason):
    result = run(capsys, {"base_url": server(mode, delay=30), "fail_on_failure": False})
    assert result["passed"] is False and not result.get("failed")
    assert any(reason in line for line in result["reasons"]), result["reasons"]


def test_failure_fails_the_task_by_default(capsys, server):
    result = run(capsys, {"base_url": server("empty"), "model": "standin/tiny-llm"})
    assert result["failed"] is True
    assert result["msg"].startswith("LLM smoke test failed: http://127.0.0.1:")


def test_unknown_model_is_the_servers_404(capsys, server):
    result = run(capsys, {"base_url": server(), "model": "nope", "fail_on_failure": False})
    assert "answered HTTP 404 Not Found" in result["reasons"][0]
    assert "The model `nope` does not exist." in result["reasons"][0]


def test_refused_connection(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run(capsys, {"base_url": "http://127.0.0.1:%d/v1" % port, "fail_on_failure": False})
    assert result["reasons"] == ["http://127.0.0.1:%d/v1 refused the connection (is the server listening?)" % port]


def test_timeout_is_a_reason_not_a_hang(capsys, server):
    started = time.time()
    result = run(capsys, {"base_url": server("slow", delay=20), "model": "standin/tiny-llm", "timeout": 1,
                          "fail_on_failure": False})
    assert time.time() - started < 10
    assert result["reasons"] == [result["base_url"] + " did not answer within the 1 s timeout"]


@pytest.mark.parametrize("args,message", [
    ({"base_url": "10.0.0.5:8000/v1"}, "is not an http(s) URL with a host"),
    ({"base_url": "http://10.0.0.5:8000"}, "does not end in /v1"),
    ({"base_url": "http://user:pw@10.0.0.5/v1"}, "base_url 'http://***@10.0.0.5/v1' carries credentials (not shown)"),
    ({"base_url": "http://10.0.0.5/v1?x=1"}, "carries a query or fragment"),
    ({"base_url": "http://10.0.0.5/v1", "min_tokens": 0}, "min_tokens must be a whole number from 1 to 4096"),
    ({"base_url": "http://10.0.0.5/v1", "timeout": 0}, "timeout must be seconds between 1 and 3600"),
    ({"base_url": "http://10.0.0.5/v1", "max_tokens": 0}, "max_tokens is 0"),
])
def test_bad_options(capsys, args, message):
    result = run(capsys, args)
    assert result["failed"] is True and message in result["msg"]
