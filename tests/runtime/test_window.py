"""runtime.exposition.window: the rate window's rule, and the direct path's points over it, from the
real vLLM series (../shared/fixtures/metrics/series-vllm-0.32-cpu: a burst of 60 requests over its
first three intervals, then eleven idle scrapes), replayed at the portal's cycle."""

from __future__ import annotations

import json

import pytest

from runtime.exposition.derive import Interval, MetricPoint, combined, interval, point
from runtime.exposition.parse import parse_exposition
from runtime.exposition.snapshot import Snapshot
from runtime.exposition.window import advance, rate_window, within
from tests.support.shared import shared_path

CYCLE = 15.0
T0 = 1_796_003_869.0


def series(every: float = CYCLE, times: list[float] | None = None) -> list[Snapshot]:
    """The real series, one exposition per cycle (or at `times`)."""
    paths = sorted(shared_path("fixtures", "metrics", "series-vllm-0.32-cpu").glob("*.prom"))
    times = times or [T0 + i * every for i in range(len(paths))]
    return [parse_exposition(p.read_text(), timestamp=t) for p, t in zip(paths, times, strict=True)]


def replay(snaps: list[Snapshot], window_s: float) -> tuple[list[MetricPoint], list[list[Interval]]]:
    """What the direct path stores for `snaps`, one cycle each, and the history after each."""
    history: list[Interval] = []
    prev, points, kept = None, [], []
    for snap in snaps:
        point, history = advance(history, prev, snap, window_s=window_s)
        points.append(point)
        kept.append(history)
        prev = snap
    return points, kept


def tokens(points: list[MetricPoint], name: str = "generation_tokens_per_s") -> float:
    """What the usage ledger counts: rate × interval_s summed over the stored points."""
    return sum(getattr(p, name) * p.interval_s for p in points if p.interval_s)


class TestRule:
    @pytest.mark.parametrize(
        "cycle, scrape, window",
        [
            (15, 15, 60),  # the direct path at the default cycle: four of its own scrapes
            (15, 30, 120),  # Prometheus at the prometheus-operator's default interval
            (60, 10, 70),  # a slow cycle: one step plus a scrape, so no scrape falls between windows
            (4, 1, 5),  # tests/metrics/test_prometheus.py's production rule
        ],
    )
    def test_it_is_grafanas_rate_interval(self, cycle, scrape, window):
        assert rate_window(cycle, scrape) == window

    def test_a_zero_interval_is_refused(self):
        with pytest.raises(ValueError, match="positive"):
            rate_window(15, 0)


class TestDirectPathOverTheWindow:
    def test_each_point_rates_over_the_last_window_of_scrapes(self):
        snaps = series()
        window = rate_window(CYCLE, CYCLE)
        points, _ = replay(snaps, window)
        assert points[0].generation_tokens_per_s is None  # gauges only: no interval yet
        for n in range(1, len(snaps)):
            first = snaps[max(0, n - 4)]  # four cycles back, or the first scrape
            grown = snaps[n].counter("generation_tokens_total") - first.counter("generation_tokens_total")
            assert points[n].generation_tokens_per_s == pytest.approx(grown / (snaps[n].timestamp - first.timestamp))
        # The burst's 9,090 generated tokens (in 45 s) read as 9,090 / 60 s once the window is full.
        assert points[4].generation_tokens_per_s == pytest.approx(9090 / 60)
        # Queue time over the window: all 60 requests of the burst, not just the last interval's.
        # Their waits, summed bucket by bucket: 20 within 1 s, 59 within 1.5 s; the 57th lies
        # 37/39 of the way through (1.0, 1.5].
        assert points[4].queue_p95 == pytest.approx(1.0 + 0.5 * 37 / 39)

    def test_an_engine_that_stops_reads_zero_within_one_window(self):
        snaps = series()
        points, _ = replay(snaps, rate_window(CYCLE, CYCLE))
        # The counters stop at the fourth scrape (index 3): the window still reaches the last
        # busy interval three cycles later, and no longer at the fourth (60 s after it).
        assert points[6].generation_tokens_per_s > 0 and points[6].requests_per_s > 0
        for late in points[7:]:
            assert (late.generation_tokens_per_s, late.prompt_tokens_per_s, late.requests_per_s) == (0.0, 0.0, 0.0)
            assert late.ttft_p95 is None and late.queue_p95 is None  # no request finished in the window

    def test_the_history_is_bounded_by_the_window_and_compact(self):
        snaps = series()
        _, kept = replay(snaps, rate_window(CYCLE, CYCLE))
        assert max(len(h) for h in kept) == 4
        busy = json.dumps([part.to_dict() for part in kept[4]])
        idle = json.dumps([part.to_dict() for part in kept[-1]])
        assert len(busy) < 4_000 and len(idle) < 300  # an idle interval keeps its times only
        # Read back from JSON, as the next cycle does, the window gives the very same point: the
        # buckets left out only repeat the count below them.
        restored = [Interval.from_dict(json.loads(json.dumps(part.to_dict()))) for part in kept[4]]
        assert point(combined(restored), snaps[4]) == point(combined(kept[4]), snaps[4])

    def test_a_late_or_early_cycle_keeps_four_intervals_in_the_window(self):
        jittered = [T0 + i * CYCLE + (2.0 if i % 2 else -2.0) for i in range(15)]
        _, kept = replay(series(times=jittered), rate_window(CYCLE, CYCLE))
        assert [len(h) for h in kept[4:]] == [4] * 11

    def test_after_a_gap_longer_than_the_window_the_point_covers_the_gap(self):
        snaps = series()
        prev = [interval(a, b) for a, b in zip(snaps[:2], snaps[1:3], strict=True)]
        text = shared_path("fixtures", "metrics", "series-vllm-0.32-cpu", "03_1796003875.352.prom").read_text()
        late = parse_exposition(text, timestamp=snaps[2].timestamp + 600)
        point, history = advance(prev, snaps[2], late, window_s=60.0)
        assert len(history) == 1 and history[0].seconds == 600.0
        grown = late.counter("generation_tokens_total") - snaps[2].counter("generation_tokens_total")
        assert point.generation_tokens_per_s == pytest.approx(grown / 600) and point.interval_s == 600.0

    def test_only_intervals_mostly_inside_the_window_count(self):
        parts = [Interval(float(s), float(s + 10)) for s in range(0, 100, 10)]
        assert [p.start for p in within(parts, end=100.0, window_s=35.0)] == [60.0, 70.0, 80.0, 90.0]
        assert [p.start for p in within(parts, end=100.0, window_s=5.0)] == [90.0]  # the newest always


