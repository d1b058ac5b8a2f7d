"""Tuning advice from a deployment's recent metric points. Pure: no ORM, no I/O.

Input is any sequence of objects shaped like :class:`runtime.exposition.MetricPoint` (the
stored ``MetricSample`` rows qualify): a ``timestamp`` or ``ts`` (unix seconds or an aware
datetime) and the
optional float fields the rules read. Each rule looks at a recent window, needs the
condition on *every* point in it ("sustained", so one bad scrape never pages anyone), and
returns evidence a user can check against the charts: the series, the window, the observed
value and the threshold.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

__all__ = ["Advice", "MetricPointLike", "Severity", "Thresholds", "advise"]


class Severity(StrEnum):
    """Advice severities, most to least urgent (str values: they go into JSON and CSS)."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class MetricPointLike(Protocol):
    """Has ``timestamp`` or ``ts``, plus whichever of ``waiting``, ``running``,
    ``kv_cache_pct``, ``ttft_p95``, ``generation_tokens_per_s``, ``preemptions_per_s`` it
    knows; a missing or None value keeps a point from counting towards that rule.
    """


@dataclass(frozen=True)
class Thresholds:
    """When each rule fires. Windows are seconds back from ``now``."""

    waiting_requests: float = 5.0  # queue length that means "add capacity" when sustained
    waiting_window_s: float = 300.0
    kv_cache_pct: float = 90.0
    kv_cache_window_s: float = 300.0
    ttft_p95_s: float = 2.0  # absolute: users notice a first token later than this
    ttft_spike_factor: float = 3.0  # relative: p95 this many times its window median
    ttft_window_s: float = 900.0
    ttft_min_points_for_median: int = 3  # a median of two points is no baseline
    idle_window_s: float = 2 * 3600.0
    min_points: int = 2  # fewer points than this in a window: no judgement at all


@dataclass(frozen=True)
class Advice:
    """One recommendation. ``evidence`` is JSON-safe (times as ISO 8601 UTC strings)."""

    code: str  # scale_out | kv_cache_pressure | ttft_spike | idle
    severity: str
    title: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _ts(value: float | datetime) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value)


def _point_ts(point: Any) -> float:
    """MetricPoint calls it ``timestamp``; the MetricSample row calls it ``ts``."""
    value = getattr(point, "timestamp", None)
    return _ts(point.ts if value is None else value)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _get(point: MetricPointLike, name: str) -> float | None:
    value = getattr(point, name, None)
    return None if value is None else float(value)


def _window(
    points: Sequence[tuple[float, MetricPointLike]], now: float, seconds: float, min_points: int
) -> list[tuple[float, MetricPointLike]]:
    """Points of the last ``seconds``; if too few, the last ``min_points`` points.

    The fallback lets a slow scrape interval (or a short history) still be judged, while
    the evidence shows the real span the judgement rests on.
    """
    recent = [(t, p) for t, p in points if now - seconds <= t <= now]
    if len(recent) >= min_points:
        return recent
    if not recent:  # nothing new: stale data must not produce advice
        return []
    past = [(t, p) for t, p in points if t <= now]
    return past[-min_points:] if len(past) >= min_points else []


def _evidence(
    series: str,
    window: Sequence[tuple[float, Any]],
    observed: float,
    threshold: float,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "series": series,
        "window_start": _iso(window[0][0]),
        "window_end": _iso(window[-1][0]),
        "points": len(window),
        "observed": round(observed, 4),
        "threshold": threshold,
        **extra,
    }


def _values(window: Sequence[tuple[float, MetricPointLike]], name: str) -> list[float] | None:
    """The series over the window, or None if any point lacks it (then nothing is sustained)."""
    values: list[float] = []
    for _, point in window:
        value = _get(point, name)
        if value is None:
            return None
        values.append(value)
    return values


def _rule_scale_out(
    pts: Sequence[tuple[float, MetricPointLike]],
    now: float,
    th: Thresholds,
    quota_headroom_gpus: int | None,
    gpus_per_replica: int,
) -> Advice | None:
    window = _window(pts, now, th.waiting_window_s, th.min_points)
    waiting = _values(window, "waiting") if window else None
    if not waiting or min(waiting) <= th.waiting_requests:
        return None
    if quota_headroom_gpus is None:
        room, allowed = "The quota headroom is unknown.", None
    else:
        allowed = max(0, quota_headroom_gpus) // max(1, gpus_per_replica)
        room = (
            f"Your quota has room for {allowed} more replica(s) "
            f"({quota_headroom_gpus} free GPU(s), {gpus_per_replica} per replica)."
            if allowed
            else f"Your quota has no room for another replica ({gpus_per_replica} GPU(s) "
            f"each, {quota_headroom_gpus} free): request a quota increase."
        )
    return Advice(
        code="scale_out",
        severity=Severity.CRITICAL if allowed == 0 else Severity.WARNING,
        title="Requests are queueing: add replicas",
        message=(
            f"At least {min(waiting):g} requests waited at every scrape from "
            f"{_iso(window[0][0])} to {_iso(window[-1][0])} (threshold {th.waiting_requests:g}). "
            f"Raise max_replicas / min_replicas so the load spreads. {room}"
        ),
        evidence=_evidence(
            "waiting",
            window,
            min(waiting),
            th.waiting_requests,
            mean=round(statistics.fmean(waiting), 4),
            replicas_allowed=allowed,
        ),
    )


