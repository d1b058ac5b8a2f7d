"""Usage per API key on the cluster (access.gateway_usage), read from a real Prometheus.

Limitador cannot run here (no container engine, no Rust toolchain's crates), so a stand-in serves
what its exporter renders for the series the portal's TelemetryPolicy labels: counters named and
labelled as Kuadrant/limitador 2981b2bd limitador-server/src/prometheus_metrics.rs writes them
(`authorized_hits`, `limited_calls`, the `limitador_namespace` label beside the policy's labels),
which a real Prometheus (Debian's binary, tests/support/prometheus.py) scrapes and the portal
queries as it would on a cluster. What is tested is everything from that exposition on: the
query, which series count for which key and deployment (own routes, tenant endpoint routes, a
shared model's consumer route, the Try-it key), the trust rule, increases across reads, a
restarted Limitador, a second replica, and the rows the key page, the usage report and the
chargeback read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection
from django.utils import timezone

from access.gateway_usage import count_counters, count_gateway_metrics
from access.models import ApiKey, GatewaySeries, KeyUsageDay
from access.services import key_mint
from deployments import services
from quotas.models import Tenant
from runtime.exposition.limitador import GatewayCounter, counter_of
from sharing.models import Publication, Subscription
from tests.support.factories import draft
from tests.support.prometheus import Prometheus, duration, require_prometheus
from usage.chargeback import charges
from usage.keys import key_rows
from usage.models import UsageDay

INTERVAL_S = 0.5


class Limitador:
    """Serves a Limitador-shaped exposition that the test sets, with a generation gauge so the
    test knows when Prometheus holds the latest one."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, tuple], float] = {}
        self.generation = 0
        self._lock = threading.Lock()
        limitador = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = limitador.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, series: dict[tuple[str, tuple], float]) -> int:
        with self._lock:
            self.series = dict(series)
            self.generation += 1
            return self.generation

    def text(self) -> str:
        with self._lock:
            lines = ["# TYPE limitador_up gauge", "limitador_up 1", "# TYPE standin_generation gauge"]
            lines.append(f"standin_generation {self.generation}")
            for name in sorted({name for name, _ in self.series}):
                lines.append(f"# TYPE {name} counter")
                for (n, labels), value in sorted(self.series.items()):
                    if n == name:
                        inner = ",".join(f'{k}="{v}"' for k, v in labels)
                        lines.append(f"{name}{{{inner}}} {value:g}")
            return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def limitador() -> Iterator[tuple[Limitador, Prometheus]]:
    require_prometheus()
    stand_in = Limitador()
    port = stand_in.server.server_address[1]
    config = (
        "scrape_configs:\n  - job_name: limitador\n"
        f"    scrape_interval: {duration(INTERVAL_S)}\n    scrape_timeout: {duration(INTERVAL_S)}\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    prometheus = Prometheus(config, interval_s=INTERVAL_S)
    try:
        yield stand_in, prometheus
    finally:
        prometheus.stop()
        stand_in.close()


def publish(limitador: tuple[Limitador, Prometheus], series: dict) -> None:
    """Serve `series` and wait until Prometheus has scraped them."""
    stand_in, prometheus = limitador
    generation = stand_in.set(series)
    prometheus.wait_for("standin_generation", lambda r: r and float(r[0]["value"][1]) >= generation, timeout=30)


def hits(ns: str, route: str, key: str, model: str = "", served: bool = False, **extra) -> tuple[str, tuple]:
    labels = {"limitador_namespace": f"{ns}/{route}", "llm_portal_key": key, **extra}
    if model:
        labels["llm_portal_model"] = model
    if served:
        labels["llm_portal_served"] = model
    return ("authorized_hits", tuple(sorted(labels.items())))


def refused(ns: str, route: str, key: str, model: str = "") -> tuple[str, tuple]:
    return ("limited_calls", hits(ns, route, key, model)[1])


@pytest.fixture
def cluster(world, settings):
    settings.GATEWAY_PUBLIC_URL = "https://llm.example.com/"
    settings.GATEWAY_NAME, settings.GATEWAY_NAMESPACE = "llm-gateway", "gateway-system"
    settings.API_KEY_NAMESPACE = "kuadrant-system"
    member = world.users["member"]
    chat = services.deployment_create(tenant=world.alpha, user=member, data=draft(world, name="chat"))
    embed = services.deployment_create(tenant=world.alpha, user=member, data=draft(world, name="embed"))
    own = services.deployment_create(
        tenant=world.beta, user=world.users["other_member"], data=draft(world, name="beta-own")
    )
    publication = Publication.objects.create(deployment=chat, to_all=True)
    Subscription.objects.create(publication=publication, consumer=world.beta, state="active")

    def mint(tenant, role, deployment=None):
        return key_mint(user=world.users[role], tenant=tenant, name="k", deployment_id=deployment and deployment.pk)[0]

    keys = {
        "alpha": mint(world.alpha, "tenant_admin"),
        "alpha-chat": mint(world.alpha, "tenant_admin", chat),
        "beta": mint(world.beta, "platform_admin"),
        "beta-own": mint(world.beta, "platform_admin", own),
    }
    return {"chat": chat, "embed": embed, "own": own, "keys": keys}


def rows() -> list[tuple]:
    found = KeyUsageDay.objects.values_list("key_id", "deployment_id", "requests", "failed", "unsplit_tokens")
    return sorted(found, key=str)


def test_each_keys_requests_and_tokens_are_counted_from_the_gateways_counters(world, cluster, limitador, settings):
    _, prometheus = limitador
    settings.PROMETHEUS_URL = prometheus.url
    chat, embed, own, k = cluster["chat"], cluster["embed"], cluster["own"], cluster["keys"]
    alpha, alpha_chat, beta = (f"key-{k[name].pk}" for name in ("alpha", "alpha-chat", "beta"))
    chat_route, embed_route = chat.resource_name, embed.resource_name
    first = {
        # alpha's tenant key on chat's own route: 5 requests let through, 300 tokens, 1 refused
        hits("alpha", chat_route, alpha, "chat"): 5,
        hits("alpha", chat_route, alpha, "chat", served=True): 300,
        refused("alpha", chat_route, alpha, "chat"): 1,
        # the key scoped to chat, through the tenant endpoint (the model names the deployment)
        hits("alpha", "llm-portal-v1", alpha_chat, "chat"): 2,
        hits("alpha", "llm-portal-v1", alpha_chat, "chat", served=True): 50,
        hits("alpha", "llm-portal-v1", alpha, "embed"): 1,
        hits("alpha", "llm-portal-v1", alpha, "embed", served=True): 7,
        # beta's tenant key on the model alpha shares with it, on beta's route in alpha's namespace
        hits("alpha", "llm-portal-v1-beta", beta, "chat"): 3,
        hits("alpha", "llm-portal-v1-beta", beta, "chat", served=True): 90,
        # the portal's Try-it key of chat
        hits("alpha", chat_route, f"portal-try-{chat.pk}", "chat", served=True): 10,
        # none of these count: a key scoped to another deployment, beta's scoped key on the shared
        # model, Try-it of another deployment, an unknown key, a route in the wrong namespace, a
        # route that is nobody's, and a series without a key
        hits("alpha", embed_route, alpha_chat, "embed", served=True): 1000,
        hits("alpha", "llm-portal-v1-beta", f"key-{k['beta-own'].pk}", "chat", served=True): 1000,
        hits("alpha", chat_route, f"portal-try-{embed.pk}", "chat", served=True): 1000,
        hits("alpha", chat_route, "key-999999", "chat", served=True): 1000,
        hits("beta", chat_route, alpha, "chat", served=True): 1000,
        hits("alpha", "somebody-else", alpha, "chat", served=True): 1000,
        hits("alpha", chat_route, "", "chat", served=True): 1000,
        hits("beta", own.resource_name, f"key-{k['beta-own'].pk}", "beta-own"): 4,  # beta's own: counts
    }
    publish(limitador, first)
    assert count_gateway_metrics() == 11
    expected = {
        (k["alpha"].pk, chat.pk): [6, 1, 300],
        (k["alpha-chat"].pk, chat.pk): [2, 0, 50],
        (k["alpha"].pk, embed.pk): [1, 0, 7],
        (k["beta"].pk, chat.pk): [3, 0, 90],
        (None, chat.pk): [0, 0, 10],
        (k["beta-own"].pk, own.pk): [4, 0, 0],
    }
    assert rows() == sorted(((key, dep, *v) for (key, dep), v in expected.items()), key=str)
    assert count_gateway_metrics() == 0  # read again unchanged: nothing more
    assert rows() == sorted(((key, dep, *v) for (key, dep), v in expected.items()), key=str)
    assert ApiKey.objects.get(pk=k["alpha"].pk).last_used is not None

    # Later: alpha's counters grew, a second Limitador replica counted too, and beta's went back
    # (a restart): what grew counts, and a restarted counter counts whole.
    second = dict(first)
    second[hits("alpha", chat_route, alpha, "chat")] = 8
    second[hits("alpha", chat_route, alpha, "chat", served=True)] = 400
    second[hits("alpha", chat_route, alpha, "chat", pod="limitador-2")] = 2
    second[hits("alpha", "llm-portal-v1-beta", beta, "chat", served=True)] = 20
    publish(limitador, second)
    count_gateway_metrics()
    expected[(k["alpha"].pk, chat.pk)] = [11, 1, 400]
    expected[(k["beta"].pk, chat.pk)] = [3, 0, 110]
    assert rows() == sorted(((key, dep, *v) for (key, dep), v in expected.items()), key=str)

    # What the pages read: the key's month, the report's key rows, beta's share of chat's cost.
    month = timezone.localdate().replace(day=1)
    annotated = ApiKey.objects.filter(pk=k["alpha"].pk).with_month_usage().get()
    assert (annotated.month_requests, annotated.month_unsplit_tokens) == (12, 407)
    by_key = {(r["key_id"], r["deployment_id"]): r for r in key_rows(Tenant.objects.all(), month=month)}
    assert by_key[(k["beta"].pk, chat.pk)]["unsplit_tokens"] == 110
    UsageDay.objects.create(
        deployment=chat, tenant=world.alpha, day=timezone.localdate(), reserved_gpu_hours=1, cost=Decimal("5.70")
    )
    (charge,) = charges(month)
    # chat's day: alpha 400 + 50 + Try-it 10 = 460 tokens, beta 110: beta owes 5.70 × 110 / 570
    assert (charge.consumer, charge.tokens, charge.share_tokens, charge.cost) == ("beta", 110, 570, Decimal("1.10"))


def test_without_prometheus_or_a_gateway_nothing_is_read(world, cluster, settings):
    settings.PROMETHEUS_URL = None
    assert count_gateway_metrics() is None
    settings.PROMETHEUS_URL, settings.GATEWAY_PUBLIC_URL = "http://127.0.0.1:9", None
    assert count_gateway_metrics() is None
    assert rows() == []


def test_an_unreachable_prometheus_is_a_scrape_error_that_the_task_logs(world, cluster, settings, caplog):
    from access.tasks import count_key_usage_task

    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    assert count_key_usage_task() == 0
    assert "per-key usage from the Gateway not read" in caplog.text


def test_series_unseen_for_a_week_are_forgotten(world, cluster):
    chat, key = cluster["chat"], cluster["keys"]["alpha"]
    counter = counter_of(
        {"__name__": "authorized_hits", **dict(hits("alpha", chat.resource_name, f"key-{key.pk}")[1])}, "3"
    )
    count_counters([counter], at=time.time())
    stale = GatewaySeries.objects.create(series="0" * 64, value=5)
    GatewaySeries.objects.filter(pk=stale.pk).update(updated=timezone.now() - timedelta(days=8))
    count_counters([counter], at=time.time())
    assert list(GatewaySeries.objects.values_list("series", flat=True)) == [counter.series]


@pytest.mark.django_db(transaction=True)
def test_two_workers_reading_the_same_counters_count_them_once(tx_world, settings):
    world = tx_world
    chat = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, name="chat"))
    key = key_mint(user=world.users["tenant_admin"], tenant=world.alpha, name="k")[0]
    labels = dict(hits("alpha", chat.resource_name, f"key-{key.pk}", "chat", served=True)[1])
    counters: list[GatewayCounter] = [counter_of({"__name__": "authorized_hits", **labels}, "250")]
    barrier, counted = threading.Barrier(2), []

    def work():
        try:
            barrier.wait()
            counted.append(count_counters(counters, at=time.time()))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(counted) == [0, 1]
    assert rows() == [(key.pk, chat.pk, 0, 0, 250)]
