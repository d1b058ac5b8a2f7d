"""An embedding or score deployment's dashboard, API and advice show only what vLLM's pooling runner
reports (metrics.charts.GENERATION_CHARTS has the vLLM 0.32 citation); a chat deployment's are
unchanged. Points are the real 15-scrape series in ../shared/fixtures/metrics, stored as the
scrape cycle stores them."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from metrics import charts
from metrics.advice import advice_for
from metrics.advisor import Objectives, advise
from metrics.models import MetricSample
from metrics.store import new_sample
from runtime.exposition.derive import MetricPoint, derive
from runtime.exposition.parse import parse_exposition
from tests.support.factories import draft
from tests.support.shared import shared_path

D = "/api/v1/deployments"
POOLING_CHARTS = [
    "tokens",
    "requests",
    "queue",
    "queue_time",
    "waiting_reasons",
    "rejections",
    "kv_cache",
    "replicas",
    "prefill",
    "e2e",
    "prefix_cache",
    "preemptions",
]
GENERATION = {"generation_tokens_per_s", "ttft_p50", "ttft_p95", "itl_p50", "itl_p95", "decode_p50", "decode_p95"}
CHART_DIV = re.compile(r'<div class="chart" id="chart-(\w+)"')


def real_points() -> list[MetricPoint]:
    """The real series, moved so that its last scrape was 5 s ago."""
    folder = shared_path("fixtures", "metrics", "series-vllm-0.32-cpu")
    prev, points = None, []
    for path in sorted(folder.glob("*.prom")):
        cur = parse_exposition(path.read_text(), timestamp=float(path.stem.split("_", 1)[1]))
        points.append(derive(prev, cur))
        prev = cur
    shift = datetime.now(UTC).timestamp() - 5 - points[-1].timestamp
    return [replace(p, timestamp=p.timestamp + shift) for p in points]


def serving(world, task: str, name: str):
    from deployments import services

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, name=name))
    type(dep).objects.filter(pk=dep.pk).update(state="ready", task=task)
    dep.refresh_from_db()
    MetricSample.objects.bulk_create([new_sample(dep.pk, p) for p in real_points()])
    return dep


@pytest.fixture
def embedding(world):
    return serving(world, "embedding", "embedder")


@pytest.fixture
def chat(world):
    return serving(world, "chat", "chatter")


def api(world):
    client = APIClient()
    client.force_authenticate(world.users["member"])
    return client


class TestChartNames:
    def test_a_pooling_task_has_no_generation_chart(self):
        assert charts.chart_names("embedding") == charts.chart_names("score") == POOLING_CHARTS

    def test_a_generating_task_has_every_chart(self):
        assert charts.chart_names("chat") == charts.chart_names("completion") == list(charts.CHARTS)


class TestDashboardPage:
    def test_the_pooling_page_lays_out_only_its_charts(self, world, embedding):
        page = world.browser("member").get(f"/deployments/{embedding.pk}/").content.decode()
        assert CHART_DIV.findall(page) == POOLING_CHARTS

    def test_the_chat_page_keeps_every_chart(self, world, chat):
        page = world.browser("member").get(f"/deployments/{chat.pk}/").content.decode()
        assert CHART_DIV.findall(page) == list(charts.CHARTS)

    def test_pooling_figures_are_its_charts_and_throughput_is_prompt_tokens(self, world, embedding):
        figures = world.browser("member").get(f"/deployments/{embedding.pk}/charts/?window=1h").json()
        assert [k for k in figures if k != "_meta"] == POOLING_CHARTS
        tokens = figures["tokens"]
        assert tokens["layout"]["title"]["text"].startswith("Prompt throughput · over ")
        assert [trace["name"] for trace in tokens["data"]] == ["prompt"]
        assert max(v for v in tokens["data"][0]["y"] if v is not None) > 0  # the real burst's prompts

    def test_chat_figures_are_unchanged(self, world, chat):
        figures = world.browser("member").get(f"/deployments/{chat.pk}/charts/?window=1h").json()
        assert [k for k in figures if k != "_meta"] == list(charts.CHARTS)
        assert figures["tokens"]["layout"]["title"]["text"].startswith("Throughput · over ")
        assert [trace["name"] for trace in figures["tokens"]["data"]] == ["prompt", "generation"]
        assert [trace["name"] for trace in figures["itl"]["data"]] == ["p50", "p95"]


class TestApi:
    def test_pooling_series_have_no_generation_series(self, world, embedding):
        body = api(world).get(f"{D}/{embedding.pk}/metrics/?window=1h").json()
        assert len(body["timestamps"]) == 15
        assert not GENERATION & set(body["series"])
        assert {"prompt_tokens_per_s", "e2e_p95", "prefill_p95", "queue_p95", "kv_cache_pct"} <= set(body["series"])

    def test_chat_series_keep_them(self, world, chat):
        body = api(world).get(f"{D}/{chat.pk}/metrics/?window=1h").json()
        assert GENERATION <= set(body["series"])

    def test_pooling_summary_says_what_the_page_does(self, world, embedding, chat):
        pooled = api(world).get(f"{D}/{embedding.pk}/summary/").json()["latest"]
        chatted = api(world).get(f"{D}/{chat.pk}/summary/").json()["latest"]
        assert not GENERATION & set(pooled) and "prompt_tokens_per_s" in pooled and "last_24h" in pooled
        assert GENERATION <= set(chatted)
        assert set(chatted) - set(pooled) == GENERATION


T0 = 1_800_000_000.0


def minutes(count: int, every: float = 1.0, **values: float) -> list[MetricPoint]:
    return [MetricPoint(timestamp=T0 + i * every * 60, interval_s=every * 60, **values) for i in range(count)]


def advised(points, *, generates: bool, now: float, **objectives):
    return advise(
        points,
        objectives=Objectives(**objectives),
        quota_headroom_gpus=8,
        gpus_per_replica=1,
        now=now,
        generates=generates,
    )


class TestAdvice:
    def test_slow_first_tokens_are_no_advice_for_pooling(self):
        points = minutes(6, ttft_p95=3.0)  # above the 2 s objective the whole window
        assert [a.code for a in advised(points, generates=True, now=T0 + 300)] == ["slow_first_token"]
        assert advised(points, generates=False, now=T0 + 300) == []

    def test_a_queue_still_asks_for_replicas(self):
        text = shared_path("fixtures", "metrics", "vllm-0.32-cpu-openai-server-under-load.prom").read_text()
        prev, points = None, []
        for i in range(2):
            cur = parse_exposition(text, timestamp=T0 + 30 * i)
            points.append(derive(prev, cur))
            prev = cur
        assert [a.code for a in advised(points, generates=False, now=T0 + 30)] == ["scale_out"]

    def test_prompts_keep_a_pooling_deployment_from_idle(self):
        # A pooling request runs for one engine step: the scrapes see nothing running or waiting
        # and no token generated, while the prompt tokens show the work.
        busy = minutes(19, every=10, running=0.0, waiting=0.0, generation_tokens_per_s=0.0, prompt_tokens_per_s=40.0)
        assert advised(busy, generates=False, now=T0 + 180 * 60) == []
        assert [a.code for a in advised(busy, generates=True, now=T0 + 180 * 60)] == ["idle"]

    def test_idle_pooling_advice_talks_of_requests_not_tokens(self):
        idle = minutes(19, every=10, running=0.0, waiting=0.0, generation_tokens_per_s=0.0, prompt_tokens_per_s=0.0)
        (advice,) = advised(idle, generates=False, now=T0 + 180 * 60)
        assert advice.code == "idle" and advice.evidence["series"] == "prompt_tokens_per_s"
        assert "generated" not in advice.message and "No request ran for 3.0 h" in advice.message

    def test_a_stored_pooling_deployment_gets_no_generation_advice(self, world, embedding, chat):
        now = datetime.now(UTC)
        for dep in (embedding, chat):
            MetricSample.objects.filter(deployment=dep).delete()
            MetricSample.objects.bulk_create(
                [
                    MetricSample(deployment=dep, ts=now - timedelta(seconds=15 * i), interval_s=15.0, ttft_p95=3.0)
                    for i in range(20)
                ]
            )
        assert [a.code for a in advice_for(chat)] == ["slow_first_token"]
        assert advice_for(embedding) == []
        assert api(world).get(f"{D}/{embedding.pk}/advice/").json() == []
