"""How the local engine gets its API keys: never as an argument, nor in a file an argument names
(vLLM reads `--config` files into its arguments and logs them), only through a 0600 file that the
bearer check inside the engine reads (runtime.backends.local.keys.EngineKeyCheck), again whenever
it changes: minting or revoking a key rewrites the file and never restarts the engine.

A real process started by the backend's own spawn code, posing as vLLM (kind "vllm", so the
backend hands it keys, and it wraps its app in `--middleware` as vLLM does); the real vLLM server
is exercised in tests/runtime/test_local_engine.py and tests/e2e/test_local_engine_keys.py (slow).
"""

from __future__ import annotations

import asyncio
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.keys import (
    ENGINE_KEY_CHECK,
    ENGINE_KEYS_ENV,
    ENGINE_KEYS_FILE,
    EngineKeyCheck,
    drop_key,
    read_engine_keys,
    store_key,
    write_engine_keys,
)
from runtime.backends.local.processes import session_members
from runtime.keys import portal_key
from tests.runtime.test_local import make_spec
from tests.runtime.test_local_insight import ChattyEngine
from tests.support.processes import wait_for

MINTED = "llmp_" + "k3y" * 14 + "z"
LATER = "llmp_" + "l8r" * 14 + "q"
OTHER_TENANT = "llmp_" + "n0t" * 14 + "x"
# Like vLLM, it reads a `--config` file into its arguments and prints them; then, carelessly, it
# prints the keys it loaded from its key file. Then it serves an ASGI app wrapped in each
# `--middleware` class, as vLLM's api_server does (`app.add_middleware(cls)`, which builds
# `cls(app=app)`), over http.server: 200 with its pid for whatever passes the check.
STANDIN = """
import asyncio, http.server, importlib, json, os, pathlib, sys
args = sys.argv[3:]
if "--config" in args:
    args += pathlib.Path(args[args.index("--config") + 1]).read_text().split()
print("non-default args:", args, flush=True)
if os.environ.get("LLM_PORTAL_ENGINE_KEYS_FILE"):
    print("loaded keys:", json.loads(pathlib.Path(os.environ["LLM_PORTAL_ENGINE_KEYS_FILE"]).read_text()), flush=True)

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps({"pid": os.getpid()}).encode()})

for i, arg in enumerate(args[:-1]):
    if arg == "--middleware":
        module, _, name = args[i + 1].rpartition(".")
        app = getattr(importlib.import_module(module), name)(app=app)

class Asgi(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()]
        scope = {"type": "http", "method": "GET", "path": self.path.split("?")[0], "root_path": "", "headers": headers}
        sent = []
        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}
        async def send(message):
            sent.append(message)
        asyncio.run(app(scope, receive, send))
        self.send_response(sent[0]["status"])
        for name, value in sent[0].get("headers", []):
            self.send_header(name.decode(), value.decode())
        self.end_headers()
        self.wfile.write(b"".join(m.get("body", b"") for m in sent[1:]))

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Asgi).serve_forever()
"""


class VllmStandIn(ChattyEngine):
    kind = "vllm"  # what makes the backend give it keys
    script = STANDIN


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_text().split("\0")
    return dict(item.split("=", 1) for item in raw if "=" in item)


def argv_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]


@pytest.fixture
def engine(tmp_path):
    """A started stand-in with the portal's key and one minted key (another tenant has one too)."""
    root = tmp_path / "runtime"
    store_key(root, tenant_slug="team-a", key_id=1, deployment_id=None, api_key=MINTED)
    store_key(root, tenant_slug="team-b", key_id=2, deployment_id=None, api_key=OTHER_TENANT)
    backend = LocalBackend(root, engine=VllmStandIn(), stop_timeout=5, model_root=Path("/models"), key_seed="seed")
    spec = make_spec()
    backend.ensure(spec)
    wait_for(lambda: backend.observe(spec).state == "ready", timeout=30, what="the stand-in to serve")
    yield backend, spec, [portal_key("seed", spec.deployment_id), MINTED]
    backend.remove(spec)