class TestUsageIsCountedOnce:
    @pytest.mark.parametrize("window", [CYCLE, 60.0, 120.0])
    def test_tokens_and_ratio_parts_add_up_to_the_counters_growth_whatever_the_window(self, window):
        snaps = series()
        points, _ = replay(snaps, window)
        first, last = snaps[0], snaps[-1]
        for counter, rate in (
            ("generation_tokens_total", "generation_tokens_per_s"),
            ("prompt_tokens_total", "prompt_tokens_per_s"),
        ):
            assert tokens(points, rate) == pytest.approx(last.counter(counter) - first.counter(counter))
        finished = sum(p.requests_finished for p in points if p.requests_finished is not None)
        assert finished == pytest.approx(last.counter("request_success_total") - first.counter("request_success_total"))
        # …while the rates shown differ: one cycle shows the burst's busiest 15 s, a longer
        # window the whole burst (9,090 tokens in 45 s) once it has seen it all.
        assert max(p.generation_tokens_per_s or 0 for p in points) == pytest.approx(
            {CYCLE: 3875 / 15, 60.0: 9090 / 45, 120.0: 9090 / 45}[window]
        )


class TestAdmissionRejections:
    """vllm:admission_rejections_total (vLLM 0.32.0, vllm/v1/metrics/loggers.py) is counted by the
    API server: labels model_name and reason, no engine. Under Ray a counter appears with its first
    increment, so a rejection series new in a snapshot counts from zero when its labels are part of
    a process seen before."""

    REPLICA = (("ReplicaId", "r1"), ("WorkerId", "w1"), ("model_name", "m"))

    def snapshot(self, t: float, generated: float, rejections: dict[tuple, float]) -> Snapshot:
        engine = (*self.REPLICA[:2], ("engine", "0"), self.REPLICA[2])
        return Snapshot(
            timestamp=t,
            counters={"generation_tokens_total": {engine: generated}, "admission_rejections_total": rejections},
        )

    def test_the_first_rejections_of_a_known_replica_count_and_a_strangers_do_not(self):
        full = (*self.REPLICA, ("reason", "max_num_queued_reqs"))
        stranger = (("ReplicaId", "r9"), ("WorkerId", "w9"), ("model_name", "m"), ("reason", "max_num_queued_tokens"))
        prev = self.snapshot(T0, 10.0, {})
        cur = self.snapshot(T0 + 10, 15.0, {full: 3.0, stranger: 7.0})
        point, _ = advance([], prev, cur, window_s=60.0)
        assert point.rejected_queued_reqs_per_s == pytest.approx(0.3)
        assert point.rejected_queued_tokens_per_s == 0.0  # nothing says when r9's count began