def _rule_kv_cache(pts: Sequence[tuple[float, MetricPointLike]], now: float, th: Thresholds) -> Advice | None:
    window = _window(pts, now, th.kv_cache_window_s, th.min_points)
    kv = _values(window, "kv_cache_pct") if window else None
    waiting = _values(window, "waiting") if window else None
    # With a long queue the scale-out advice covers it; this rule is for a full cache that
    # is not (yet) turning into a queue.
    if not kv or min(kv) <= th.kv_cache_pct or (waiting and max(waiting) > th.waiting_requests):
        return None
    preempt = [v for _, p in window if (v := _get(p, "preemptions_per_s")) is not None]
    preempt_note = (
        f" The engine preempted {statistics.fmean(preempt):.2f} requests/s on average, recomputing their prefixes."
        if preempt and max(preempt) > 0
        else ""
    )
    return Advice(
        code="kv_cache_pressure",
        severity=Severity.WARNING,
        title="KV cache nearly full",
        message=(
            f"KV-cache use stayed above {th.kv_cache_pct:g} % (lowest {min(kv):.1f} %) while "
            f"few requests waited.{preempt_note} Add replicas, give the cache more memory "
            "(gpu_memory_utilization), or tune max_num_batched_tokens / max_num_seqs so "
            "fewer sequences hold cache blocks at once."
        ),
        evidence=_evidence("kv_cache_pct", window, min(kv), th.kv_cache_pct),
    )


def _rule_ttft(pts: Sequence[tuple[float, MetricPointLike]], now: float, th: Thresholds) -> Advice | None:
    window = _window(pts, now, th.ttft_window_s, th.min_points)
    # Intervals without new requests have no quantile; they neither help nor hurt.
    observed = [(t, v) for t, p in window if (v := _get(p, "ttft_p95")) is not None]
    if not observed:
        return None
    peak_t, peak = max(observed, key=lambda tv: tv[1])
    median = statistics.median(v for _, v in observed)
    spike = len(observed) >= th.ttft_min_points_for_median and peak > th.ttft_spike_factor * median
    if peak <= th.ttft_p95_s and not spike:
        return None
    threshold = th.ttft_p95_s if peak > th.ttft_p95_s else th.ttft_spike_factor * median
    return Advice(
        code="ttft_spike",
        severity=Severity.WARNING,
        title="Slow first tokens",
        message=(
            f"Time to first token (p95) reached {peak:.2f} s at {_iso(peak_t)} "
            f"(limit {th.ttft_p95_s:g} s; window median {median:.2f} s). Long prefills are "
            "stalling the batch: lower max_num_batched_tokens so chunked prefill takes "
            "smaller chunks, or separate prefill from decode."
        ),
        evidence=_evidence("ttft_p95", window, peak, round(threshold, 4), median=round(median, 4), at=_iso(peak_t)),
    )


def _is_idle(point: MetricPointLike) -> bool:
    running = _get(point, "running")
    waiting = _get(point, "waiting") or 0.0
    generated = _get(point, "generation_tokens_per_s") or 0.0
    return running == 0.0 and waiting == 0.0 and generated == 0.0


def _rule_idle(pts: Sequence[tuple[float, MetricPointLike]], now: float, th: Thresholds) -> Advice | None:
    # The run of idle points that ends at the newest point: its span is how long it has
    # been idle, independent of the scrape interval.
    past = [(t, p) for t, p in pts if t <= now]
    run: list[tuple[float, MetricPointLike]] = []
    for t, p in reversed(past):
        if not _is_idle(p):
            break
        run.insert(0, (t, p))
    if len(run) < th.min_points:
        return None
    span = run[-1][0] - run[0][0]
    if span < th.idle_window_s:
        return None
    return Advice(
        code="idle",
        severity=Severity.INFO,
        title="Idle: stop it to free the quota",
        message=(
            f"No request ran and no token was generated for {span / 3600:.1f} h. "
            "Stopping the deployment returns its GPUs to your quota; start it again when needed."
        ),
        evidence=_evidence("generation_tokens_per_s", run, 0.0, th.idle_window_s, idle_s=span),
    )


def advise(
    points: Sequence[MetricPointLike],
    *,
    thresholds: Thresholds | None = None,
    quota_headroom_gpus: int | None,
    gpus_per_replica: int,
    now: float | datetime,
) -> list[Advice]:
    """Every rule that fires on ``points``, most severe first.

    ``quota_headroom_gpus`` is what the tenant's quota still allows in this deployment's
    flavor (None when unknown); the scale-out advice turns it into whole replicas.
    """
    th = thresholds or Thresholds()
    now_ts = _ts(now)
    pts = sorted(((_point_ts(p), p) for p in points), key=lambda tp: tp[0])
    rules: list[Callable[[], Advice | None]] = [
        lambda: _rule_scale_out(pts, now_ts, th, quota_headroom_gpus, gpus_per_replica),
        lambda: _rule_kv_cache(pts, now_ts, th),
        lambda: _rule_ttft(pts, now_ts, th),
        lambda: _rule_idle(pts, now_ts, th),
    ]
    order = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
    found = [a for rule in rules if (a := rule()) is not None]
    return sorted(found, key=lambda a: order[a.severity])
