"""A stand-in HTTP endpoint on loopback for tests: a metrics port, Prometheus, an OpenAI server.

`serve(respond)` starts a threaded server in the background and returns it; `respond(method,
path, body)` returns `(status, content_type, body)`. Real sockets and real HTTP, so the code
under test uses its own client exactly as in production. Stop it with `server.shutdown()`, or
leave it to die with the test process (daemon thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Respond = Callable[[str, str, bytes], tuple[int, str, bytes]]


def serve(respond: Respond) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, content_type, body = respond(self.command, self.path, self.rfile.read(length))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 (http.server's naming)

        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def base_url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_port}"
