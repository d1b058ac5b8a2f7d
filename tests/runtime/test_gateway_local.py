"""The local gateway (runtime.gateway_local) in front of stand-in OpenAI servers on loopback: real
sockets, the real aiohttp server and client, the OpenAI Python client where a user would use it.

World: tenant alpha serves `llama` (deployment 1) and `qwen` (2); beta serves `mistral` (3).
Keys: alpha's tenant-wide key (id 11), alpha's key for qwen only (12), beta's key (21).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.engine import http_ok
from runtime.backends.local.gateway import GATEWAY_DIR, LocalGateway, port_open
from runtime.backends.local.keys import drop_key, store_key
from runtime.backends.local.ports import PortAllocator
from runtime.gateway_local import routes
from runtime.gateway_local.app import Gateway
from runtime.gateway_local.usage import USAGE_FILE, UsageRecord, read_usage
from runtime.spec import DeploymentSpec, FlavorSpec
from tests.support import openai_stub
from tests.support.processes import wait_for

# The OpenAI client, as users call the gateway (installed with vLLM, the [local] extra, as in CI).
openai = pytest.importorskip("openai")
ALPHA, ALPHA_QWEN, BETA = (
    "llmp_alpha-wide-key-000000000",
    "llmp_alpha-qwen-key-000000000",
    "llmp_beta-key-00000000000000",
)


@pytest.fixture
def world(tmp_path):
    """Three stand-in engines (each accepting only its upstream key) and the gateway serving them."""
    engines = {i: openai_stub.serve(model, key=f"up-{i}") for i, model in ((1, "llama"), (2, "qwen"), (3, "mistral"))}
    ports = PortAllocator(tmp_path).allocate(5)
    table = routes.Table(
        tenants={"alpha": ports[0], "beta": ports[1]},
        routes={
            i: routes.Route(i, ports[1 + i], tenant, model, f"http://127.0.0.1:{engines[i][0].server_port}", f"up-{i}")
            for i, tenant, model in ((1, "alpha", "llama"), (2, "alpha", "qwen"), (3, "beta", "mistral"))
        },
        keys={
            routes.key_digest(ALPHA): routes.Grant(11, "alpha"),
            routes.key_digest(ALPHA_QWEN): routes.Grant(12, "alpha", 2),
            routes.key_digest(BETA): routes.Grant(21, "beta"),
        },
    )
    directory = tmp_path / GATEWAY_DIR
    routes.write(directory / routes.ROUTES_FILE, table)
    gateway = Gateway(directory)
    loop, stop = asyncio.new_event_loop(), asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(gateway.run(stop, poll=0.05),), daemon=True)
    thread.start()
    wait_for(lambda: all(port_open(p) for p in table.ports), timeout=10, what="the gateway's ports")
    yield {"table": table, "seen": {i: e[1] for i, e in engines.items()}, "dir": directory, "ports": ports}
    loop.call_soon_threadsafe(stop.set)
    thread.join(timeout=10)
    for server, _seen in engines.values():
        server.shutdown()


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def client(port: int, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url(port), api_key=key, max_retries=0)


def usage_rows(world: dict[str, Any]) -> list[tuple]:
    return [(r.key_id, r.tenant, r.deployment_id, r.model, r.prompt_tokens, r.completion_tokens, r.status)
            for r in read_usage(world["dir"] / USAGE_FILE)]  # fmt: skip


def streamed_usage_rows(world: dict[str, Any]) -> list[tuple]:
    """The usage rows once the gateway has logged the stream: it appends the row after the last
    event went out, so a client that read `[DONE]` may look before it is there."""
    return wait_for(lambda: usage_rows(world), timeout=5, interval=0.02, what="the stream's usage row")


class TestTenantEndpoint:
    def test_it_routes_by_model_and_sends_the_engines_key_not_the_users(self, world):
        alpha = client(world["ports"][0], ALPHA)

        one = alpha.completions.create(model="llama", prompt="one two three", max_tokens=2)
        two = alpha.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}], max_tokens=4)

        assert (one.model, one.usage.completion_tokens, two.model, two.usage.completion_tokens) == (
            "llama",
            2,
            "qwen",
            4,
        )
        assert [(s["path"], s["authorization"]) for s in world["seen"][1]] == [("/v1/completions", "Bearer up-1")]
        assert [(s["path"], s["authorization"]) for s in world["seen"][2]] == [("/v1/chat/completions", "Bearer up-2")]
        assert usage_rows(world) == [(11, "alpha", 1, "llama", 3, 2, 200), (11, "alpha", 2, "qwen", 1, 4, 200)]

    def test_models_lists_what_the_presented_key_may_use_without_asking_an_engine(self, world):
        port = world["ports"][0]
        assert [m.id for m in client(port, ALPHA).models.list()] == ["llama", "qwen"]
        assert [m.id for m in client(port, ALPHA_QWEN).models.list()] == ["qwen"]
        assert [m.id for m in client(world["ports"][1], BETA).models.list()] == ["mistral"]
        assert not any(world["seen"].values())

    @pytest.mark.parametrize("key", [BETA, "llmp_not-a-key-at-all-000000", None])
    def test_a_foreign_wrong_or_missing_key_gets_401(self, world, key):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        for method, path in (("GET", "/models"), ("POST", "/completions")):
            answer = requests.request(method, url(world["ports"][0]) + path, json={"model": "llama"}, headers=headers)
            assert (answer.status_code, answer.json()["error"]["code"]) == (401, "invalid_api_key")
        if key:
            with pytest.raises(openai.AuthenticationError):
                client(world["ports"][0], key).completions.create(model="llama", prompt="x")
        assert not any(world["seen"].values()) and usage_rows(world) == []

    def test_an_unknown_model_or_one_outside_the_keys_scope_is_model_not_found(self, world):
        for key, model in ((ALPHA, "mistral"), (ALPHA, "gpt-4"), (ALPHA_QWEN, "llama")):
            with pytest.raises(openai.NotFoundError) as refused:
                client(world["ports"][0], key).completions.create(model=model, prompt="x")
            assert refused.value.body["code"] == "model_not_found"
        assert not any(world["seen"].values())

    def test_a_body_that_is_not_json_is_400_and_one_over_4_mib_is_413(self, world):
        headers = {"Authorization": f"Bearer {ALPHA}", "Content-Type": "application/json"}
        bad = requests.post(url(world["ports"][0]) + "/completions", data=b"{not json", headers=headers)
        listed = requests.post(url(world["ports"][0]) + "/completions", data=b"[1]", headers=headers)
        big = json.dumps({"model": "llama", "prompt": "x" * (4 * 1024 * 1024)})
        huge = requests.post(url(world["ports"][0]) + "/completions", data=big, headers=headers)

        assert (bad.status_code, bad.json()["error"]["type"]) == (400, "invalid_request_error")
        assert listed.status_code == 400
        assert (huge.status_code, huge.json()["error"]["code"]) == (413, "request_too_large")
        assert not any(world["seen"].values())


class TestStreaming:
    def test_events_pass_through_as_they_come_and_the_usage_is_counted(self, world, monkeypatch):
        monkeypatch.setattr(openai_stub, "STEP_SECONDS", 0.1)
        started = time.monotonic()
        answer = requests.post(
            url(world["ports"][0]) + "/completions",
            json={"model": "llama", "prompt": "a b", "max_tokens": 10, "stream": True},
            headers={"Authorization": f"Bearer {ALPHA}"},
            stream=True,
        )
        lines = answer.iter_lines()
        first = next(line for line in lines if line)
        first_at = time.monotonic() - started
        rest = [line for line in lines if line]

        assert first_at < 0.6  # ten events 0.1 s apart: the first came long before the last was sent
        assert json.loads(first[5:])["choices"][0]["text"] == "t0 "
        assert len(rest) == 10 and rest[-1] == b"data: [DONE]"  # 9 more tokens, no usage event: not asked
        # The engine was asked for the usage event, and the gateway counted it.
        assert world["seen"][1][0]["json"]["stream_options"] == {"include_usage": True}
        assert streamed_usage_rows(world) == [(11, "alpha", 1, "llama", 2, 10, 200)]

    def test_a_client_that_asks_for_usage_gets_it_through_the_openai_client(self, world):
        stream = client(world["ports"][0], ALPHA).chat.completions.create(
            model="qwen",
            messages=[{"role": "user", "content": "one two"}],
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)

        assert "".join(c.choices[0].delta.content for c in chunks if c.choices) == "t0 t1 t2 "
        assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (2, 3)
        assert streamed_usage_rows(world) == [(11, "alpha", 2, "qwen", 2, 3, 200)]

    def test_a_client_that_leaves_on_done_still_has_its_tokens_counted(self, world, monkeypatch):
        monkeypatch.setattr(openai_stub, "TRAILER", b": still here\n\n")  # the engine writes on after [DONE]
        stream = client(world["ports"][0], ALPHA).completions.create(
            model="llama", prompt="a b c", max_tokens=4, stream=True
        )
        assert "".join(c.choices[0].text for c in stream) == "t0 t1 t2 t3 "  # the client closes on [DONE]
        assert streamed_usage_rows(world) == [(11, "alpha", 1, "llama", 3, 4, 200)]


class TestDeploymentEndpoint:
    def test_everything_goes_to_its_deployment_for_a_key_scoped_to_it(self, world):
        deployment_port = world["table"].routes[1].port
        answer = client(deployment_port, ALPHA).embeddings.create(model="llama", input="four words in here")
        assert answer.usage.prompt_tokens == 4
        with pytest.raises(openai.AuthenticationError):  # scoped to qwen: not this deployment
            client(deployment_port, ALPHA_QWEN).completions.create(model="llama", prompt="x")
        assert http_ok(f"http://127.0.0.1:{deployment_port}/health")  # open, as the engine's is
        assert usage_rows(world) == [(11, "alpha", 1, "llama", 4, 0, 200)]


class TestReload:
    def test_a_revoked_key_is_refused_from_the_next_request_and_a_new_tenant_port_opens(self, world):
        alpha = client(world["ports"][0], ALPHA)
        assert alpha.completions.create(model="llama", prompt="x").usage.completion_tokens == 3
        table = world["table"]
        keys = {d: g for d, g in table.keys.items() if g.key_id != 11}
        gamma = PortAllocator(world["dir"]).allocate(1)[0]
        routes.write(
            world["dir"] / routes.ROUTES_FILE, routes.Table({**table.tenants, "gamma": gamma}, table.routes, keys)
        )

        with pytest.raises(openai.AuthenticationError):
            alpha.completions.create(model="llama", prompt="x")
        assert [m.id for m in client(world["ports"][0], ALPHA_QWEN).models.list()] == ["qwen"]
        wait_for(lambda: port_open(gamma), timeout=5, what="the new tenant's port")


def test_usage_log_rotates_and_reads_back_in_order(tmp_path):
    from runtime.gateway_local.usage import UsageLog

    log = UsageLog(tmp_path / USAGE_FILE, max_bytes=400)
    records = [UsageRecord(float(i), i, "alpha", 1, "llama", i, 2 * i, 200) for i in range(8)]
    for record in records:
        log.append(record)
    assert (tmp_path / (USAGE_FILE + ".1")).exists()
    kept = list(read_usage(tmp_path / USAGE_FILE))
    assert kept == records[-len(kept) :] and 2 < len(kept) < 8


# --- through the local backend: the gateway process, its ports, keys from the key store ----------

CPU = FlavorSpec(name="cpu", gpu_model="CPU", accelerator_type="", gpu_memory_gib=0, gpus_per_node=1)


class StubEngine:
    """The stand-in OpenAI server as the backend's engine (a real detached process per deployment)."""

    kind, required_modules, port_count = "stub", ("http.server",), 1

    def config(self, spec: DeploymentSpec) -> dict[str, Any]:
        return {"model": spec.served_model_name}

    def argv(self, python: str, config: dict[str, Any], ports: list[int], run_dir: Path) -> list[str]:
        return [python, "-m", "tests.support.openai_stub", str(ports[0]), config["model"]]

    def ready(self, ports: list[int], run_dir: Path) -> bool:
        return http_ok(f"http://127.0.0.1:{ports[0]}/health")

    def urls(self, ports: list[int]) -> tuple[str, str]:
        return f"http://127.0.0.1:{ports[0]}/v1", f"http://127.0.0.1:{ports[0]}/metrics"


