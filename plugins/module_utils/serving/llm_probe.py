# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Ask an OpenAI-compatible server (vLLM, TGI, SGLang, llama.cpp...) for tokens and judge the answer.

The serving gate of the preflight passes only when the server returns at
least ``min_tokens`` completion tokens *and* non-empty text within the
timeout.  Tokens are counted from ``usage.completion_tokens``; a server that
sends no usage is asked again with ``stream: true`` and its content chunks
are counted.  Every failure (refused connection, HTTP error, malformed JSON,
empty text, timeout) becomes a one-line reason; nothing raises.

Standard library only (``urllib``), Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import time
from http.client import HTTPException

try:  # Python 3
    from urllib.error import HTTPError, URLError
    from urllib.parse import urlsplit
    from urllib.request import Request, build_opener, ProxyHandler
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    raise

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.json_limits import json_nesting_exceeds

#: Responses larger than this are cut and judged malformed.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: At most this many streamed events are read.
MAX_STREAM_EVENTS = 20000
#: JSON nesting deeper than this is refused before ``json`` recurses (an OpenAI answer nests about 5 deep).
MAX_JSON_DEPTH = 64
DEFAULT_PROMPT = "Write one sentence about GPUs."


class LlmProbeError(FleetError):
    """A caller mistake (bad option)."""


