"""metrics.advisor on points derived from the real expositions, plus edge cases."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from metrics.advisor import Advice, Objectives, Severity, advise
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


def run(points, *, now: float | datetime, headroom: int | None = 8, per_replica: int = 2, **objectives):
    return advise(
        points,
        objectives=Objectives(**objectives),
        quota_headroom_gpus=headroom,
        gpus_per_replica=per_replica,
        now=now,
    )


def synthetic(minutes: list[float], **values: float | None) -> list[MetricPoint]:
    """One point a minute (or as given), each covering the minute before it."""
    return [MetricPoint(timestamp=T0 + m * 60, interval_s=60.0, **values) for m in minutes]


class TestOnTheRealCaptures:
    def test_saturated_engine_gets_scale_out_advice(self) -> None:
        points = plateau("vllm-0.32-cpu-openai-server-under-load.prom")
        (advice,) = run(points, now=T0 + 30, headroom=5, per_replica=2)
        assert advice.code == "scale_out"
        assert advice.severity == Severity.WARNING
        assert "room for 2 more replica(s)" in advice.message  # 5 free GPUs // 2 per replica
        ev = advice.evidence
        assert (ev["series"], ev["observed"], ev["threshold"]) == ("waiting", 30.0, 2.0)
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

    def test_one_scrape_is_not_enough_to_judge(self) -> None:
        points = plateau("vllm-0.32-cpu-openai-server-under-load.prom", scrapes=1)
        assert run(points, now=T0) == []

    def test_a_short_full_kv_burst_with_a_queue_gives_one_piece_of_advice_after_it(self) -> None:
        points = series_points()
        burst = [p for p in points if (p.waiting or 0) > 0]
        assert [p.kv_cache_pct for p in burst] == [100.0, 100.0] and len(points) == 15  # 2 of 15 scrapes
        now = points[-1].timestamp  # eleven idle scrapes after the burst
        (advice,) = run(points, now=now)
        assert advice.code == "scale_out" and advice.chart == "queue"
        ev = advice.evidence
        assert ev["observed"] == 18.0 and ev["kv_cache_pct_peak"] == 100.0
        # Two 2-s intervals in breach out of the 28 s observed.
        assert ev["breach_s"] == pytest.approx(4.0, abs=0.01)
        assert ev["breach_share_pct"] == pytest.approx(14.3, abs=0.1)
        assert ev["breaches"] == [["2026-11-30T01:57:49.351000Z", "2026-11-30T01:57:53.352000Z"]]
        # The slow first tokens (p95 2.4 s) are those queued requests: no second piece of advice.
        assert max(p.ttft_p95 or 0 for p in points) == pytest.approx(2.425)

    def test_the_same_burst_in_a_quiet_quarter_of_an_hour_is_noise(self) -> None:
        points = series_points()
        end = points[-1].timestamp
        quiet = [MetricPoint(timestamp=end + 60 * m, interval_s=60.0, waiting=0.0, running=0.0) for m in range(1, 14)]
        assert run(points + quiet, now=quiet[-1].timestamp) == []  # 4 s of ~14 min


class TestRules:
    def test_a_queue_for_a_share_of_the_window_advises_scale_out(self) -> None:
        points = synthetic(range(15), running=4.0, waiting=0.0)
        points[7] = replace(points[7], waiting=9.0)  # one minute of fifteen: under 10 %
        assert run(points, now=T0 + 14 * 60) == []
        points[8] = replace(points[8], waiting=9.0)  # two of fifteen: 13 %
        (advice,) = run(points, now=T0 + 14 * 60)
        assert advice.code == "scale_out" and advice.evidence["breach_share_pct"] == pytest.approx(13.3, abs=0.1)
        assert run(points, now=T0 + 14 * 60, breach_share_pct=20.0) == []  # per deployment

    def test_a_short_queue_is_under_the_absolute_floor(self) -> None:
        points = synthetic(range(5), running=1.0, waiting=1.0)  # 100 % of the batch, but one request
        assert run(points, now=T0 + 240) == []
        assert [a.code for a in run(points, now=T0 + 240, waiting_floor=1.0)] == ["scale_out"]

    def test_a_queue_small_against_the_batch_fails_the_relative_test(self) -> None:
        points = synthetic(range(5), running=64.0, waiting=3.0)  # above the floor, 5 % of the batch
        assert run(points, now=T0 + 240) == []

    def test_only_the_window_counts(self) -> None:
        points = synthetic([0, 1, 2], waiting=20.0, running=4.0) + synthetic(range(20, 36), waiting=0.0, running=4.0)
        assert run(points, now=T0 + 35 * 60) == []

    def test_stale_points_give_no_advice(self) -> None:
        points = synthetic([0, 1, 2], waiting=20.0, running=4.0)
        assert run(points, now=T0 + 24 * 3600) == []

    def test_full_kv_cache_with_preemptions_and_no_queue(self) -> None:
        points = synthetic(
            [0, 1, 2, 3], kv_cache_pct=96.0, waiting=1.0, running=8.0, preemptions_per_s=2.5, requests_finished=60.0
        )
        (advice,) = run(points, now=T0 + 180)
        assert advice.code == "kv_cache_pressure" and advice.chart == "kv_cache"
        assert "preempted 2.50 requests/s" in advice.message
        assert advice.evidence["observed"] == 96.0 and advice.evidence["threshold"] == 90.0
        assert run(points, now=T0 + 180, kv_cache_floor_pct=97.0) == []  # per deployment

    def test_a_full_cache_that_preempts_nothing_is_well_used(self) -> None:
        points = synthetic([0, 1, 2, 3], kv_cache_pct=99.0, waiting=0.0, running=8.0, preemptions_per_s=0.0)
        assert run(points, now=T0 + 180) == []

    def test_full_kv_cache_with_a_queue_is_a_scale_out_only(self) -> None:
        points = synthetic([0, 1, 2, 3], kv_cache_pct=96.0, waiting=30.0, running=4.0, preemptions_per_s=3.0)
        assert [a.code for a in run(points, now=T0 + 180)] == ["scale_out"]

    def test_a_fast_deployment_never_hears_it_is_slow(self) -> None:
        # p95 0.04 s is 3× its 0.013 s median, for a third of the time: fast all the same.
        points = synthetic(range(6), ttft_p95=0.013)
        points[4] = replace(points[4], ttft_p95=0.04)
        points[5] = replace(points[5], ttft_p95=0.04)
        assert run(points, now=T0 + 5 * 60) == []

    def test_slower_than_the_objective_is_slow(self) -> None:
        points = synthetic(range(6), ttft_p95=1.5)
        assert run(points, now=T0 + 5 * 60) == []  # default objective: 2 s
        (advice,) = run(points, now=T0 + 5 * 60, ttft_p95_objective_s=1.0)  # this deployment's objective
        assert advice.code == "slow_first_token" and advice.chart == "ttft"
        assert advice.evidence["threshold"] == 1.0 and advice.evidence["breach_share_pct"] == 100.0

    def test_a_spike_above_the_floor_against_the_median(self) -> None:
        points = synthetic(range(6), ttft_p95=0.2)
        points[5] = replace(points[5], ttft_p95=0.9)  # 4.5× the median, above the 0.5 s floor
        (advice,) = run(points, now=T0 + 5 * 60)
        assert advice.code == "slow_first_token"
        assert advice.evidence["observed"] == 0.9 and advice.evidence["median"] == 0.2

    def test_intervals_without_requests_neither_help_nor_hurt(self) -> None:
        points = synthetic(range(10), ttft_p95=None) + synthetic([10, 11], ttft_p95=3.0)
        (advice,) = run(points, now=T0 + 11 * 60)
        assert advice.evidence["breach_share_pct"] == 100.0 and advice.evidence["points"] == 2

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

    def test_stored_rows_with_datetimes_are_accepted(self) -> None:
        rows = [
            SimpleNamespace(ts=datetime.fromtimestamp(T0 + m * 60, UTC), interval_s=60.0, waiting=10.0, running=4.0)
            for m in range(3)
        ]
        advice = advise(rows, quota_headroom_gpus=4, gpus_per_replica=4, now=datetime.fromtimestamp(T0 + 120, UTC))
        assert [a.code for a in advice] == ["scale_out"]
        assert isinstance(advice[0], Advice)

    def test_most_severe_first(self) -> None:
        points = synthetic([0, 1, 2], waiting=10.0, running=4.0)
        points += synthetic([3, 4, 5], waiting=0.0, running=4.0, ttft_p95=5.0)
        advice = run(points, now=T0 + 300, headroom=0)
        assert [a.code for a in advice] == ["scale_out", "slow_first_token"]
        assert advice[0].severity == Severity.CRITICAL

    def test_evidence_is_json(self) -> None:
        points = synthetic([0, 1, 2], waiting=10.0, running=4.0, kv_cache_pct=50.0)
        (advice,) = run(points, now=T0 + 120)
        json.dumps(advice.evidence)


class TestQueueTime:
    """Where vLLM reports how long requests waited (vllm:request_queue_time_seconds, p95 per point),
    the advisor judges the queue by that instead of guessing from the waiting count."""

    def test_a_queue_that_drains_fast_needs_no_replica(self) -> None:
        points = synthetic(range(5), running=4.0, waiting=9.0)
        assert [a.code for a in run(points, now=T0 + 240)] == ["scale_out"]  # the count alone: a queue
        fast = [replace(p, queue_p95=0.1) for p in points]  # but no request waited more than 0.1 s
        assert run(fast, now=T0 + 240) == []
        slow = [replace(p, queue_p95=0.8) for p in points]  # above the 0.5 s floor: the queue counts
        (advice,) = run(slow, now=T0 + 240)
        assert advice.code == "scale_out" and advice.evidence["queue_p95_peak"] == 0.8
        assert "They waited up to 0.80 s (p95) before their prefill began." in advice.message

    def test_waits_longer_than_the_first_token_objective_count_though_no_scrape_saw_them(self) -> None:
        # Bursts between scrapes: nothing waiting at any scrape, requests waited 3 s all the same.
        points = synthetic(range(5), running=2.0, waiting=0.0, queue_p95=3.0, ttft_p95=3.4)
        (advice,) = run(points, now=T0 + 240)
        assert advice.code == "scale_out" and advice.chart == "queue"
        assert "no scrape caught them waiting" in advice.message
        assert advice.evidence["queue_p95_peak"] == 3.0 and advice.evidence["breach_share_pct"] == 100.0

    def test_a_slow_first_token_is_blamed_on_what_took_the_time(self) -> None:
        prefill = synthetic(range(5), running=2.0, waiting=0.0, ttft_p95=3.0, queue_p95=0.2)
        assert [a.code for a in run(prefill, now=T0 + 240)] == ["slow_first_token"]  # 0.2 of 3 s waiting
        waited = [replace(p, queue_p95=1.8) for p in prefill]  # 1.8 of 3 s in the queue
        assert [a.code for a in run(waited, now=T0 + 240)] == ["scale_out"]

    def test_the_real_burst_is_judged_by_its_queue_time(self) -> None:
        points = series_points()
        assert [round(p.queue_p95, 2) for p in points[1:4]] == [0.71, 1.49, 1.48]  # waits of the burst
        (advice,) = run(points, now=points[-1].timestamp)
        assert advice.code == "scale_out" and advice.evidence["queue_p95_peak"] == pytest.approx(1.492, abs=1e-3)
        # The third interval's slow first tokens (p95 2.4 s, 1.5 s of it waiting) report the
        # queue the scrape before saw: the same queue, not a second one and not slow prefill.
        assert advice.evidence["breach_s"] == pytest.approx(4.0, abs=0.01)
