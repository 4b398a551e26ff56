"""STAND-IN for an OpenAI-compatible LLM server (vLLM's API surface), for tests with no GPU.

It answers what the serving gate uses, with vLLM's shapes and HTTP semantics:
``GET /health`` (200 when ready, 503 while "loading"), ``GET /v1/models``,
``POST /v1/completions`` and ``POST /v1/chat/completions`` (JSON, or SSE with
``stream: true`` ending in ``data: [DONE]``; ``stream_options.include_usage``
adds a final usage chunk).  Unknown models get vLLM's 404 error object.  The
tokens are canned: no model runs.

Faults (``--mode``): ``ok``, ``no-usage`` (JSON without ``usage``; the stream
still carries tokens), ``few-tokens`` (3 tokens), ``empty`` (empty text, no tokens), ``empty-text``
(empty text while ``usage`` counts the tokens, as a model that emits only
special tokens),
``malformed`` (a body that is not JSON), ``http-500``, ``slow`` (sleeps
``--delay`` seconds before answering), ``loading`` (``/health`` 503 for
``--delay`` seconds, and the API 503 meanwhile).

    python3 openai_standin.py --port 0 --port-file /tmp/port --mode ok
"""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "standin/tiny-llm"
TOKENS = ["GPUs", " run", " many", " threads", " in", " parallel", " to", " speed", " up", " math", "."]


class Handler(BaseHTTPRequestHandler):
    server_version = "openai-standin/1.0"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # noqa: D401 - keep test output quiet
        pass

    def _send(self, code, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code, message, kind):
        self._send(code, {"object": "error", "message": message, "type": kind, "code": code})

    def _loading(self):
        return self.server.mode == "loading" and time.time() < self.server.ready_at

    def do_GET(self):  # noqa: N802 - http.server API
        if self.path == "/health":
            self._send(503 if self._loading() else 200, b"", "text/plain")
        elif self.path == "/v1/models":
            if self._loading():
                return self._error(503, "model is loading", "ServiceUnavailable")
            self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "standin"}]})
        else:
            self._error(404, "Not Found", "NotFoundError")

    def do_POST(self):  # noqa: N802 - http.server API
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._error(400, "request body is not JSON", "BadRequestError")
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._error(404, "Not Found", "NotFoundError")
        if self._loading():
            return self._error(503, "model is loading", "ServiceUnavailable")
        if body.get("model") != MODEL:
            return self._error(404, "The model `%s` does not exist." % body.get("model"), "NotFoundError")
        mode = self.server.mode
        if mode == "slow":
            time.sleep(self.server.delay)
        if mode == "http-500":
            return self._error(500, "CUDA error: an illegal memory access was encountered", "InternalServerError")
        if mode == "malformed":
            return self._send(200, b'{"choices": [ {"text": "GPUs', "application/json")
        tokens = {"few-tokens": TOKENS[:3], "empty": []}.get(mode, TOKENS)
        tokens = tokens[:int(body.get("max_tokens") or 16)]
        usage = {"prompt_tokens": 7, "completion_tokens": len(tokens), "total_tokens": 7 + len(tokens)}
        if mode == "empty-text":
            tokens = [""] * len(tokens)  # special tokens: counted, but nothing printable
        if body.get("stream"):
            return self._stream(tokens, chat, usage, (body.get("stream_options") or {}).get("include_usage"))
        text = "".join(tokens)
        choice = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        answer = {"id": "cmpl-standin", "object": "chat.completion" if chat else "text_completion",
                  "created": int(time.time()), "model": MODEL, "choices": [choice]}
        if mode != "no-usage":
            answer["usage"] = usage
        self._send(200, answer)

    def _stream(self, tokens, chat, usage, include_usage):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for token in tokens:
            choice = {"index": 0, "finish_reason": None}
            if chat:
                choice["delta"] = {"content": token}
            else:
                choice["text"] = token
            event = {"id": "cmpl-standin", "model": MODEL, "choices": [choice]}
            self.wfile.write(("data: %s\n\n" % json.dumps(event)).encode("utf-8"))
        if include_usage and self.server.mode != "no-usage":
            event = {"id": "cmpl-standin", "model": MODEL, "choices": [], "usage": usage}
            self.wfile.write(("data: %s\n\n" % json.dumps(event)).encode("utf-8"))
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


def serve(port=0, mode="ok", delay=5.0, host="127.0.0.1"):
    """Start in a thread; returns the server (``server.server_address[1]`` is the port)."""
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.mode = mode
    server.delay = delay
    server.ready_at = time.time() + delay
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--mode", default="ok",
                        choices=["ok", "no-usage", "few-tokens", "empty", "empty-text", "malformed", "http-500", "slow",
                                 "loading"])
    parser.add_argument("--delay", type=float, default=5.0)
    args = parser.parse_args(argv)
    server = serve(args.port, args.mode, args.delay, args.host)
    if args.port_file:
        with open(args.port_file, "w") as handle:
            handle.write(str(server.server_address[1]))
    sys.stdout.write("openai stand-in on %s:%d mode=%s\n" % (args.host, server.server_address[1], args.mode))
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
