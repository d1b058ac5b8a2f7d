"""Shared models on the local gateway (issue 34): alpha's `llama` (deployment 1) shared with beta.
Beta's tenant-wide key lists and reaches it on beta's own port, under beta's limits; a 429 follows
the limit, as Kuadrant's would; the engine sees the gateway's key; the usage row names beta as the
consumer. World and keys: tests/runtime/test_gateway_local.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import requests

from runtime.gateway_local import routes
from runtime.gateway_local.app import Meter
from runtime.gateway_local.usage import USAGE_FILE, read_usage
from tests.runtime import test_gateway_local as base
from tests.runtime.test_gateway_local import ALPHA, BETA, client, openai, url
from tests.support.processes import wait_for

world = base.world  # the same fixture: three stand-in engines behind a running gateway

BETA_SCOPED = "llmp_beta-scoped-key-0000000000"


def share(world, **limits) -> None:
    """Write the table again with deployment 1 shared with beta (and a beta key scoped to 3)."""
    table = world["table"]
    keys = {**table.keys, routes.key_digest(BETA_SCOPED): routes.Grant(22, "beta", 3)}
    shared = replace(table, keys=keys, shares={"beta": {1: routes.Limits(**limits)}})
    routes.write(world["dir"] / routes.ROUTES_FILE, shared)
    world["table"] = shared


def post(world, body: dict) -> requests.Response:
    """A completion on beta's port with beta's key."""
    return requests.post(
        url(world["ports"][1]) + "/completions", json=body, headers={"Authorization": f"Bearer {BETA}"}
    )


def rows(world) -> list[tuple]:
    return [(r.key_id, r.tenant, r.consumer, r.deployment_id, r.prompt_tokens, r.completion_tokens, r.status)
            for r in read_usage(world["dir"] / USAGE_FILE)]  # fmt: skip


def test_beta_lists_and_reaches_the_shared_model_on_its_own_port_with_its_own_key(world):
    share(world)
    beta = client(world["ports"][1], BETA)
    assert [(m.id, m.owned_by) for m in beta.models.list()] == [("llama", "alpha"), ("mistral", "beta")]
    answer = beta.completions.create(model="llama", prompt="one two", max_tokens=2)
    assert (answer.model, answer.usage.prompt_tokens) == ("llama", 2)
    assert [s["authorization"] for s in world["seen"][1]] == ["Bearer up-1"]  # the gateway's key, not beta's
    assert rows(world) == [(21, "alpha", "beta", 1, 2, 2, 200)]
    # A key scoped to one of beta's deployments does not reach shared models.
    assert [m.id for m in client(world["ports"][1], BETA_SCOPED).models.list()] == ["mistral"]


def test_beta_cannot_use_alphas_ports_and_an_unshared_model_is_not_found(world):
    share(world)
    for port in (world["ports"][0], world["table"].routes[1].port):  # alpha's tenant port, the deployment's port
        with pytest.raises(openai.AuthenticationError):
            client(port, BETA).completions.create(model="llama", prompt="x")
    with pytest.raises(openai.NotFoundError):
        client(world["ports"][1], BETA).completions.create(model="qwen", prompt="x")
    assert not world["seen"][1] and not world["seen"][2]


def test_the_request_limit_answers_429_with_retry_after_and_logs_the_refusal(world):
    share(world, requests_per_minute=2)
    beta = client(world["ports"][1], BETA)
    for _ in range(2):
        beta.completions.create(model="llama", prompt="x", max_tokens=1)
    with pytest.raises(openai.RateLimitError) as refused:
        beta.completions.create(model="llama", prompt="x", max_tokens=1)
    assert refused.value.body["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused.value.response.headers["Retry-After"]) <= 60
    assert len(world["seen"][1]) == 2
    assert [r[-1] for r in rows(world)] == [200, 200, 429]
    # Beta's own model is beta's own: no limit there; alpha's own use of llama is not beta's.
    assert beta.completions.create(model="mistral", prompt="x").model == "mistral"
    assert client(world["ports"][0], ALPHA).completions.create(model="llama", prompt="x").model == "llama"


def test_the_token_limit_lets_the_crossing_request_finish_and_refuses_the_next(world):
    share(world, tokens_per_minute=4)
    first = post(world, {"model": "llama", "prompt": "a b c", "max_tokens": 2})
    second = post(world, {"model": "llama", "prompt": "a"})
    assert (first.status_code, second.status_code) == (200, 429)
    assert "tokens-per-minute" in second.json()["error"]["message"]


def test_a_streamed_answers_tokens_count_toward_the_limit(world):
    share(world, tokens_per_minute=5)
    streamed = post(world, {"model": "llama", "prompt": "a b", "max_tokens": 4, "stream": True})
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    wait_for(lambda: rows(world), timeout=5, interval=0.02, what="the stream's usage row")
    after = post(world, {"model": "llama", "prompt": "a"})
    assert after.status_code == 429


def test_the_consumers_own_model_wins_a_shared_name():
    own = routes.Route(3, 9003, "beta", "llama", "http://127.0.0.1:1")
    shared = routes.Route(1, 9001, "alpha", "llama", "http://127.0.0.1:2")
    table = routes.Table(routes={1: shared, 3: own}, shares={"beta": {1: routes.Limits()}})
    grant = routes.Grant(21, "beta")
    assert table.models("beta", grant) == [own]
    assert table.route("beta", "llama", grant) == own and table.limits("beta", own) is None
    assert routes.parse(routes.dump(table)) == table


def test_a_meter_window_starts_again_after_a_minute():
    now = [100.0]
    meter = Meter(clock=lambda: now[0])
    limits = routes.Limits(requests_per_minute=1)
    assert meter.admit(("beta", 1), limits) is None
    assert meter.admit(("beta", 1), limits) == ("requests", 60)
    now[0] += 59.5
    assert meter.admit(("beta", 1), limits) == ("requests", 1)
    now[0] += 0.5
    assert meter.admit(("beta", 1), limits) is None


@pytest.mark.parametrize("bad", [{"tokens_per_minute": "9"}, {"requests_per_minute": -1}, {"tokens_per_minute": True}])
def test_a_routing_file_with_a_bad_limit_is_not_a_table(bad):
    text = routes.dump(routes.Table()).replace('"shares": {}', '"shares": {"beta": {"1": ' + json.dumps(bad) + "}}")
    with pytest.raises(ValueError):
        routes.parse(text)


def test_the_backends_table_gives_a_consumer_a_port_for_shares_of_running_engines_only(tmp_path):
    from types import SimpleNamespace

    from runtime.backends.local.gateway import LocalGateway

    gateway = LocalGateway(tmp_path, seed="s")
    engines = [SimpleNamespace(deployment_id=1, tenant_slug="alpha", model="llama")]
    limits = routes.Limits(tokens_per_minute=10)
    assert gateway.write_shares({"beta": {1: limits, 7: routes.Limits()}, "gamma": {7: routes.Limits()}}) is True
    assert gateway.write_shares({"beta": {1: limits, 7: routes.Limits()}, "gamma": {7: routes.Limits()}}) is False
    table = gateway.write(engines, lambda state: "http://127.0.0.1:1")
    assert table.shares == {"beta": {1: limits}}  # 7 runs nowhere; gamma has nothing running to reach
    assert set(table.tenants) == {"alpha", "beta"} and table.tenants["beta"] == gateway.tenant_port("beta")
    assert routes.TableFile(tmp_path / "gateway" / routes.ROUTES_FILE).current() == table