def spec(deployment_id: int, model: str) -> DeploymentSpec:
    return DeploymentSpec(
        deployment_id=deployment_id,
        name=model,
        namespace="alpha",
        tenant_slug="alpha",
        queue_name="lq",
        model_source=f"/models/{model}",
        served_model_name=model,
        flavor=CPU,
        backend="local",
    )


@pytest.fixture
def backend(tmp_path):
    made = LocalBackend(
        tmp_path / "runtime",
        engine=StubEngine(),
        model_root=Path("/models"),
        key_seed="s",
        gateway=True,
        stop_timeout=5,
    )
    yield made
    made.stop_all()


def test_the_backend_runs_one_gateway_whose_ports_and_keys_follow_its_files(backend):
    root = backend.root
    store_key(root, tenant_slug="alpha", key_id=5, deployment_id=None, api_key=ALPHA)
    first = backend.ensure(spec(1, "llama"))
    backend.ensure(spec(2, "qwen"))
    ready = wait_for(lambda: (o := backend.observe(spec(1, "llama"))).state == "ready" and o, timeout=30)
    wait_for(lambda: backend.observe(spec(2, "qwen")).state == "ready", timeout=30)
    tenant_url, gateway_pid = backend.tenant_endpoint("alpha"), backend.gateway._state()["pid"]
    engine_port = backend.load_state(1).ports[0]
    assert ready.endpoint_url == first.endpoint_url != f"http://127.0.0.1:{engine_port}/v1"

    alpha = openai.OpenAI(base_url=tenant_url, api_key=ALPHA, max_retries=0)
    assert [m.id for m in alpha.models.list()] == ["llama", "qwen"]
    assert alpha.completions.create(model="qwen", prompt="x y").usage.prompt_tokens == 2
    try_it = requests.post(  # the portal's own key opens its deployment's endpoint, not the tenant's
        f"{ready.endpoint_url}/completions",
        json={"model": "llama", "prompt": "x"},
        headers={"Authorization": "Bearer " + __import__("runtime.keys").keys.portal_key("s", 1)},
    )
    assert try_it.status_code == 200

    # Revoked: the key store and the routing file change; the engines and the gateway stay.
    drop_key(root, tenant_slug="alpha", key_id=5)
    assert backend.refresh_keys(tenant_slug="alpha", deployment_id=1) is True
    with pytest.raises(openai.AuthenticationError):
        alpha.models.list()
    assert backend.gateway._state()["pid"] == gateway_pid and backend.load_state(1).ports[0] == engine_port

    # The gateway and the engines restart (a reboot, the demo's stop and start): same URLs.
    assert backend.stop_all() == 2
    assert not port_open(int(tenant_url.split(":")[2].split("/")[0]))
    backend.remove(spec(1, "llama"))
    backend.remove(spec(2, "qwen"))
    store_key(root, tenant_slug="alpha", key_id=6, deployment_id=1, api_key=ALPHA_QWEN)
    again = backend.ensure(spec(1, "llama"))
    backend.ensure(spec(2, "qwen"))
    wait_for(lambda: backend.observe(spec(1, "llama")).state == "ready", timeout=30)
    assert (again.endpoint_url, backend.tenant_endpoint("alpha")) == (first.endpoint_url, tenant_url)
    assert backend.gateway._state()["pid"] != gateway_pid
    scoped = openai.OpenAI(base_url=tenant_url, api_key=ALPHA_QWEN, max_retries=0)
    assert [m.id for m in scoped.models.list()] == ["llama"]
    records = list(read_usage(root / GATEWAY_DIR / USAGE_FILE))
    assert [(r.key_id, r.deployment_id, r.model, r.prompt_tokens) for r in records] == [
        (5, 2, "qwen", 2),
        (None, 1, "llama", 1),
    ]
    assert LocalGateway(root).alive()
