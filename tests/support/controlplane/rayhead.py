"""A stand-in Ray head that KubeRay really talks to, run inside the pod network namespace.

KubeRay 1.6.2 (ray-operator/controllers/ray/utils/dashboardclient) reaches a head's dashboard
through the API server's service proxy: `GET /api/serve/applications/?api_type=declarative` to
read the Serve applications and `PUT /api/serve/applications/` with `serveConfigV2` as JSON to
submit them; it checks `GET /-/healthz` on the serve port of the head pod. This server answers on
every pod IP (the namespace routes the whole pod range to `lo`), keeping one Serve state per
address, so each RayService's head has its own. It serves a real Ray Serve LLM exposition on
:8080/metrics (a file from ../shared/fixtures/metrics, passed as an argument).

Tests steer it over HTTP on the dashboard port: `POST /_standin/status` with
`{"status": "DEPLOY_FAILED", "message": "..."}` sets what this head reports for its apps (the
socket's local address says which head); `GET /_standin/state` returns what it holds;
`POST /_standin/reset` forgets every head, so a pod that later gets a deleted head's address (KWOK
reuses them) starts healthy instead of inheriting a failure an earlier test set;
`POST /_standin/metrics` with `{"fixture": "<file name>"}` serves another exposition of the same
folder on every address (a bare name only: nothing outside that folder is read), and `{}` the
one it started with.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_LOCK = threading.Lock()
_STATE: dict[str, dict] = {}  # pod IP -> {"config": last PUT, "status": app status, "puts": n}
DEPLOYMENTS = ("LLMServer", "OpenAiIngress")


def _state(ip: str) -> dict:
    return _STATE.setdefault(ip, {"config": None, "status": "RUNNING", "message": "", "puts": 0, "gets": 0})


def _applications(state: dict) -> dict:
    config = state["config"] or {}
    apps = {}
    healthy = state["status"] == "RUNNING"
    for app in config.get("applications") or []:
        name = app.get("name", "default")
        apps[name] = {
            "name": name,
            "status": state["status"],
            "message": state["message"],
            "route_prefix": app.get("route_prefix", "/"),
            "deployments": {
                d: {"name": d, "status": "HEALTHY" if healthy else "UNHEALTHY", "message": ""} for d in DEPLOYMENTS
            },
        }
    return {"deploy_mode": "MULTI_APP", "applications": apps}


class Handler(BaseHTTPRequestHandler):
    metrics_body = b""
    metrics_file: Path | None = None  # the exposition it started with; its folder holds the others
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the stdlib's name
        sys.stderr.write(f"{self.connection.getsockname()[0]} {format % args}\n")

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):  # noqa: N802 - the stdlib's name
        ip, port = self.connection.getsockname()[:2]
        path = self.path.split("?")[0]
        with _LOCK:
            state = _state(ip)
            if port == 8080 and path == "/metrics":
                return self._send(200, self.metrics_body, "text/plain; version=0.0.4")
            if path == "/-/healthz":
                return self._send(200, b"success", "text/plain")
            if path.rstrip("/") == "/api/serve/applications":
                state["gets"] += 1
                return self._send(200, json.dumps(_applications(state)).encode())
            if path == "/_standin/state":
                return self._send(200, json.dumps(state).encode())
        return self._send(404, b'{"error": "not found"}')

    def do_PUT(self):  # noqa: N802
        ip = self.connection.getsockname()[0]
        if self.path.split("?")[0].rstrip("/") == "/api/serve/applications":
            config = json.loads(self._body() or b"{}")
            with _LOCK:
                state = _state(ip)
                state["config"], state["puts"] = config, state["puts"] + 1
            return self._send(200, b"{}")
        return self._send(404, b'{"error": "not found"}')

    def do_POST(self):  # noqa: N802
        ip = self.connection.getsockname()[0]
        if self.path == "/_standin/reset":
            with _LOCK:
                _STATE.clear()
            return self._send(200, b"{}")
        if self.path == "/_standin/metrics":
            name = str(json.loads(self._body() or b"{}").get("fixture") or "")
            start = Handler.metrics_file
            chosen = start.parent / name if name else start
            if start is None or (name and (Path(name).name != name or not chosen.is_file())):
                return self._send(400, b'{"error": "no such exposition"}')
            with _LOCK:
                Handler.metrics_body = chosen.read_bytes()
            return self._send(200, b"{}")
        if self.path == "/_standin/status":
            change = json.loads(self._body() or b"{}")
            with _LOCK:
                state = _state(ip)
                state["status"] = str(change.get("status", "RUNNING"))
                state["message"] = str(change.get("message", ""))
            return self._send(200, b"{}")
        return self._send(404, b'{"error": "not found"}')


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        Handler.metrics_file = Path(argv[1])
        Handler.metrics_body = Handler.metrics_file.read_bytes()
    servers = [ThreadingHTTPServer(("0.0.0.0", port), Handler) for port in (8265, 8000, 8080)]
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("stand-in ray head ready", flush=True)
    servers[0].serve_forever()


if __name__ == "__main__":
    main(sys.argv)
