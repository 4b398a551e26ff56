# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the modules that talk HTTP, against the hostile server (tests/hostile_http.py) answering
with generated raw bytes: any status line (1xx, 3xx, garbage), any framing (a Content-Length that lies, broken
chunks, none), any body (JSON of any shape and depth, bytes).

* llm_smoke returns a verdict with one-line reasons, never a traceback; a pass has the tokens and the text; the
  API key never appears in what it returns; a redirect is never followed (no request reaches its target);
* gpu_pod_eviction (the server as its kubeconfig's API server) fails cleanly or evicts nothing, never a traceback.

The endless answers (drips, floods, keep-alives) are in the unit tests with their timing bound; here every
answer ends (the server closes after it), the examples are few and bounded, and no test measures time.
"""
import contextlib
import io
import json
import os
import sys

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.modules import gpu_pod_eviction
from ansible_collections.gpu_native.fleet.plugins.modules import llm_smoke

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
import hostile_http  # noqa: E402

FUZZ_TARGETS = ("llm_smoke", "gpu_pod_eviction")
KEY = "sk-fuzz-4b1d"

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.sampled_from(["choices", "usage", "data", "id", "text", "message", "content", "completion_tokens",
                         "delta", "items", "kind", "status", "allocatable", "major", "minor", "x"]), inner,
        max_size=4)), max_leaves=12)
BODY = st.one_of(
    JSON.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=200),
    st.integers(min_value=1, max_value=3000).map(lambda n: b"[" * n),
    st.lists(JSON.map(lambda value: b"data: " + json.dumps(value).encode()) | st.sampled_from(
        [b": keep-alive", b"data: [DONE]", b"event: x", b""]), max_size=6).map(b"\n".join))
STATUS = st.one_of(st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 201 Created", b"HTTP/1.1 100 Continue",
                                    b"HTTP/1.1 302 Found", b"HTTP/1.1 307 Temporary Redirect", b"HTTP/1.1 401 No",
                                    b"HTTP/1.1 429 Too Many", b"HTTP/1.1 500 Oops", b"HTTP/1.0 204 None",
                                    b"HTTP/1.1 999 Odd", b"GARBAGE", b""]),
                   st.binary(max_size=30))


@st.composite
def answers(draw, redirect_to):
    status = draw(STATUS)
    body = draw(BODY)
    headers = []
    framing = draw(st.sampled_from(["length", "lying-length", "chunked", "bad-chunked", "none"]))
    if framing == "length":
        headers.append(b"Content-Length: %d" % len(body))
    elif framing == "lying-length":
        headers.append(b"Content-Length: %d" % draw(st.integers(min_value=0, max_value=10 ** 6)))
    elif framing in ("chunked", "bad-chunked"):
        headers.append(b"Transfer-Encoding: chunked")
        size = b"%x" % len(body) if framing == "chunked" else draw(st.sampled_from([b"zz", b"-1", b"f" * 20]))
        body = size + b"\r\n" + body + b"\r\n0\r\n\r\n"
    if draw(st.booleans()):
        headers.append(b"Location: " + redirect_to.encode() + b"/v1/models")
    headers += draw(st.lists(st.sampled_from([b"Content-Type: text/event-stream", b"Content-Type: application/json",
                                              b"X-Odd: \xff\xfe", b"Connection: keep-alive", b"Bad header line"]),
                             max_size=3))
    prefix = draw(st.sampled_from([b"", b"HTTP/1.1 100 Continue\r\n\r\n"]))
    return prefix + status + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"Connection: close\r\n\r\n" + body


@pytest.fixture(scope="module")
def servers():
    witness = hostile_http.HostileServer("ok")
    server = hostile_http.HostileServer("raw", redirect_to=witness.url)
    yield server, witness
    server.close()
    witness.close()


def run(module, args):
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(out.getvalue())


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")))
@given(data=st.data(), model=st.sampled_from([None, "m"]), api=st.sampled_from(["completions", "chat"]))
def test_llm_smoke_any_answer(servers, data, model, api):
    server, witness = servers
    server.raw = data.draw(answers(witness.url))
    args = {"base_url": server.url + "/v1", "timeout": 3, "api": api, "api_key": KEY, "fail_on_failure": False,
            "min_tokens": 1}
    if model:
        args["model"] = model
    result = run(llm_smoke, args)
    assert "exception" not in result and KEY not in json.dumps(result), result
    assert isinstance(result["passed"], bool) and all("\n" not in reason for reason in result["reasons"])
    assert result["passed"] == (not result["reasons"])
    if result["passed"]:
        assert result["completion_tokens"] >= 1 and result["text"].strip()
    assert witness.requests == []


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "15")))
@given(data=st.data(), check_mode=st.booleans())
def test_gpu_pod_eviction_any_api_answer(servers, kubeconfig, data, check_mode):
    server, witness = servers
    server.raw = data.draw(answers(witness.url))
    args = {"node": "gpu-node-1", "timeout": 1, "wait_sleep": 0.2, "kubeconfig": kubeconfig,
            "_ansible_check_mode": check_mode}
    result = run(gpu_pod_eviction, args)
    assert "Traceback" not in result.get("msg", "") and "\n" not in result.get("msg", ""), result
    assert result["evicted"] == [] and KEY not in json.dumps(result)


@pytest.fixture(scope="module")
def kubeconfig(servers, tmp_path_factory):
    path = tmp_path_factory.mktemp("kube") / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "h",
        "clusters": [{"name": "h", "cluster": {"server": servers[0].url}}],
        "users": [{"name": "u", "user": {"token": KEY}}],
        "contexts": [{"name": "h", "context": {"cluster": "h", "user": "u"}}]}))
    return str(path)