class TestTheEngineGetsItsKeys:
    def test_no_argument_and_no_file_an_argument_names_holds_a_key(self, engine):
        backend, spec, keys = engine
        pid = backend.load_state(spec.deployment_id).pid

        for member in [pid, *session_members(pid)]:
            argv = argv_of(member)
            assert not [key for key in keys if any(key in arg for arg in argv)]
            named = [Path(arg) for arg in argv if arg.startswith("/") and Path(arg).is_file()]
            assert not [path for path in named if any(key.encode() in path.read_bytes() for key in keys)], named
        assert argv_of(pid)[-2:] == ["--middleware", ENGINE_KEY_CHECK]

    def test_they_come_from_a_private_file_named_in_its_environment(self, engine):
        backend, spec, keys = engine
        path = Path(environ_of(backend.load_state(spec.deployment_id).pid)[ENGINE_KEYS_ENV])

        assert read_engine_keys(path) == keys  # this tenant's, not team-b's
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def test_neither_the_portals_records_nor_the_log_members_read_show_one(self, engine):
        backend, spec, keys = engine
        state_file = backend.run_dir(spec.deployment_id) / "state.json"
        wait_for(lambda: "loaded keys" in Path(backend.load_state(7).log_path).read_text(), timeout=10, what="the dump")

        (tail,) = backend.logs(spec)

        assert "loaded keys" in tail["text"]
        assert not [key for key in keys if key in tail["text"] or key in state_file.read_text()]


class TestTheKeyFile:
    def test_it_round_trips_every_key(self, tmp_path):
        keys = ["llmp-try-abc", "llmp_x'y\"z", "k" * 200]
        assert read_engine_keys(write_engine_keys(tmp_path, keys)) == keys

    @pytest.mark.parametrize("content", [None, "", "not json", "{}", "[]", '["ok", 3]', '[""]'])
    def test_a_missing_or_broken_file_stops_the_engine_instead_of_serving_everyone(self, tmp_path, content):
        path = tmp_path / "engine-keys.json"
        if content is not None:
            path.write_text(content)
        with pytest.raises(ValueError, match="key file"):
            read_engine_keys(path)

    def test_the_check_refuses_to_be_built_without_its_file(self, monkeypatch, tmp_path):
        monkeypatch.delenv(ENGINE_KEYS_ENV, raising=False)
        with pytest.raises(ValueError, match=ENGINE_KEYS_ENV):
            EngineKeyCheck(app=None)
        monkeypatch.setenv(ENGINE_KEYS_ENV, str(tmp_path / "absent.json"))
        with pytest.raises(ValueError, match="key file"):
            EngineKeyCheck(app=None)

    def test_a_rewrite_with_the_same_keys_leaves_the_file_alone(self, tmp_path):
        path = write_engine_keys(tmp_path, ["a", "b"])
        before = path.stat()
        write_engine_keys(tmp_path, ["a", "b"])
        assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        write_engine_keys(tmp_path, ["a"])
        assert read_engine_keys(path) == ["a"] and stat.S_IMODE(path.stat().st_mode) == 0o600