def check_base_url(base_url):
    """``http(s)://host[:port]/.../v1`` as OpenAI clients take it; returns it without a trailing slash."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise LlmProbeError("base_url is empty. Fix: pass the server's OpenAI base URL, e.g. http://10.0.0.5:8000/v1.")
    url = base_url.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        no_host = parts.scheme not in ("http", "https") or not parts.hostname or parts.port == 0  # port: ValueError
    except ValueError as exc:
        raise LlmProbeError("base_url %r is not a URL (%s). Fix: pass e.g. http://10.0.0.5:8000/v1 (an IPv6 host "
                            "in brackets: http://[fd00::5]:8000/v1)." % (base_url, exc))
    if no_host:
        raise LlmProbeError("base_url %r is not an http(s) URL with a host. Fix: pass e.g. http://10.0.0.5:8000/v1."
                            % base_url)
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise LlmProbeError("base_url %r carries a query, fragment or credentials. Fix: pass only scheme, host, "
                            "port and path (credentials go in api_key)." % base_url)
    if not parts.path.endswith("/v1"):
        raise LlmProbeError("base_url %r does not end in /v1. Fix: pass the OpenAI base URL as clients take it, "
                            "e.g. %s/v1." % (base_url, url))
    return url


class _Deadline(object):
    def __init__(self, seconds):
        self.end = time.time() + seconds
        self.seconds = seconds

    def left(self):
        return max(0.05, self.end - time.time())

    def passed(self):
        return time.time() >= self.end


def _read_capped(response):
    data = response.read(MAX_RESPONSE_BYTES + 1)
    if len(data) > MAX_RESPONSE_BYTES:
        raise ValueError("the response is larger than %d MiB" % (MAX_RESPONSE_BYTES // (1024 * 1024)))
    return data


def _describe_error(exc, url, deadline):
    if isinstance(exc, HTTPError):
        body = b""
        try:
            body = exc.read(2048)
        except Exception:  # noqa: BLE001 - the body is only decoration
            pass
        detail = " ".join(body.decode("utf-8", "replace").split())[:200]
        return "%s answered HTTP %d %s%s" % (url, exc.code, exc.reason, (": " + detail) if detail else "")
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason):
        return "%s did not answer within the %s s timeout" % (url, deadline.seconds)
    if isinstance(reason, ConnectionRefusedError) or "refused" in str(reason).lower():
        return "%s refused the connection (is the server listening?)" % url
    return "%s could not be reached: %s" % (url, reason)


class Client(object):
    def __init__(self, base_url, timeout, api_key=None):
        self.base_url = check_base_url(base_url)
        self.deadline = _Deadline(timeout)
        self.api_key = api_key
        # The node's proxy settings would send a pod-IP probe to a proxy.
        self.opener = build_opener(ProxyHandler({}))

    def _request(self, path, body=None):
        url = self.base_url + path
        headers = {"Accept": "application/json", "User-Agent": "gpu_native.fleet llm_smoke"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        return url, self.opener.open(Request(url, data=data, headers=headers), timeout=self.deadline.left())

    def get_json(self, path):
        url, response = self._request(path)
        with response:
            return url, _loads(_read_capped(response), url)

    def post_json(self, path, body):
        url, response = self._request(path, body)
        with response:
            return url, _loads(_read_capped(response), url)

    def post_stream(self, path, body):
        """POST with ``stream: true``; returns (url, [event dicts])."""
        url, response = self._request(path, body)
        events = []
        size = 0
        with response:
            for raw in response:
                size += len(raw)
                if size > MAX_RESPONSE_BYTES or len(events) >= MAX_STREAM_EVENTS:
                    raise ValueError("the stream is longer than the probe reads")
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                events.append(_loads(payload.encode("utf-8"), url))
                if self.deadline.passed():
                    raise socket.timeout("timed out")
        return url, events


def _loads(data, url):
    text = data.decode("utf-8", "replace")
    if json_nesting_exceeds(text, MAX_JSON_DEPTH):
        raise ValueError("%s returned JSON nested deeper than %d levels" % (url, MAX_JSON_DEPTH))
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError("%s returned malformed JSON (%s)" % (url, exc))


def _choice_text(choice, api):
    if not isinstance(choice, dict):
        return ""
    if api == "chat":
        message = choice.get("message") or choice.get("delta") or {}
        text = message.get("content") if isinstance(message, dict) else None
    else:
        text = choice.get("text")
    return text if isinstance(text, str) else ""


def probe(base_url, model=None, prompt=DEFAULT_PROMPT, min_tokens=8, max_tokens=None, timeout=60,
          api="completions", api_key=None):
    """Ask for tokens; returns the result dict (``passed``, ``reasons`` ...).  Raises only LlmProbeError."""
    if api not in ("completions", "chat"):
        raise LlmProbeError("api must be completions or chat, not %r." % (api,))
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or not 1 <= min_tokens <= 4096:
        raise LlmProbeError("min_tokens must be a whole number from 1 to 4096, not %r." % (min_tokens,))
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise LlmProbeError("timeout must be seconds between 1 and 3600, not %r." % (timeout,))
    max_tokens = max_tokens or max(32, min_tokens * 2)
    client = Client(base_url, timeout, api_key)
    started = time.time()
    result = {"passed": False, "completion_tokens": 0, "text": "", "latency_ms": None, "model": model,
              "reasons": [], "token_source": None, "base_url": client.base_url}
    try:
        if not model:
            url, models = client.get_json("/models")
            data = models.get("data") if isinstance(models, dict) else None
            ids = [item.get("id") for item in data if isinstance(item, dict) and item.get("id")] \
                if isinstance(data, list) else []
            if not ids:
                result["reasons"].append("%s lists no model; pass model" % url)
                return result
            model = ids[0]
            result["model"] = model
        path = "/chat/completions" if api == "chat" else "/completions"
        body = {"model": model, "max_tokens": max_tokens, "temperature": 0}
        if api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        url, answer = client.post_json(path, body)
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list) or not answer["choices"]:
            result["reasons"].append("%s returned no choices" % url)
            return result
        text = _choice_text(answer["choices"][0], api)
        usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
        tokens = usage.get("completion_tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            result["token_source"] = "usage"
        else:
            stream_body = dict(body, stream=True, stream_options={"include_usage": True})
            url, events = client.post_stream(path, stream_body)
            pieces = []
            tokens = 0
            streamed_usage = None
            for event in events:
                if not isinstance(event, dict):
                    continue
                if isinstance(event.get("usage"), dict):
                    streamed_usage = event["usage"].get("completion_tokens")
                choices = event.get("choices")
                for choice in choices if isinstance(choices, list) else []:
                    piece = _choice_text(choice, api)
                    if piece:
                        pieces.append(piece)
                        tokens += 1
            if not text:
                text = "".join(pieces)
            if isinstance(streamed_usage, int) and not isinstance(streamed_usage, bool):
                tokens = streamed_usage
                result["token_source"] = "stream_usage"
            else:
                result["token_source"] = "stream_chunks"
        result["completion_tokens"] = tokens
        result["text"] = text[:2000]
        result["latency_ms"] = int((time.time() - started) * 1000)
        if not text.strip():
            result["reasons"].append("%s returned an empty completion" % url)
        if tokens < min_tokens:
            result["reasons"].append("%s returned %d completion tokens, fewer than min_tokens %d" % (
                url, tokens, min_tokens))
        if client.deadline.passed():
            result["reasons"].append("the answer took longer than the %s s timeout" % timeout)
    except (HTTPError, URLError, socket.timeout, OSError) as exc:
        result["reasons"].append(_describe_error(exc, client.base_url, client.deadline))
    except HTTPException as exc:
        result["reasons"].append("%s broke the HTTP exchange: %s" % (client.base_url, type(exc).__name__))
    except ValueError as exc:
        result["reasons"].append(str(exc))
    result["passed"] = not result["reasons"]
    return result
