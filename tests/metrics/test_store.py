"""metrics.store: where a window's axis starts, and the peaks a rollup keeps beside the mean."""

from datetime import UTC, datetime, timedelta

import pytest

from metrics.charts import dashboard
from metrics.models import MetricSample, Resolution
from metrics.store import downsample, series
from tests.support.factories import draft


@pytest.fixture
def serving(world):
    from deployments import services

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )
    dep.refresh_from_db()
    return dep


def raw(dep, ts, **values):
    return MetricSample(deployment=dep, resolution=Resolution.RAW, ts=ts, **values)


class TestWindowStart:
    """The chart's axis starts at a new deployment's first point, not an empty window before it."""

    def test_a_deployment_younger_than_the_window_starts_at_its_first_point(self, serving):
        now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
        first = now - timedelta(minutes=12)
        MetricSample.objects.bulk_create(
            [raw(serving, first + timedelta(seconds=15 * i), running=1.0) for i in range(48)]
        )
        for window in ("1h", "6h", "24h", "7d"):
            data = series(serving, window, now=now)
            assert data["start"] == data["timestamps"][0] >= first - timedelta(minutes=10), window
            assert data["end"] == now

    def test_an_older_deployment_keeps_the_whole_window_across_a_gap(self, serving):
        now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
        MetricSample.objects.bulk_create(
            [
                raw(serving, now - timedelta(hours=3), running=1.0),
                raw(serving, now - timedelta(minutes=12), running=1.0),
            ]
        )
        assert series(serving, "1h", now=now)["start"] == now - timedelta(hours=1)


class TestPeaks:
    """Requests running and KV-cache use are gauges: a rollup keeps the highest sample beside the mean."""

    def test_a_burst_in_one_sample_survives_the_rollup_as_its_peak(self, serving):
        now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
        start = now - timedelta(minutes=1)
        running, kv = [0.0, 12.0, 0.0, 0.0], [5.0, 90.0, 5.0, 5.0]
        MetricSample.objects.bulk_create(
            [
                raw(serving, start + timedelta(seconds=15 * i), interval_s=15.0, running=r, kv_cache_pct=k)
                for i, (r, k) in enumerate(zip(running, kv, strict=True))
            ]
        )
        hour = series(serving, "1h", now=now)["series"]  # raw points: each is its own peak
        assert hour["running"] == running and hour["running_peak"] == [None] * 4
        day = series(serving, "24h", now=now)["series"]  # combined on the fly
        assert (day["running"], day["running_peak"], day["kv_cache_pct_peak"]) == ([3.0], [12.0], [90.0])
        downsample(now=now + timedelta(minutes=20))
        week = series(serving, "7d", now=now)["series"]  # stored rollups of rollups keep the peak
        assert (week["running_peak"], week["kv_cache_pct_peak"]) == ([12.0], [90.0])
        figures = dashboard([start], day)
        assert [t.name for t in figures["queue"].data] == ["running", "running, peak", "waiting"]
        assert [t.name for t in figures["kv_cache"].data] == ["KV cache", "KV cache, peak"]
