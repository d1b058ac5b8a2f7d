"""metrics.advisor on points derived from the real expositions, plus edge cases."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from metrics.advisor import Advice, Severity, Thresholds, advise
from runtime.exposition.derive import MetricPoint, derive
from runtime.exposition.parse import parse_exposition
from tests.support.shared import shared_path

T0 = 1_796_003_900.0


def fixture(name: str) -> str:
    return shared_path("fixtures", "metrics", name).read_text()


def plateau(name: str, *, scrapes: int = 2, every: float = 30.0) -> list[MetricPoint]:
    """The same real capture scraped repeatedly: an engine holding that state."""
    text = fixture(name)
    prev, points = None, []
    for i in range(scrapes):
        cur = parse_exposition(text, timestamp=T0 + i * every)
        points.append(derive(prev, cur))
        prev = cur
    return points


def series_points() -> list[MetricPoint]:
    folder = shared_path("fixtures", "metrics", "series-vllm-0.32-cpu")
    prev, points = None, []
    for path in sorted(folder.glob("*.prom")):
        cur = parse_exposition(path.read_text(), timestamp=float(path.stem.split("_", 1)[1]))
        points.append(derive(prev, cur))
        prev = cur
    return points


def run(points, *, now: float | datetime, headroom: int | None = 8, per_replica: int = 2, **th):
    return advise(
        points,
        thresholds=Thresholds(**th),
        quota_headroom_gpus=headroom,
        gpus_per_replica=per_replica,
        now=now,
    )


def synthetic(minutes: list[float], **values: float | None) -> list[MetricPoint]:
    return [MetricPoint(timestamp=T0 + m * 60, **values) for m in minutes]


class TestOnTheRealCaptures:
    def test_saturated_engine_gets_scale_out_advice(self) -> None:
        points = plateau("vllm-0.32-cpu-openai-server-under-load.prom")
        (advice,) = run(points, now=T0 + 30, headroom=5, per_replica=2)
        assert advice.code == "scale_out"
        assert advice.severity == Severity.WARNING
        assert "room for 2 more replica(s)" in advice.message  # 5 free GPUs // 2 per replica
        ev = advice.evidence
        assert (ev["series"], ev["observed"], ev["threshold"]) == ("waiting", 30.0, 5.0)
        assert ev["replicas_allowed"] == 2 and ev["points"] == 2
        assert ev["window_start"] == "2026-11-30T01:58:20Z"
        assert ev["window_end"] == "2026-11-30T01:58:50Z"
        json.dumps(ev)  # stored as JSON

    def test_saturated_engine_without_quota_room_is_critical(self) -> None:
        points = plateau("vllm-0.32-cpu-openai-server-under-load.prom")
        (advice,) = run(points, now=T0 + 30, headroom=1, per_replica=2)
        assert advice.severity == Severity.CRITICAL
        assert "request a quota increase" in advice.message
        assert advice.evidence["replicas_allowed"] == 0

    def test_unknown_headroom_is_said_so(self) -> None:
        points = plateau("vllm-0.32-cpu-openai-server-under-load.prom")
        (advice,) = run(points, now=T0 + 30, headroom=None)
        assert "headroom is unknown" in advice.message

    def test_idle_engine_gets_no_advice(self) -> None:
        points = plateau("vllm-0.32-cpu-openai-server-after-load.prom")
        assert run(points, now=T0 + 30) == []

    def test_one_scrape_is_not_sustained(self) -> None:
        points = plateau("vllm-0.32-cpu-openai-server-under-load.prom", scrapes=1)
        assert run(points, now=T0) == []

    def test_burst_series_flags_slow_first_tokens_but_no_queue(self) -> None:
        points = series_points()
        now = points[-1].timestamp
        advice = run(points, now=now)
        assert [a.code for a in advice] == ["ttft_spike"]
        ev = advice[0].evidence
        # 01→02: all 24 new first tokens in (1.0, 2.5] s → p95 = 2.425 s > 2 s.
        assert ev["observed"] == pytest.approx(2.425)
        assert ev["threshold"] == 2.0
        assert ev["at"] == "2026-11-30T01:57:53.352000Z"
        # The queue (17, 18 waiting) lasted two scrapes of fifteen: not sustained.
        assert max(p.waiting for p in points) == 18.0


class TestRules:
    def test_queue_must_hold_at_every_point_of_the_window(self) -> None:
        points = synthetic([0, 1, 2, 3, 4], running=4.0, waiting=9.0)
        assert [a.code for a in run(points, now=T0 + 240)] == ["scale_out"]
        dip = points[:2] + [replace(points[2], waiting=2.0)] + points[3:]
        assert run(dip, now=T0 + 240) == []

    def test_only_the_window_counts(self) -> None:
        # Queue long ago, quiet for the last five minutes.
        points = synthetic([0, 1, 2], waiting=20.0, running=4.0) + synthetic(
            [10, 11, 12, 13, 14, 15], waiting=0.0, running=4.0
        )
        assert run(points, now=T0 + 15 * 60) == []

    def test_stale_points_give_no_advice(self) -> None:
        points = synthetic([0, 1, 2], waiting=20.0, running=4.0)
        assert run(points, now=T0 + 24 * 3600) == []

    def test_sparse_scrapes_fall_back_to_the_last_points(self) -> None:
        # Scraped every 10 min: the 5-min window holds one point, so the last two are used.
        points = synthetic([0, 10, 20], waiting=12.0, running=4.0)
        (advice,) = run(points, now=T0 + 20 * 60)
        assert advice.code == "scale_out" and advice.evidence["points"] == 2

    def test_full_kv_cache_without_a_queue(self) -> None:
        points = synthetic([0, 1, 2, 3], kv_cache_pct=96.0, waiting=1.0, running=8.0, preemptions_per_s=2.5)
        (advice,) = run(points, now=T0 + 180)
        assert advice.code == "kv_cache_pressure"
        assert "max_num_batched_tokens" in advice.message and "replicas" in advice.message
        assert "preempted 2.50 requests/s" in advice.message
        assert advice.evidence["observed"] == 96.0 and advice.evidence["threshold"] == 90.0

    def test_full_kv_cache_with_a_queue_is_a_scale_out(self) -> None:
        points = synthetic([0, 1, 2, 3], kv_cache_pct=96.0, waiting=30.0, running=4.0)
        assert [a.code for a in run(points, now=T0 + 180)] == ["scale_out"]

    def test_ttft_spike_relative_to_the_window_median(self) -> None:
        points = synthetic([0, 1, 2], ttft_p95=0.2) + synthetic([3], ttft_p95=0.9)
        (advice,) = run(points, now=T0 + 180)
        assert advice.code == "ttft_spike"
        assert advice.evidence["observed"] == 0.9
        assert advice.evidence["median"] == 0.2
        assert advice.evidence["threshold"] == pytest.approx(0.6)

    def test_steady_ttft_is_fine(self) -> None:
        points = synthetic([0, 1, 2, 3], ttft_p95=0.8)
        assert run(points, now=T0 + 180) == []

    def test_idle_for_hours_suggests_stopping(self) -> None:
        minutes = [m * 10 for m in range(19)]  # 3 h, every 10 min
        points = synthetic(minutes, running=0.0, waiting=0.0, generation_tokens_per_s=0.0)
        (advice,) = run(points, now=T0 + 180 * 60)
        assert advice.code == "idle" and advice.severity == Severity.INFO
        assert advice.evidence["idle_s"] == 3 * 3600
        assert "3.0 h" in advice.message

    def test_recent_work_resets_the_idle_clock(self) -> None:
        minutes = [m * 10 for m in range(19)]
        points = synthetic(minutes, running=0.0, waiting=0.0, generation_tokens_per_s=0.0)
        points[12] = replace(points[12], generation_tokens_per_s=50.0)  # 1 h ago
        assert run(points, now=T0 + 180 * 60) == []

    def test_thresholds_are_configurable(self) -> None:
        points = synthetic([0, 1, 2], waiting=3.0, running=4.0)
        assert run(points, now=T0 + 120) == []
        assert [a.code for a in run(points, now=T0 + 120, waiting_requests=2)] == ["scale_out"]

    def test_stored_rows_with_datetimes_are_accepted(self) -> None:
        rows = [
            SimpleNamespace(ts=datetime.fromtimestamp(T0 + m * 60, UTC), waiting=10.0, running=4.0) for m in range(3)
        ]
        advice = advise(
            rows,
            quota_headroom_gpus=4,
            gpus_per_replica=4,
            now=datetime.fromtimestamp(T0 + 120, UTC),
        )
        assert [a.code for a in advice] == ["scale_out"]
        assert isinstance(advice[0], Advice)

    def test_most_severe_first(self) -> None:
        points = synthetic([0, 1, 2], waiting=10.0, running=4.0, ttft_p95=5.0)
        advice = run(points, now=T0 + 120, headroom=0)
        assert [a.code for a in advice] == ["scale_out", "ttft_spike"]
        assert advice[0].severity == Severity.CRITICAL
