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
import re
import time
from http.client import HTTPException
from urllib.parse import urlsplit

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.http_deadline import (
    Deadline, DeadlineExceeded, Exchange, ResponseTooLarge)
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.json_limits import json_nesting_exceeds

#: Responses larger than this are cut and judged malformed.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: At most this many streamed lines are read (events, comments and keep-alives alike).
MAX_STREAM_LINES = 40000
#: At most this many streamed events are kept.
MAX_STREAM_EVENTS = 20000
#: JSON nesting deeper than this is refused before ``json`` recurses (an OpenAI answer nests about 5 deep).
MAX_JSON_DEPTH = 64
#: Bytes of an error answer shown in the reason.
MAX_ERROR_BODY = 2048
#: Longest API key accepted (OpenAI keys are about 50 to 170 characters).
MAX_API_KEY_CHARS = 4096
DEFAULT_PROMPT = "Write one sentence about GPUs."

# Printable ASCII without the space: what an HTTP header's token68 (RFC 9110, Bearer credentials) may hold.
_API_KEY_RE = re.compile(r"[\x21-\x7e]+\Z")
_URL_CREDENTIALS_RE = re.compile(r"(//)[^/?#]*@")


class LlmProbeError(FleetError):
    """A caller mistake (bad option)."""


def redact_url(text):
    """``text`` with the ``user:password@`` of any URL in it replaced by ``***@``."""
    return _URL_CREDENTIALS_RE.sub(r"\1***@", text)


def check_api_key(api_key):
    """Refuse a key that cannot be a Bearer credential, without repeating it (no_log masks only its exact value)."""
    if api_key is None or api_key == "":
        return None
    if not isinstance(api_key, str) or len(api_key) > MAX_API_KEY_CHARS or not _API_KEY_RE.match(api_key):
        what = "whitespace or control characters" if isinstance(api_key, str) else "a %s" % type(api_key).__name__
        if isinstance(api_key, str) and len(api_key) > MAX_API_KEY_CHARS:
            what = "more than %d characters" % MAX_API_KEY_CHARS
        elif isinstance(api_key, str) and _API_KEY_RE.match(api_key.strip()):
            what = "leading or trailing whitespace (a pasted newline?)"
        raise LlmProbeError("api_key holds %s, which an Authorization header cannot carry (the key is not shown). "
                            "Fix: pass the key alone, printable ASCII without spaces, e.g. with | trim." % what)
    return api_key


