"""A stand-in OpenAI server on loopback, shaped like vLLM's where the local gateway depends on it.

Completions and chat completions answer with `usage` (prompt tokens: words of the prompt;
completion tokens: `max_tokens`, default 3); with `"stream": true` they send one SSE event per
token, `STEP_SECONDS` apart, then, only when `stream_options.include_usage` is true, an event
with empty `choices` and the usage (as vLLM 0.32 does: vllm/entrypoints/openai/completion/
serving.py), then `data: [DONE]`. Embeddings answer with prompt tokens only. With a key, every
route but /health refuses other bearer tokens (401), as the engine's key check does.

In process: `serve(model, key=None)` returns (server, requests seen). As the local backend's
stand-in engine: `python -m tests.support.openai_stub PORT MODEL [--key-file F] [--record F]`.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

STEP_SECONDS = 0.05
# Sent this long after `data: [DONE]` when set (an SSE comment): the engine's last bytes reaching a
# gateway whose client already left on [DONE] (tests/runtime/test_gateway_local.py).
TRAILER: bytes = b""
TRAILER_DELAY = 0.3


def _usage(prompt: Any, completion: int) -> dict[str, int]:
    words = len(str(prompt).split())
    return {"prompt_tokens": words, "completion_tokens": completion, "total_tokens": words + completion}


def handler(model: str, seen: list[dict[str, Any]], key: Any = None, record: Path | None = None) -> type:
    """The request handler; `key` is a string or a callable returning the accepted key."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = json.dumps(body).encode() if not isinstance(body, bytes) else body
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            payload = json.loads(raw) if raw[:1] == b"{" else None
            entry = {"path": self.path, "authorization": self.headers.get("Authorization"), "json": payload}
            seen.append(entry)
            if record is not None:
                with open(record, "a") as out:
                    out.write(json.dumps(entry) + "\n")
            wanted = key() if callable(key) else key
            if self.path == "/health":
                return self._send(200, b"", "text/plain")
            if wanted and self.headers.get("Authorization") != f"Bearer {wanted}":
                return self._send(401, {"error": "Unauthorized"})
            if self.path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            if payload is None:
                return self._send(400, {"error": {"message": "not JSON", "type": "BadRequestError"}})
            if self.path == "/v1/embeddings":
                usage = _usage(payload.get("input"), 0) | {"completion_tokens": 0}
                vector = {"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}
                return self._send(200, {"object": "list", "model": model, "data": [vector], "usage": usage})
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                return self._send(404, {"error": {"message": "no such route"}})
            prompt = payload.get("prompt") or " ".join(str(m.get("content")) for m in payload.get("messages") or [])
            count = int(payload.get("max_tokens") or 3)
            if payload.get("stream") is True:
                return self._stream(payload, prompt, count)
            chat = self.path.endswith("chat/completions")
            choice = {"index": 0, "finish_reason": "length"}
            choice |= {"message": {"role": "assistant", "content": "x " * count}} if chat else {"text": "x " * count}
            kind = "chat.completion" if chat else "text_completion"
            answer = {"id": "c1", "object": kind, "created": 1, "model": model, "choices": [choice]}
            return self._send(200, answer | {"usage": _usage(prompt, count)})

        def _stream(self, payload: dict[str, Any], prompt: Any, count: int) -> None:
            # HTTP/1.0 without a length: the body ends when the connection closes, as a stream may.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.end_headers()
            chat = self.path.endswith("chat/completions")
            kind = "chat.completion.chunk" if chat else "text_completion"
            for i in range(count):
                delta = {"delta": {"content": f"t{i} "}} if chat else {"text": f"t{i} "}
                event = {"id": "s1", "object": kind, "model": model, "choices": [{"index": 0, **delta}]}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                time.sleep(STEP_SECONDS)
            if (payload.get("stream_options") or {}).get("include_usage") is True:
                last = {"id": "s1", "object": kind, "model": model, "choices": [], "usage": _usage(prompt, count)}
                self.wfile.write(f"data: {json.dumps(last)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            if TRAILER:
                time.sleep(TRAILER_DELAY)
                self.wfile.write(TRAILER)
                self.wfile.flush()

        do_GET = do_POST = _answer  # noqa: N815 (http.server's naming)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def serve(model: str, *, key: str | None = None) -> tuple[ThreadingHTTPServer, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(model, seen, key))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("model")
    parser.add_argument(
        "--key-file", type=Path, help="a JSON list of keys; the first is accepted (re-read per request)"
    )
    parser.add_argument("--record", type=Path)
    args = parser.parse_args()
    key = (lambda: json.loads(args.key_file.read_text())[0]) if args.key_file else None
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(args.model, [], key, args.record))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