async def _served(scope, receive, send):
    """The engine's app: answers 200 to whatever the check lets through."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"served"})


def call(check: EngineKeyCheck, path: str = "/v1/models", key: str | None = None, **scope: Any) -> int | str:
    """One request through the check: its status (HTTP), or how a websocket ended."""
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    full = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": headers, **scope}
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    # A thread of its own: Playwright's sync API leaves an event loop running in this thread
    # once a browser test ran earlier in the session, and asyncio.run refuses to nest.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, check(full, receive, send)).result()
    return sent[0]["status"] if sent[0]["type"] == "http.response.start" else sent[0]["type"]


class TestEngineKeyCheck:
    """The middleware itself, around a tiny ASGI app, on the file the portal writes."""

    @pytest.fixture
    def check(self, tmp_path):
        write_engine_keys(tmp_path, ["try-it", MINTED])
        return EngineKeyCheck(_served, path=tmp_path / ENGINE_KEYS_FILE)

    def test_only_a_listed_bearer_key_passes(self, check):
        assert call(check, key=MINTED) == 200 and call(check, key="try-it") == 200
        assert call(check) == 401
        assert call(check, key=LATER) == 401 and call(check, key=MINTED[:-1]) == 401
        assert call(check, headers=[(b"authorization", f"Basic {MINTED}".encode())]) == 401

    def test_the_next_request_after_a_rewrite_sees_the_new_set(self, check, tmp_path):
        assert (call(check, key=MINTED), call(check, key=LATER)) == (200, 401)

        write_engine_keys(tmp_path, ["try-it", LATER])  # minted LATER, revoked MINTED

        assert (call(check, key=MINTED), call(check, key=LATER)) == (401, 200)
        # Same length, same size of file, rewritten at once: still seen (the bytes are compared).
        write_engine_keys(tmp_path, ["try-it", MINTED])
        assert (call(check, key=MINTED), call(check, key=LATER)) == (200, 401)

    @pytest.mark.parametrize("damage", ["missing", "empty list", "not json", "unreadable"])
    def test_it_fails_closed_while_the_file_is_gone_or_broken(self, check, tmp_path, damage):
        path = tmp_path / ENGINE_KEYS_FILE
        assert call(check, "/health") == 200 and call(check, key=MINTED) == 200
        if damage == "missing":
            path.unlink()
        elif damage == "unreadable":
            path.unlink()
            path.mkdir()  # read_bytes raises, as for a file the engine may not read
        else:
            path.write_text("[]" if damage == "empty list" else "{nope")

        assert [call(check, p, key=MINTED) for p in ("/v1/models", "/health", "/metrics")] == [401] * 3
        assert call(check, "/v1/models", key=MINTED, method="OPTIONS") == 401

        if path.is_dir():
            path.rmdir()
        write_engine_keys(tmp_path, ["try-it", MINTED])
        assert call(check, key=MINTED) == 200  # back once the portal writes the file again

    def test_only_the_probes_the_portal_makes_are_open(self, check):
        assert call(check, "/health") == 200 and call(check, "/metrics") == 200
        # vLLM's own check guards only /v1, /v2, /inference and /cohere: these would be open there.
        for path in ("/tokenize", "/pooling", "/score", "/version", "/health/../v1/completions", "/healthz"):
            assert call(check, path) == 401, path
        assert call(check, "/v1/completions", method="OPTIONS") == 200  # CORS preflights, as vLLM
        assert call(check, "/v1/realtime", type="websocket") == "websocket.close"
        assert call(check, "/v1/realtime", key=MINTED, type="websocket") == 200


class TestKeyChangesDoNotRestartTheEngine:
    def test_a_minted_key_opens_the_running_engine_and_a_revoked_one_is_refused_right_away(self, engine):
        backend, spec, keys = engine
        before = backend.load_state(spec.deployment_id)
        models = backend.observe(spec).endpoint_url + "/models"
        assert status(models, LATER) == 401 and status(models, MINTED) == 200

        store_key(backend.root, tenant_slug="team-a", key_id=3, deployment_id=spec.deployment_id, api_key=LATER)
        assert backend.refresh_keys(tenant_slug="team-a", deployment_id=spec.deployment_id) is True
        assert status(models, LATER) == 200

        drop_key(backend.root, tenant_slug="team-a", key_id=1)
        backend.refresh_keys(tenant_slug="team-a", deployment_id=spec.deployment_id)
        assert status(models, MINTED) == 401
        assert status(models, keys[0]) == 200 and status(models, LATER) == 200  # Try-it and the new one

        # The same engine throughout: same process, same port, so the same endpoint URL.
        after = backend.ensure(spec)
        state = backend.load_state(spec.deployment_id)
        assert (state.pid, state.start_time, state.ports) == (before.pid, before.start_time, before.ports)
        assert after.events == [] and after.endpoint_url == backend.observe(spec).endpoint_url
        assert requests.get(models, headers={"Authorization": f"Bearer {LATER}"}, timeout=5).json()["pid"] == before.pid

    def test_a_reconcile_hands_over_keys_a_lost_refresh_missed(self, engine):
        backend, spec, _ = engine
        models = backend.observe(spec).endpoint_url + "/models"
        store_key(backend.root, tenant_slug="team-a", key_id=3, deployment_id=None, api_key=LATER)
        assert status(models, LATER) == 401  # nobody told the engine yet

        backend.ensure(spec)

        assert status(models, LATER) == 200

    def test_keys_of_an_engine_that_is_not_running_wait_for_its_start(self, tmp_path):
        backend = LocalBackend(tmp_path, engine=VllmStandIn(), model_root=Path("/models"), key_seed="seed")
        assert backend.refresh_keys(tenant_slug="team-a", deployment_id=7) is False
        assert not (tmp_path / "7").exists()  # no run directory made for a stopped deployment


def status(url: str, key: str) -> int:
    return requests.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=5).status_code