def check_base_url(base_url):
    """``http(s)://host[:port]/.../v1`` as OpenAI clients take it; returns it without a trailing slash.

    Messages never repeat credentials written into the URL."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise LlmProbeError("base_url is empty. Fix: pass the server's OpenAI base URL, e.g. http://10.0.0.5:8000/v1.")
    url = base_url.strip().rstrip("/")
    shown = redact_url(base_url)
    try:
        parts = urlsplit(url)
        no_host = parts.scheme not in ("http", "https") or not parts.hostname or parts.port == 0  # port: ValueError
    except ValueError as exc:
        raise LlmProbeError("base_url %r is not a URL (%s). Fix: pass e.g. http://10.0.0.5:8000/v1 (an IPv6 host "
                            "in brackets: http://[fd00::5]:8000/v1)." % (shown, redact_url(str(exc))))
    if "@" in parts.netloc:
        raise LlmProbeError("base_url %r carries credentials (not shown). Fix: pass only scheme, host, port and "
                            "path; the key goes in api_key." % shown)
    if no_host:
        raise LlmProbeError("base_url %r is not an http(s) URL with a host. Fix: pass e.g. http://10.0.0.5:8000/v1."
                            % shown)
    if parts.query or parts.fragment:
        raise LlmProbeError("base_url %r carries a query or fragment. Fix: pass only scheme, host, port and path."
                            % shown)
    if not parts.path.endswith("/v1"):
        raise LlmProbeError("base_url %r does not end in /v1. Fix: pass the OpenAI base URL as clients take it, "
                            "e.g. %s/v1." % (shown, url))
    if any(ord(char) < 0x21 or ord(char) == 0x7f for char in url):
        raise LlmProbeError("base_url %r holds whitespace or control characters. Fix: pass the URL alone." % shown)
    return url


class HttpFailure(FleetError):
    """The server answered, but not with what the probe asked for (an error status, a redirect)."""


class Client(object):
    """The probe's requests: one shared deadline (connect, headers, body, stream, keep-alives, ``100 Continue``),
    no redirect followed, no proxy (the node's proxy settings would send a pod-IP probe to a proxy)."""

    def __init__(self, base_url, timeout, api_key=None):
        self.base_url = check_base_url(base_url)
        self.deadline = Deadline(timeout)
        self.api_key = check_api_key(api_key)

    def _open(self, path, body=None):
        url = self.base_url + path
        headers = {"Accept": "application/json", "User-Agent": "gpu_native.fleet llm_smoke"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        exchange = Exchange(url, self.deadline, method="POST" if data is not None else "GET", headers=headers,
                            body=data)
        try:
            if 300 <= exchange.status < 400:
                raise HttpFailure("%s answered HTTP %d %s redirecting to %s: the probe follows no redirect (the "
                                  "API key goes only to base_url); point base_url at the server itself"
                                  % (url, exchange.status, exchange.reason,
                                     redact_url(str(exchange.location or "nowhere"))[:200]))
            if exchange.status >= 400 or exchange.status < 200:
                try:
                    detail = exchange.read(MAX_ERROR_BODY)
                except (ResponseTooLarge, HTTPException):
                    detail = b""
                detail = " ".join(detail.decode("utf-8", "replace").split())[:200]
                raise HttpFailure("%s answered HTTP %d %s%s" % (url, exchange.status, exchange.reason,
                                                                (": " + detail) if detail else ""))
        except BaseException:
            exchange.close()
            raise
        return url, exchange

    def get_json(self, path):
        url, exchange = self._open(path)
        with exchange:
            return url, _loads(exchange.read(MAX_RESPONSE_BYTES), url)

    def post_json(self, path, body):
        url, exchange = self._open(path, body)
        with exchange:
            return url, _loads(exchange.read(MAX_RESPONSE_BYTES), url)

    def post_stream(self, path, body):
        """POST with ``stream: true``; returns (url, [event dicts])."""
        url, exchange = self._open(path, body)
        events = []
        with exchange:
            for raw in exchange.lines(MAX_RESPONSE_BYTES, MAX_STREAM_LINES):
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue  # comments (": keep-alive"), event names, blank lines: the deadline still runs
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                if len(events) >= MAX_STREAM_EVENTS:
                    raise ResponseTooLarge("the stream from %s has more than %d events" % (url, MAX_STREAM_EVENTS))
                events.append(_loads(payload.encode("utf-8"), url))
        return url, events


def _loads(data, url):
    text = data.decode("utf-8", "replace")
    if json_nesting_exceeds(text, MAX_JSON_DEPTH):
        raise ValueError("%s returned JSON nested deeper than %d levels" % (url, MAX_JSON_DEPTH))
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError("%s returned malformed JSON (%s)" % (url, exc))


def _describe_os_error(exc, url):
    if isinstance(exc, ConnectionRefusedError):
        return "%s refused the connection (is the server listening?)" % url
    return "%s could not be reached: %s" % (url, redact_url(str(exc) or type(exc).__name__)[:300])


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
    except HttpFailure as exc:
        result["reasons"].append(str(exc))
    except DeadlineExceeded:
        result["reasons"].append("%s did not answer within the %s s timeout" % (client.base_url, timeout))
    except OSError as exc:
        result["reasons"].append(_describe_os_error(exc, client.base_url))
    except HTTPException as exc:
        result["reasons"].append("%s broke the HTTP exchange: %s" % (client.base_url, type(exc).__name__))
    except ValueError as exc:  # ResponseTooLarge, malformed or too deep JSON
        result["reasons"].append(str(exc))
    if client.api_key:  # a server may echo the header back in an error body or the completion
        result["reasons"] = [reason.replace(client.api_key, "***") for reason in result["reasons"]]
        result["text"] = result["text"].replace(client.api_key, "***")
    result["passed"] = not result["reasons"]
    return result
