"""Rates, ratios and latency quantiles between two snapshots: one :class:`MetricPoint`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from runtime.exposition.snapshot import SeriesKey, Snapshot, add_to, series_owner

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
        elif series_owner(key) in prev.owners:
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
        if old is None and series_owner(key) not in prev.owners:
            continue
        old_map = old.bucket_map() if old is not None else {}
        # A smaller count, or a different bucket layout (new vLLM version), is a restart.
        reset = old is not None and (hist.count < old.count or {le for le, _ in hist.buckets} != old_map.keys())
        for le, count in hist.buckets:
            add_to(out, le, count if reset else count - old_map.get(le, 0.0))
    return out


def derive(prev: Snapshot | None, cur: Snapshot) -> MetricPoint:
    """One :class:`MetricPoint` for the interval ``prev → cur`` (gauges from ``cur`` alone).

    ``kv_cache_pct`` is the mean over engines/replicas: each reports its own 0-1 ratio, so
    a sum would exceed 100 % with two replicas.
    """
    kv = cur.gauge_mean("kv_cache_usage_perc")
    replicas_running, replicas_target = cur.serve_replicas()
    gauges = {
        "kv_cache_pct": None if kv is None else kv * 100.0,
        "running": cur.gauge_sum("num_requests_running"),
        "waiting": cur.gauge_sum("num_requests_waiting"),
        "replicas_running": replicas_running,
        "replicas_target": replicas_target,
    }
    dt = None if prev is None else cur.timestamp - prev.timestamp
    if prev is None or dt is None or dt <= 0:
        return MetricPoint(timestamp=cur.timestamp, **gauges)

    finished = _series_increase(prev, cur, "request_success_total")
    errors = sum(v for k, v in finished.items() if dict(k).get("finished_reason") not in NORMAL_FINISH_REASONS)
    queries = _counter_increase(prev, cur, "prefix_cache_queries_total")
    hits = _counter_increase(prev, cur, "prefix_cache_hits_total")

    quantiles: dict[str, float | None] = {}
    for short, name in (
        ("ttft", "time_to_first_token_seconds"),
        ("itl", "inter_token_latency_seconds"),
        ("e2e", "e2e_request_latency_seconds"),
    ):
        delta = _bucket_increase(prev, cur, name)
        quantiles[f"{short}_p50"] = histogram_quantile(0.50, delta)
        quantiles[f"{short}_p95"] = histogram_quantile(0.95, delta)

    return MetricPoint(
        timestamp=cur.timestamp,
        interval_s=dt,
        prompt_tokens_per_s=_counter_increase(prev, cur, "prompt_tokens_total") / dt,
        generation_tokens_per_s=_counter_increase(prev, cur, "generation_tokens_total") / dt,
        requests_per_s=sum(finished.values()) / dt,
        errors_per_s=errors / dt,
        preemptions_per_s=_counter_increase(prev, cur, "num_preemptions_total") / dt,
        prefix_cache_hits=hits,
        prefix_cache_queries=queries,
        requests_finished=sum(finished.values()),
        requests_failed=errors,
        **gauges,
        **quantiles,
    )
