"""The metrics API: a deployment's advisor objectives, and advice that links its evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from metrics.advice import advice_for, objectives_for
from metrics.models import AdvisorObjectives, MetricSample
from tests.support.factories import draft

D = "/api/v1/deployments"


@pytest.fixture
def serving(world):
    from deployments import services

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    type(dep).objects.filter(pk=dep.pk).update(state="ready")
    dep.refresh_from_db()
    return dep


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def slow_but_steady(dep, p95: float) -> None:
    now = datetime.now(UTC)
    MetricSample.objects.bulk_create(
        [
            MetricSample(deployment=dep, ts=now - timedelta(seconds=15 * i), interval_s=15.0, ttft_p95=p95)
            for i in range(20)
        ]
    )


class TestObjectives:
    def test_defaults_until_set_then_the_deployments_own(self, world, serving):
        member = client_for(world.users["member"])
        url = f"{D}/{serving.pk}/objectives/"
        assert member.get(url).json()["ttft_p95_objective_s"] == 2.0
        assert member.patch(url, {"ttft_p95_objective_s": 0.5}, format="json").status_code == 200
        assert AdvisorObjectives.objects.get(deployment=serving).ttft_p95_objective_s == 0.5
        assert objectives_for(serving).ttft_p95_objective_s == 0.5
        assert objectives_for(serving).waiting_floor == 2.0  # the rest keep their defaults

    def test_the_objective_decides_whether_the_same_latency_is_slow(self, world, serving):
        slow_but_steady(serving, 1.2)
        assert advice_for(serving) == []  # 1.2 s against the default 2 s objective
        client_for(world.users["member"]).patch(
            f"{D}/{serving.pk}/objectives/", {"ttft_p95_objective_s": 1.0}, format="json"
        )
        (advice,) = client_for(world.users["viewer"]).get(f"{D}/{serving.pk}/advice/").json()
        assert advice["code"] == "slow_first_token" and advice["evidence"]["threshold"] == 1.0
        assert advice["chart_url"] == f"/deployments/{serving.pk}/?window=1h#chart-ttft"
        assert advice["data_url"] == f"{D}/{serving.pk}/metrics/?window=1h"

    @pytest.mark.parametrize(
        "body, field",
        [
            ({"ttft_p95_objective_s": 0}, "ttft_p95_objective_s"),
            ({"ttft_p95_objective_s": "NaN"}, "ttft_p95_objective_s"),
            ({"ttft_p95_objective_s": "Infinity"}, "ttft_p95_objective_s"),
            ({"kv_cache_floor_pct": 101}, "kv_cache_floor_pct"),
            ({"breach_share_pct": "lots"}, "breach_share_pct"),
            ({"waiting_floor": -1}, "waiting_floor"),
            ({"waiting_floor": [1]}, "waiting_floor"),
        ],
    )
    def test_bad_values_are_field_errors_and_nothing_is_written(self, world, serving, body, field):
        response = client_for(world.users["member"]).patch(f"{D}/{serving.pk}/objectives/", body, format="json")
        assert response.status_code == 400 and field in response.json()
        assert not AdvisorObjectives.objects.filter(deployment=serving).exists()

    def test_a_viewer_may_read_but_not_change_them(self, world, serving):
        viewer = client_for(world.users["viewer"])
        url = f"{D}/{serving.pk}/objectives/"
        assert viewer.get(url).status_code == 200
        assert viewer.patch(url, {"ttft_p95_objective_s": 9}, format="json").status_code == 403
        assert not AdvisorObjectives.objects.filter(deployment=serving).exists()


class TestSummary:
    def test_latest_point_and_the_days_ratios(self, world, serving):
        now = datetime.now(UTC)
        MetricSample.objects.bulk_create(
            [
                MetricSample(
                    deployment=serving, ts=now - timedelta(seconds=30), prefix_cache_hits=1, prefix_cache_queries=1
                ),
                MetricSample(
                    deployment=serving, ts=now - timedelta(seconds=15), prefix_cache_hits=0, prefix_cache_queries=9
                ),
            ]
        )
        body = client_for(world.users["viewer"]).get(f"{D}/{serving.pk}/summary/").json()
        assert body["latest"]["prefix_cache_hit_pct"] == 0.0
        assert body["latest"]["last_24h"]["prefix_cache_hit_pct"] == pytest.approx(10.0)  # 1 of 10, not 50 %


class TestChartsEndpoint:
    """The detail page's chart data: figures only when there is something to plot."""

    def test_no_samples_sends_only_the_count(self, world, serving):
        response = world.browser("member").get(f"/deployments/{serving.pk}/charts/?window=1h")
        assert response.status_code == 200
        assert response.json() == {"_meta": {"points": 0, "resolution_s": response.json()["_meta"]["resolution_s"]}}
        assert len(response.content) < 200  # not ~64 KB of empty figures

    def test_one_sample_sends_every_figure(self, world, serving):
        MetricSample.objects.create(
            deployment=serving, ts=datetime.now(UTC) - timedelta(seconds=5), waiting=1.0, running=2.0
        )
        body = world.browser("member").get(f"/deployments/{serving.pk}/charts/?window=1h").json()
        assert body["_meta"]["points"] == 1
        assert {"queue", "kv_cache"} <= set(body) and body["queue"]["data"]


class TestDashboardFigures:
    def test_each_chart_says_the_window_the_settings_give(self, world, serving, settings, client):
        slow_but_steady(serving, 0.4)
        client.force_login(world.users["member"])
        url = f"/deployments/{serving.pk}/charts/?window=1h"
        settings.METRICS_SCRAPE_SECONDS = 15  # the direct path: four of its own cycles
        figures = client.get(url).json()
        assert figures["tokens"]["layout"]["title"]["text"] == "Throughput · over 60 s"
        assert figures["queue_time"]["layout"]["title"]["text"] == "Queue time · over 60 s"
        assert figures["queue"]["layout"]["title"]["text"] == "Running vs waiting requests · at each scrape"
        settings.PROMETHEUS_URL = "http://prometheus.example:9090"  # scraping the engines every 30 s
        settings.PROMETHEUS_SCRAPE_INTERVAL_SECONDS = 30.0
        assert client.get(url).json()["ttft"]["layout"]["title"]["text"] == "Time to first token · over 2 min"
        # A week's points are 10-minute rollups: each covers its bucket, longer than the window.
        week = client.get(f"/deployments/{serving.pk}/charts/?window=7d").json()
        assert week["tokens"]["layout"]["title"]["text"] == "Throughput · over 10 min"
