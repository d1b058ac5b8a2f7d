"""The local gateway's activator (runtime.gateway_local.activator) on real sockets: a deployment
asleep keeps its ports and its name; a request to it asks a stand-in portal to wake it with the
client's key, waits until the engine is on the table and healthy, and is answered by the engine;
the portal's refusal, a wait that runs out, an unreachable portal and a bad header are each their
own answer. The portal's side (which key may wake what, the quota) is tests/access/test_wake_api.py;
the whole chain on a real engine is tests/e2e/test_wake_local.py.

World: alpha's `llama` (deployment 1) is asleep; the stand-in engine that will serve it runs from
the start but is on the table only once the stand-in portal "starts" it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from runtime.backends.local.gateway import GATEWAY_DIR, port_open
from runtime.backends.local.ports import PortAllocator
from runtime.gateway_local import routes
from runtime.gateway_local.app import Gateway
from tests.support import openai_stub
from tests.support.processes import wait_for

openai = pytest.importorskip("openai")
KEY = "llmp_alpha-wide-key-000000000"


class Portal:
    """A stand-in for POST /api/v1/gateway/wake/<id>: answers `reply` (status, body), records the
    calls, and on the first 202 calls `on_wake` (which puts the engine on the table)."""

    def __init__(self, reply: tuple[int, dict], on_wake=None):
        self.reply, self.on_wake, self.calls = reply, on_wake, []
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                portal.calls.append((self.path, self.headers.get("Authorization")))
                status, body = portal.reply
                if status == 202 and portal.on_wake and len(portal.calls) == 1:
                    threading.Timer(0.5, portal.on_wake).start()
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}{routes.WAKE_PATH}"


@pytest.fixture
def world(tmp_path):
    engine, seen = openai_stub.serve("llama", key="up-1")
    ports = PortAllocator(tmp_path).allocate(2)
    directory = tmp_path / GATEWAY_DIR
    asleep = routes.Route(1, ports[1], "alpha", "llama", upstream="", asleep=True)
    live = routes.Route(1, ports[1], "alpha", "llama", f"http://127.0.0.1:{engine.server_port}", "up-1")
    keys = {routes.key_digest(KEY): routes.Grant(11, "alpha")}

    def table(route, wake_url):
        return routes.Table(tenants={"alpha": ports[0]}, routes={1: route}, keys=keys, wake_url=wake_url)

    def start(portal: Portal | None):
        routes.write(directory / routes.ROUTES_FILE, table(asleep, portal.url if portal else None))
        if portal is not None:
            portal.on_wake = lambda: routes.write(directory / routes.ROUTES_FILE, table(live, portal.url))

    gateway = Gateway(directory)
    gateway.activator.poll, gateway.activator.ask_every = 0.05, 0.3
    state: dict[str, Any] = {"start": start, "seen": seen, "tenant": ports[0], "own": ports[1], "gateway": gateway}
    start(None)
    loop, stop = asyncio.new_event_loop(), asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(gateway.run(stop, poll=0.05),), daemon=True)
    thread.start()
    wait_for(lambda: port_open(ports[0]) and port_open(ports[1]), timeout=10, what="the gateway's ports")
    yield state
    loop.call_soon_threadsafe(stop.set)
    thread.join(timeout=10)
    engine.shutdown()


def post(port: int, *, timeout: str | None = None, key: str = KEY, model: str = "llama") -> requests.Response:
    headers = {"Authorization": f"Bearer {key}"} | ({"X-Wake-Timeout": timeout} if timeout is not None else {})
    body = {"model": model, "prompt": "wake up", "max_tokens": 3}
    return requests.post(f"http://127.0.0.1:{port}/v1/completions", json=body, headers=headers, timeout=30)


def test_a_request_wakes_the_deployment_waits_for_its_engine_and_gets_the_answer(world):
    portal = Portal((202, {"outcome": "woken", "state": "approved", "timeout_seconds": 0}))
    world["start"](portal)
    models = openai.OpenAI(base_url=f"http://127.0.0.1:{world['tenant']}/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in models.models.list()] == ["llama"]  # listed while asleep; listing wakes nothing
    assert portal.calls == []

    began = time.monotonic()
    answer = models.completions.create(
        model="llama", prompt="wake up", max_tokens=3, extra_headers={"X-Wake-Timeout": "20"}
    )

    assert (answer.model, answer.usage.completion_tokens) == ("llama", 3)
    assert time.monotonic() - began >= 0.5  # held until the portal's start put the engine on the table
    assert portal.calls[0] == ("/api/v1/gateway/wake/1", f"Bearer {KEY}")  # the client's key, for the portal
    calls = [(s["path"], s["authorization"]) for s in world["seen"]]
    assert calls[-1] == ("/v1/completions", "Bearer up-1") and set(calls[:-1]) == {("/health", "Bearer up-1")}


def test_the_deployments_own_port_wakes_it_too_but_a_health_check_does_not(world):
    portal = Portal((202, {"outcome": "woken", "state": "approved", "timeout_seconds": 20}))
    world["start"](portal)
    health = requests.get(f"http://127.0.0.1:{world['own']}/health", timeout=5)
    assert (health.status_code, health.json()["error"]["code"], portal.calls) == (503, "deployment_asleep", [])

    answer = post(world["own"])  # no header: the tenant's default (20 s) from the portal's answer

    assert answer.status_code == 200 and answer.json()["model"] == "llama"
    assert len(portal.calls) >= 1


@pytest.mark.parametrize(
    ("code", "retry_after"), [("quota_exceeded", 60), ("schedule_closed", 3600), ("budget_stopped", 60)]
)
def test_a_refusal_is_a_503_with_retry_after_and_the_reason(world, code, retry_after):
    refusal = {
        "outcome": "refused",
        "state": "stopped",
        "code": code,
        "message": "No room.",
        "retry_after": retry_after,
    }
    portal = Portal((409, refusal))
    world["start"](portal)

    answer = post(world["tenant"], timeout="30")

    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == str(retry_after)
    error = answer.json()["error"]
    assert (error["code"], error["type"]) == (code, "server_error")
    assert error["message"] == "The model `llama` is stopped and was not woken: No room."
    assert len(portal.calls) == 1 and world["seen"] == []


def test_a_wait_that_runs_out_is_a_503_wake_timeout(world):
    portal = Portal((202, {"outcome": "starting", "state": "provisioning", "timeout_seconds": 600}))
    world["start"](portal)
    portal.on_wake = None  # it never comes up

    began = time.monotonic()
    answer = post(world["tenant"], timeout="1")

    assert 1 <= time.monotonic() - began < 5
    assert (answer.status_code, answer.headers["Retry-After"]) == (503, "10")
    assert answer.json()["error"]["code"] == "wake_timeout"
    assert "its deployment is provisioning" in answer.json()["error"]["message"]
    assert len(portal.calls) >= 2  # asked again while it waited


def test_a_start_that_fails_while_waiting_ends_the_wait_at_once(world):
    portal = Portal((202, {"outcome": "woken", "state": "approved", "timeout_seconds": 0}))
    world["start"](portal)
    portal.on_wake = None
    failed = {
        "outcome": "refused",
        "state": "failed",
        "code": "not_wakeable",
        "message": "It failed.",
        "retry_after": 60,
    }
    threading.Timer(0.2, lambda: setattr(portal, "reply", (409, failed))).start()

    began = time.monotonic()
    answer = post(world["tenant"], timeout="60")

    assert time.monotonic() - began < 10
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "not_wakeable")


def test_no_portal_to_ask_or_an_unreachable_one(world):
    world["start"](None)  # this gateway wakes nothing
    answer = post(world["tenant"], timeout="5")
    assert (answer.status_code, answer.json()["error"]["code"], answer.headers["Retry-After"]) == (
        503,
        "deployment_stopped",
        "60",
    )
    gone = Portal((202, {}))
    gone.server.shutdown()
    gone.server.server_close()
    world["start"](gone)
    answer = post(world["tenant"], timeout="5")
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "activator_unavailable")


@pytest.mark.parametrize("header", ["-1", "901", "1e3", "ten", "+5", "0x10", "", "99999999999999999999"])
def test_a_bad_wake_timeout_header_is_a_400_and_wakes_nothing(world, header):
    portal = Portal((202, {"outcome": "woken", "state": "approved", "timeout_seconds": 0}))
    world["start"](portal)
    answer = post(world["tenant"], timeout=header)
    assert answer.status_code == 400 and "X-Wake-Timeout" in answer.json()["error"]["message"]
    assert portal.calls == []


def test_a_wrong_key_never_reaches_the_portal(world):
    portal = Portal((202, {"outcome": "woken", "state": "approved", "timeout_seconds": 0}))
    world["start"](portal)
    answer = post(world["tenant"], key="llmp_not-a-key-at-all-000000", timeout="5")
    assert (answer.status_code, portal.calls) == (401, [])
    answer = post(world["own"], key="llmp_not-a-key-at-all-000000", timeout="5")
    assert (answer.status_code, portal.calls) == (401, [])


def test_the_portal_revoking_the_key_meanwhile_is_a_401(world):
    portal = Portal((401, {"error": {"code": "invalid_api_key"}}))
    world["start"](portal)
    answer = post(world["tenant"], timeout="5")
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "invalid_api_key")


def test_a_table_with_a_wake_url_that_is_not_http_is_not_a_table():
    with pytest.raises(ValueError, match="wake_url"):
        routes.parse(json.dumps({"tenants": {}, "deployments": {}, "keys": {}, "wake_url": "file:///etc/passwd"}))
    table = routes.Table(routes={1: routes.Route(1, 9, "alpha", "m", "", asleep=True)}, wake_url="http://x/")
    assert routes.parse(routes.dump(table)) == table


# --- through the local backend: a stop the policy may undo keeps the ports and the name ------------


def test_the_backend_keeps_a_wakeable_deployment_on_the_gateway_and_its_start_serves_the_held_request(tmp_path):
    from dataclasses import replace
    from pathlib import Path

    from runtime.backends.local.backend import LocalBackend
    from tests.runtime.test_gateway_local import StubEngine, spec

    portal = Portal((202, {"outcome": "woken", "state": "approved", "timeout_seconds": 30}))
    backend = LocalBackend(
        tmp_path / "runtime",
        engine=StubEngine(),
        model_root=Path("/models"),
        key_seed="s",
        gateway=True,
        stop_timeout=5,
        portal_url=portal.url.removesuffix(routes.WAKE_PATH),
    )
    from runtime.backends.local.keys import store_key

    store_key(backend.root, tenant_slug="alpha", key_id=5, deployment_id=None, api_key=KEY)
    llama = spec(1, "llama")
    try:
        first = backend.ensure(llama)
        wait_for(lambda: backend.observe(llama).state == "ready", timeout=30)
        own = int(first.endpoint_url.split(":")[2].split("/")[0])
        tenant = int(backend.tenant_endpoint("alpha").split(":")[2].split("/")[0])

        backend.remove(replace(llama, wakeable=True))  # the idle policy stopped it

        assert backend.load_state(1) is None and port_open(own) and port_open(tenant)
        alpha = openai.OpenAI(base_url=backend.tenant_endpoint("alpha"), api_key=KEY, max_retries=0)
        assert [m.id for m in alpha.models.list()] == ["llama"]
        portal.on_wake = lambda: backend.ensure(llama)  # what the reconcile does once the portal started it
        answer = alpha.completions.create(model="llama", prompt="x y", extra_headers={"X-Wake-Timeout": "30"})
        assert answer.usage.prompt_tokens == 2 and portal.calls[0] == ("/api/v1/gateway/wake/1", f"Bearer {KEY}")
        assert backend.observe(llama).state == "ready"

        backend.remove(llama)  # a person stopped it: nothing answers for it any more
        wait_for(lambda: not port_open(own) and not port_open(tenant), timeout=10, what="the ports to close")
    finally:
        backend.stop_all()
