"""Rates, ratios and latency quantiles between snapshots: :class:`Interval` holds what happened
between two of them (increments, summed over series); intervals add up, and a run of them (the
rate window, runtime.exposition.window) gives one :class:`MetricPoint`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from runtime.exposition.snapshot import (
    ADMISSION_REASONS,
    HISTOGRAMS,
    WAITING_REASONS,
    SeriesKey,
    Snapshot,
    add_to,
    parse_le,
    series_owner,
)

# vLLM 0.32 finished_reason values: stop, length, abort, error, repetition. stop/length are
# normal ends and repetition is the engine's repetition detector ending a request on purpose;
# everything else (abort = client went away or was cancelled, error, any future reason) is
# counted as a request that did not complete normally.
NORMAL_FINISH_REASONS = frozenset({"stop", "length", "repetition"})


@dataclass(frozen=True)
class MetricPoint:
    """What one scrape interval shows; None where it cannot be known (no prev, no data).

    Rates are per second over ``interval_s``; percentages are 0-100; latency quantiles are
    seconds over the requests observed *during* the interval. Ratios are not stored: their
    numerator and denominator are, as increments over the interval (``prefix_cache_hits`` of
    ``prefix_cache_queries``, ``requests_failed`` of ``requests_finished``), so any sum of
    intervals divides to the right ratio (a mean of ratios would not).
    """

    timestamp: float
    interval_s: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    errors_per_s: float | None = None
    preemptions_per_s: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    requests_finished: float | None = None
    requests_failed: float | None = None
    kv_cache_pct: float | None = None
    running: float | None = None
    waiting: float | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    itl_p50: float | None = None
    itl_p95: float | None = None
    e2e_p50: float | None = None
    e2e_p95: float | None = None
    replicas_running: float | None = None  # Ray Serve: healthy replicas of the engine's deployment
    replicas_target: float | None = None  # Ray Serve: the autoscaler's target for it
    # Each request's phases (vLLM's histograms, observed as requests finish): waiting in the
    # queue, prefill, decode; p50 and p95 over the requests finished in the interval.
    queue_p50: float | None = None
    queue_p95: float | None = None
    prefill_p50: float | None = None
    prefill_p95: float | None = None
    decode_p50: float | None = None
    decode_p95: float | None = None
    # Requests waiting, by why (WAITING_REASONS; they sum to `waiting`).
    waiting_capacity: float | None = None
    waiting_deferred: float | None = None
    # Requests the API server refused before queueing them, per second, by the limit hit
    # (ADMISSION_REASONS: --max-num-queued-reqs, --max-num-queued-tokens).
    rejected_queued_reqs_per_s: float | None = None
    rejected_queued_tokens_per_s: float | None = None

    @property
    def prefix_cache_hit_pct(self) -> float | None:
        """Hits over lookups in the interval, 0-100 (None without a lookup)."""
        return ratio_pct(self.prefix_cache_hits, self.prefix_cache_queries)


SERIES_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MetricPoint) if f.name not in ("timestamp", "interval_s"))


def ratio_pct(numerator: float | None, denominator: float | None) -> float | None:
    """100 × numerator / denominator, None when there is nothing to divide by."""
    if numerator is None or not denominator or denominator <= 0:
        return None
    return 100.0 * numerator / denominator


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Quantile ``q`` of cumulative ``{le: count}`` buckets, as PromQL ``histogram_quantile``.

    Linear interpolation inside the bucket the rank falls in (lower bound 0 for the first
    bucket); a rank in the +Inf bucket gives the highest finite bound. None without
    observations.
    """
    ordered = sorted(buckets.items())
    if not ordered or not math.isinf(ordered[-1][0]):
        return None
    total = ordered[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for i, (le, count) in enumerate(ordered):
        if count >= rank:
            if math.isinf(le):
                return ordered[i - 1][0] if i > 0 else None
            if i == 0 and le <= 0:
                return le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return None


def _series_increase(prev: Snapshot, cur: Snapshot, name: str) -> dict[SeriesKey, float]:
    """Per-series increase of counter ``name`` over the interval, resets handled like Prometheus.

    A lower value than before means the process restarted: the new value is all increase.
    A series missing from ``prev`` counts from zero only when its process was already
    reporting other series (Ray creates a counter on its first increment, and the first
    aborts of a replica must show up); a series of a process never seen before is skipped,
    since nothing says when its counting began.
    """
    before = prev.counters.get(name, {})
    out: dict[SeriesKey, float] = {}
    for key, value in cur.counters.get(name, {}).items():
        if key in before:
            out[key] = value if value < before[key] else value - before[key]
        elif prev.reports(series_owner(key)):
            out[key] = value
    return out


def _counter_increase(prev: Snapshot, cur: Snapshot, name: str) -> float:
    return sum(_series_increase(prev, cur, name).values())


def _bucket_increase(prev: Snapshot, cur: Snapshot, name: str) -> dict[float, float]:
    """Bucket counts observed during the interval, summed over series (rules as for counters)."""
    before = prev.histograms.get(name, {})
    out: dict[float, float] = {}
    for key, hist in cur.histograms.get(name, {}).items():
        old = before.get(key)
        if old is None and not prev.reports(series_owner(key)):
            continue
        old_map = old.bucket_map() if old is not None else {}
        # A smaller count, or a different bucket layout (new vLLM version), is a restart.
        reset = old is not None and (hist.count < old.count or {le for le, _ in hist.buckets} != old_map.keys())
        for le, count in hist.buckets:
            add_to(out, le, count if reset else count - old_map.get(le, 0.0))
    return out


# (MetricPoint prefix, histogram family): p50 and p95 of each, over the requests observed.
QUANTILE_FAMILIES = (
    ("ttft", "time_to_first_token_seconds"),
    ("itl", "inter_token_latency_seconds"),
    ("e2e", "e2e_request_latency_seconds"),
    ("queue", "request_queue_time_seconds"),
    ("prefill", "request_prefill_time_seconds"),
    ("decode", "request_decode_time_seconds"),
)
assert {family for _, family in QUANTILE_FAMILIES} == set(HISTOGRAMS)
# (Interval count, MetricPoint rate field): the counters shown per second.
RATE_COUNTS = (
    ("prompt_tokens", "prompt_tokens_per_s"),
    ("generation_tokens", "generation_tokens_per_s"),
    ("requests_finished", "requests_per_s"),
    ("requests_failed", "errors_per_s"),
    ("preemptions", "preemptions_per_s"),
    ("rejected_max_num_queued_reqs", "rejected_queued_reqs_per_s"),
    ("rejected_max_num_queued_tokens", "rejected_queued_tokens_per_s"),
)
# Interval counts stored as increments (ratio parts): divided at read time (metrics.aggregate).
RATIO_PARTS = ("prefix_cache_hits", "prefix_cache_queries", "requests_finished", "requests_failed")


@dataclass(frozen=True)
class Interval:
    """What one deployment did from `start` to `end` (unix seconds), summed over its series:
    counter increments (`counts`, keys as in :data:`RATE_COUNTS` and :data:`RATIO_PARTS`) and histogram
    bucket increments (`buckets`: family → {le: cumulative increment}). Resets are handled per
    series when an interval is made (:func:`interval`), so intervals simply add up.

    This is all a rate window needs of the snapshots it spans: a few numbers per family instead
    of every series' labels, so a deployment's recent intervals are cheap to keep
    (metrics.models.ScrapeState.history).
    """

    start: float
    end: float
    counts: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe and compact: zero counts and histograms without an observation are left out,
        and so is every bucket inside a run of equal cumulative counts (:func:`_steps`)."""
        return {
            "s": self.start,
            "e": self.end,
            "c": {k: v for k, v in self.counts.items() if v},
            "h": {
                name: [["+Inf" if math.isinf(le) else repr(le), c] for le, c in _steps(b)]
                for name, b in self.buckets.items()
                if max(b.values(), default=0.0) > 0
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        """Inverse of :meth:`to_dict` (an absent count is a zero; buckets stay as stored: a
        missing bucket holds the count of the one below it, which :func:`combined` fills in)."""
        return cls(
            start=float(data["s"]),
            end=float(data["e"]),
            counts={k: float(v) for k, v in data.get("c", {}).items()},
            buckets={n: {parse_le(le): float(c) for le, c in pairs} for n, pairs in data.get("h", {}).items()},
        )


def _steps(buckets: Mapping[float, float]) -> list[tuple[float, float]]:
    """The cumulative buckets that say something: each one where the count changes, and the one
    just below it (the lower bound histogram_quantile interpolates from), plus +Inf. A bucket
    left out holds the count of the one below it, so nothing is lost: the tail of equal counts
    above the slowest observation, most of a histogram, is not stored."""
    ordered = sorted(buckets.items())
    kept = []
    for i, (le, count) in enumerate(ordered):
        before = ordered[i - 1][1] if i else 0.0
        after = ordered[i + 1][1] if i + 1 < len(ordered) else None
        if count != before or after is None or after != count:
            kept.append((le, count))
    return kept


def _filled(buckets: Mapping[float, float], les: Sequence[float]) -> list[float]:
    """Cumulative counts of `buckets` at every bound in `les` (ascending): a bound it lacks holds
    the count of its nearest bound below (0 below the first)."""
    ordered = sorted(buckets.items())
    out, i, last = [], 0, 0.0
    for le in les:
        while i < len(ordered) and ordered[i][0] <= le:
            last = ordered[i][1]
            i += 1
        out.append(last)
    return out


def interval(prev: Snapshot, cur: Snapshot) -> Interval:
    """The increments from `prev` to `cur`, per series first (resets, new series), then summed."""
    finished = _series_increase(prev, cur, "request_success_total")
    failed = sum(v for k, v in finished.items() if dict(k).get("finished_reason") not in NORMAL_FINISH_REASONS)
    rejected = _series_increase(prev, cur, "admission_rejections_total")
    counts = {
        "prompt_tokens": _counter_increase(prev, cur, "prompt_tokens_total"),
        "generation_tokens": _counter_increase(prev, cur, "generation_tokens_total"),
        "preemptions": _counter_increase(prev, cur, "num_preemptions_total"),
        "prefix_cache_hits": _counter_increase(prev, cur, "prefix_cache_hits_total"),
        "prefix_cache_queries": _counter_increase(prev, cur, "prefix_cache_queries_total"),
        "requests_finished": sum(finished.values()),
        "requests_failed": failed,
    }
    for reason in ADMISSION_REASONS:
        counts[f"rejected_{reason}"] = sum(v for k, v in rejected.items() if dict(k).get("reason") == reason)
    buckets = {name: _bucket_increase(prev, cur, name) for name in HISTOGRAMS}
    return Interval(prev.timestamp, cur.timestamp, counts, {n: b for n, b in buckets.items() if b})


def combined(intervals: Sequence[Interval]) -> Interval:
    """One interval from consecutive ones: from the first start to the last end, increments summed
    (bucket by bucket over the union of their bounds, each filled in as :func:`_filled` says)."""
    counts: dict[str, float] = {}
    for part in intervals:
        for name, value in part.counts.items():
            add_to(counts, name, value)
    buckets: dict[str, dict[float, float]] = {}
    for name in {name for part in intervals for name in part.buckets}:
        parts = [part.buckets[name] for part in intervals if name in part.buckets]
        les = sorted({le for b in parts for le in b})
        totals = [sum(column) for column in zip(*(_filled(b, les) for b in parts), strict=True)]
        buckets[name] = dict(zip(les, totals, strict=True))
    return Interval(intervals[0].start, intervals[-1].end, counts, buckets)


def gauges(cur: Snapshot) -> dict[str, float | None]:
    """The gauges of a point: read from `cur` alone.

    ``kv_cache_pct`` is the mean over engines/replicas: each reports its own 0-1 ratio, so
    a sum would exceed 100 % with two replicas.
    """
    kv = cur.gauge_mean("kv_cache_usage_perc")
    replicas_running, replicas_target = cur.serve_replicas()
    out = {
        "kv_cache_pct": None if kv is None else kv * 100.0,
        "running": cur.gauge_sum("num_requests_running"),
        "waiting": cur.gauge_sum("num_requests_waiting"),
        "replicas_running": replicas_running,
        "replicas_target": replicas_target,
    }
    for reason in WAITING_REASONS:
        out[f"waiting_{reason}"] = cur.gauge_by("num_requests_waiting_by_reason", "reason", reason)
    return out


def point(span: Interval | None, cur: Snapshot) -> MetricPoint:
    """The :class:`MetricPoint` at `cur`: gauges from `cur`, rates and quantiles over `span`
    (None, or an empty span: gauges only). Rates are increments over the span's seconds; ratio
    parts stay increments over it (``interval_s``)."""
    if span is None or span.seconds <= 0:
        return MetricPoint(timestamp=cur.timestamp, **gauges(cur))
    dt = span.seconds
    counts = span.counts
    rates = {name: counts.get(count, 0.0) / dt for count, name in RATE_COUNTS}
    parts = {name: counts.get(name, 0.0) for name in RATIO_PARTS}
    quantiles: dict[str, float | None] = {}
    for short, family in QUANTILE_FAMILIES:
        increments = span.buckets.get(family, {})
        quantiles[f"{short}_p50"] = histogram_quantile(0.50, increments)
        quantiles[f"{short}_p95"] = histogram_quantile(0.95, increments)
    return MetricPoint(timestamp=cur.timestamp, interval_s=dt, **rates, **parts, **gauges(cur), **quantiles)


def derive(prev: Snapshot | None, cur: Snapshot) -> MetricPoint:
    """One :class:`MetricPoint` for the interval ``prev → cur`` (gauges from ``cur`` alone)."""
    if prev is None or cur.timestamp <= prev.timestamp:
        return point(None, cur)
    return point(interval(prev, cur), cur)
