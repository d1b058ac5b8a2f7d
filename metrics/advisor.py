"""Tuning advice from a deployment's recent metric points. Pure: no ORM, no I/O.

Input is any sequence of objects shaped like :class:`runtime.exposition.MetricPoint` (the
stored ``MetricSample`` rows qualify): a ``timestamp`` or ``ts`` (unix seconds or an aware
datetime), ``interval_s`` and the optional float fields the rules read.

Every rule judges a point by two tests, both configurable per deployment (:class:`Objectives`,
stored as metrics.models.AdvisorObjectives):

* an **absolute floor**: below it the rule never fires, whatever the relative test says (a
  first token in 0.04 s is fast even at three times its median);
* a **relative test**: against the deployment's own objective or baseline, or against the load
  (a queue half the size of the running batch, preemptions per finished request).

Whether requests queued is measured where the engine says how long they waited: vLLM's queue
time (``queue_p95``, the p95 wait of the requests finished in the point's window). A queue seen
in the waiting count at a scrape counts only if the waits behind it were long enough
(``queue_floor_s``); waits longer than the whole first-token objective count even when no scrape
caught the queue; and a first token slower than the objective whose wait was most of it
(``queue_share_of_ttft``) is the queue's, not the prefill's. The waiting count alone decides
only where queue time is unknown (no request finished in the window, or an engine without the
histogram). vLLM observes a request's queue time when the request finishes, after its wait: the
point after a queue the scrapes saw reports that same queue, so it is not counted twice.

A rule then looks at its window and fires when the points in breach cover at least
``breach_share_pct`` of the window's observed time (each point weighs the seconds it covers).
So one bad scrape in a quarter of an hour is noise, while a short saturation burst in the
window yields its advice, also after the burst is over. A slow first token while requests
queue is the queue's doing: those points count for the queue rule, not the latency rule, so a
burst gives one piece of advice, not two.

Each :class:`Advice` names the chart (metrics.charts.CHARTS key) and carries its evidence: the
series, the window, the breach share, the stretches in breach, the floor and the threshold.

A deployment that generates nothing (embedding, score: vLLM's pooling runner, runtime.tasks) is
judged by the rules that read what it reports (:data:`GENERATION_RULES` are skipped) and is idle
when no prompt token was processed (it has no generated tokens to count).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

__all__ = ["GENERATION_RULES", "Advice", "Objectives", "Severity", "advise"]


class Severity(StrEnum):
    """Advice severities, most to least urgent (str values: they go into JSON and CSS)."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Objectives:
    """When each rule fires. The first four are per deployment (AdvisorObjectives)."""

    ttft_p95_objective_s: float = 2.0  # relative: slower than the deployment's own objective
    waiting_floor: float = 2.0  # absolute: a shorter queue never counts
    kv_cache_floor_pct: float = 90.0  # absolute: a cache below this is not under pressure
    breach_share_pct: float = 10.0  # a rule fires when this share of the window's time is in breach
    ttft_floor_s: float = 0.5  # absolute: a p95 first token below this is never slow
    queue_floor_s: float = 0.5  # absolute: a p95 wait in the queue below this needs no replica
    queue_share_of_ttft: float = 0.5  # relative: a first token whose wait was this share of it is the queue's
    ttft_spike_factor: float = 3.0  # relative: p95 this many times the window's median
    ttft_min_points_for_median: int = 3  # a median of two points is no baseline
    waiting_per_running: float = 0.5  # relative: the queue is at least this share of the batch
    preemptions_per_request: float = 0.05  # relative: preemptions per finished request
    window_s: float = 900.0
    idle_window_s: float = 2 * 3600.0
    min_points: int = 2  # fewer points than this in a window: no judgement at all


@dataclass(frozen=True)
class Advice:
    """One recommendation. ``evidence`` is JSON-safe (times as ISO 8601 UTC strings)."""

    code: str  # scale_out | kv_cache_pressure | slow_first_token | idle
    severity: str
    title: str
    message: str
    chart: str  # the metrics.charts.CHARTS key that shows the evidence
    evidence: dict[str, Any] = field(default_factory=dict)
    profile: str = ""  # the serving profile this advice points to ("": none; metrics.profile_hints)


Point = tuple[float, float, Any]  # (unix time, seconds it covers, the point)


def _ts(value: float | datetime) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _get(point: Any, name: str) -> float | None:
    value = getattr(point, name, None)
    return None if value is None else float(value)


def _points(points: Sequence[Any]) -> list[Point]:
    """(time, covered seconds, point), oldest first. A point covers its interval; one without
    (the first of a series: gauges only) covers the gap since the point before it, if any."""
    timed = sorted(
        ((_ts(p.ts if getattr(p, "timestamp", None) is None else p.timestamp), p) for p in points),
        key=lambda tp: tp[0],
    )
    out: list[Point] = []
    for i, (t, p) in enumerate(timed):
        covered = _get(p, "interval_s")
        if covered is None:
            covered = t - timed[i - 1][0] if i else 0.0
        out.append((t, max(0.0, covered), p))
    return out


@dataclass
class Judgement:
    """A rule's verdict over its window: which points were judged and which were in breach."""

    window: list[Point]
    breached: list[Point]

    @property
    def covered_s(self) -> float:
        return sum(c for _, c, _ in self.window)

    @property
    def breach_s(self) -> float:
        return sum(c for _, c, _ in self.breached)

    @property
    def share(self) -> float:
        covered = self.covered_s
        return self.breach_s / covered if covered > 0 else (1.0 if self.breached else 0.0)

    def fires(self, ob: Objectives) -> bool:
        return len(self.window) >= ob.min_points and bool(self.breached) and self.share * 100 >= ob.breach_share_pct

    def stretches(self, limit: int = 5) -> list[list[str]]:
        """The stretches in breach, [start, end] as ISO times, newest last (at most `limit`)."""
        runs: list[list[float]] = []
        breached = {id(p) for _, _, p in self.breached}
        for t, covered, p in self.window:
            if id(p) in breached:
                if runs and runs[-1][2]:
                    runs[-1][1] = t
                else:
                    runs.append([t - covered, t, True])
            elif runs:
                runs[-1][2] = False
        return [[_iso(a), _iso(b)] for a, b, _ in runs[-limit:]]


def _judge(
    pts: list[Point], now: float, seconds: float, needs: Sequence[str], test: Callable[[Any], bool]
) -> Judgement:
    """Points of the last `seconds` that carry every field in `needs`, and those `test` flags.
    Nothing new in the window (stale data) means nothing to judge."""
    window = [(t, c, p) for t, c, p in pts if now - seconds <= t <= now and all(_get(p, n) is not None for n in needs)]
    return Judgement(window, [(t, c, p) for t, c, p in window if test(p)])


def _evidence(j: Judgement, series: str, observed: float, threshold: float, **extra: Any) -> dict[str, Any]:
    return {
        "series": series,
        "window_start": _iso(j.window[0][0] - j.window[0][1]),
        "window_end": _iso(j.window[-1][0]),
        "points": len(j.window),
        "breach_share_pct": round(100 * j.share, 1),
        "breach_s": round(j.breach_s, 1),
        "breaches": j.stretches(),
        "observed": round(observed, 4),
        "threshold": threshold,
        **extra,
    }


def _waiting(p: Any, ob: Objectives) -> bool:
    """The queue as the waiting count at the scrape shows it: above the floor and against the batch."""
    waiting, running = _get(p, "waiting"), _get(p, "running") or 0.0
    return waiting is not None and waiting >= ob.waiting_floor and waiting >= ob.waiting_per_running * running


def _queueing(p: Any, ob: Objectives) -> bool:
    """Whether requests queued at `p`: by their queue time where the point has it (see the
    module docstring), else by the waiting count."""
    queue = _get(p, "queue_p95")
    if queue is None:
        return _waiting(p, ob)
    return queue >= ob.ttft_p95_objective_s or (queue >= ob.queue_floor_s and _waiting(p, ob))


def _queue_made(p: Any, ob: Objectives) -> bool:
    """Whether the wait in the queue was most of the point's time to first token (measured)."""
    queue, ttft = _get(p, "queue_p95"), _get(p, "ttft_p95")
    return queue is not None and bool(ttft) and queue >= ob.queue_share_of_ttft * ttft


def _queue_breaches(pts: list[Point], ob: Objectives) -> set[int]:
    """The points (by id) where requests queued: :func:`_queueing`, or a first token slower than
    the objective that was mostly a wait of at least the floor, unless the point before queued
    (that wait is the same queue, reported as its requests finished)."""
    out: set[int] = set()
    before = False
    for _, _, p in pts:
        queueing = _queueing(p, ob)
        slowed = (
            _queue_made(p, ob)
            and (_get(p, "queue_p95") or 0.0) >= ob.queue_floor_s
            and (_get(p, "ttft_p95") or 0.0) > ob.ttft_p95_objective_s
        )
        if queueing or (slowed and not before):
            out.add(id(p))
        before = queueing
    return out


def _rule_scale_out(pts: list[Point], now: float, ob: Objectives, headroom: int | None, per_replica: int):
    breaches = _queue_breaches(pts, ob)
    j = _judge(pts, now, ob.window_s, ("waiting",), lambda p: id(p) in breaches)
    if not j.fires(ob):
        return None
    peak = max(_get(p, "waiting") or 0.0 for _, _, p in j.breached)
    kv_peak = max((v for _, _, p in j.breached if (v := _get(p, "kv_cache_pct")) is not None), default=None)
    queue_peak = max((v for _, _, p in j.breached if (v := _get(p, "queue_p95")) is not None), default=None)
    if headroom is None:
        room, allowed = "The quota headroom is unknown.", None
    else:
        allowed = max(0, headroom) // max(1, per_replica)
        room = (
            f"Your quota has room for {allowed} more replica(s) ({headroom} free GPU(s), {per_replica} per replica)."
            if allowed
            else f"Your quota has no room for another replica ({per_replica} GPU(s) each, {headroom} free): "
            "request a quota increase."
        )
    seen = (
        f"up to {peak:g} waiting, at least {ob.waiting_floor:g} and half the running batch"
        if peak >= ob.waiting_floor
        else "no scrape caught them waiting"
    )
    waits = "" if queue_peak is None else f" They waited up to {queue_peak:.2f} s (p95) before their prefill began."
    kv_note = f" The KV cache reached {kv_peak:.0f} % meanwhile." if kv_peak is not None else ""
    return Advice(
        code="scale_out",
        severity=Severity.CRITICAL if allowed == 0 else Severity.WARNING,
        title="Requests are queueing: add replicas",
        message=(
            f"Requests queued ({seen}) "
            f"for {100 * j.share:.0f} % of the observed time from {_iso(j.window[0][0])} to {_iso(j.window[-1][0])}."
            f"{waits}{kv_note} Raise max_replicas / min_replicas so the load spreads. {room}"
        ),
        chart="queue",
        evidence=_evidence(
            j,
            "waiting",
            peak,
            ob.waiting_floor,
            relative=f"waiting ≥ {ob.waiting_per_running:g} × running",
            kv_cache_pct_peak=kv_peak,
            queue_p95_peak=queue_peak,
            replicas_allowed=allowed,
        ),
    )


def _preempting(p: Any, ob: Objectives) -> bool:
    rate, covered = _get(p, "preemptions_per_s") or 0.0, _get(p, "interval_s") or 0.0
    finished = _get(p, "requests_finished") or 0.0
    return rate * covered > 0 and rate * covered >= ob.preemptions_per_request * max(finished, 1.0)


def _rule_kv_cache(pts: list[Point], now: float, ob: Objectives):
    # A full cache that turns into a queue is the scale-out rule's; this one is for a full cache
    # that makes the engine evict and recompute requests while nothing waits.
    def breach(p: Any) -> bool:
        return (_get(p, "kv_cache_pct") or 0.0) >= ob.kv_cache_floor_pct and _preempting(p, ob) and not _queueing(p, ob)

    j = _judge(pts, now, ob.window_s, ("kv_cache_pct",), breach)
    if not j.fires(ob):
        return None
    low = min(_get(p, "kv_cache_pct") or 0.0 for _, _, p in j.breached)
    preempt = statistics.fmean(_get(p, "preemptions_per_s") or 0.0 for _, _, p in j.breached)
    return Advice(
        code="kv_cache_pressure",
        severity=Severity.WARNING,
        title="KV cache full: requests are preempted",
        message=(
            f"KV-cache use stayed at or above {ob.kv_cache_floor_pct:g} % (lowest {low:.1f} %) while the engine "
            f"preempted {preempt:.2f} requests/s, for {100 * j.share:.0f} % of the observed time. Add replicas, give "
            "the cache more memory (gpu_memory_utilization), or lower max_num_seqs so fewer sequences hold blocks."
        ),
        chart="kv_cache",
        evidence=_evidence(
            j,
            "kv_cache_pct",
            low,
            ob.kv_cache_floor_pct,
            relative=f"preemptions ≥ {ob.preemptions_per_request:g} per finished request",
            preemptions_per_s=preempt,
        ),
    )


def _rule_ttft(pts: list[Point], now: float, ob: Objectives):
    # Intervals without new requests have no quantile: they neither help nor hurt.
    observed = [v for t, _, p in pts if now - ob.window_s <= t <= now and (v := _get(p, "ttft_p95")) is not None]
    median = statistics.median(observed) if len(observed) >= ob.ttft_min_points_for_median else None
    queued = {id(b[2]) for a, b in zip(pts, pts[1:], strict=False) if _queueing(a[2], ob)}
    queued |= {id(p) for _, _, p in pts if _queueing(p, ob)}

    def breach(p: Any) -> bool:
        v = _get(p, "ttft_p95") or 0.0
        relative = v > ob.ttft_p95_objective_s or (median is not None and v > ob.ttft_spike_factor * median)
        # A point whose requests queued (now or in the interval before), or whose wait in the
        # queue was most of the first token, is the queue's doing.
        return v > ob.ttft_floor_s and relative and id(p) not in queued and not _queue_made(p, ob)

    j = _judge(pts, now, ob.window_s, ("ttft_p95",), breach)
    if not j.fires(ob):
        return None
    peak_t, peak = max(((t, _get(p, "ttft_p95") or 0.0) for t, _, p in j.breached), key=lambda tv: tv[1])
    return Advice(
        code="slow_first_token",
        severity=Severity.WARNING,
        title="Slow first tokens",
        message=(
            f"Time to first token (p95) reached {peak:.2f} s at {_iso(peak_t)}, above the objective of "
            f"{ob.ttft_p95_objective_s:g} s or {ob.ttft_spike_factor:g}× the window's median, for "
            f"{100 * j.share:.0f} % of the time with requests. Long prefills are stalling the batch: lower "
            "max_num_batched_tokens so chunked prefill takes smaller chunks, or separate prefill from decode."
        ),
        chart="ttft",
        evidence=_evidence(
            j,
            "ttft_p95",
            peak,
            ob.ttft_p95_objective_s,
            floor=ob.ttft_floor_s,
            median=None if median is None else round(median, 4),
            at=_iso(peak_t),
        ),
    )


def _is_idle(p: Any, tokens: str) -> bool:
    return _get(p, "running") == 0.0 and (_get(p, "waiting") or 0.0) == 0.0 and (_get(p, tokens) or 0.0) == 0.0


def _rule_idle(pts: list[Point], now: float, ob: Objectives, generates: bool):
    # The run of idle points that ends at the newest point: its span is how long it has been
    # idle, independent of the scrape interval.
    # A pooling request runs for one engine step, so a scrape seldom sees it running: its prompt
    # tokens per second (over the rate window) tell whether any came.
    tokens = "generation_tokens_per_s" if generates else "prompt_tokens_per_s"
    run: list[Point] = []
    for point in reversed([x for x in pts if x[0] <= now]):
        if not _is_idle(point[2], tokens):
            break
        run.insert(0, point)
    if len(run) < ob.min_points or now - run[-1][0] > ob.window_s:
        return None
    span = run[-1][0] - run[0][0]
    if span < ob.idle_window_s:
        return None
    j = Judgement(run, run)
    return Advice(
        code="idle",
        severity=Severity.INFO,
        title="Idle: stop it to free the quota",
        message=(
            f"No request ran{' and no token was generated' if generates else ''} for {span / 3600:.1f} h. "
            "Stopping the deployment returns its GPUs to your quota; start it again when needed."
        ),
        chart="tokens",
        evidence=_evidence(j, tokens, 0.0, ob.idle_window_s, idle_s=span),
    )


# Rules that judge what only a generating engine reports, skipped for a pooling deployment. The
# first-token rule reads a "time to first token" that vLLM takes, for a pooling request, at the same
# step as its end-to-end latency (metrics.charts.GENERATION_CHARTS has the citation), and its
# remedies (smaller prefill chunks beside decodes, prefill/decode disaggregation) assume a decode
# loop. The others apply: requests queue (scale_out), and a causal model whose long prompts are
# prefilled in chunks holds KV blocks across steps and can be preempted (kv_cache_pressure).
GENERATION_RULES = frozenset({"slow_first_token"})


def advise(
    points: Sequence[Any],
    *,
    objectives: Objectives | None = None,
    quota_headroom_gpus: int | None,
    gpus_per_replica: int,
    now: float | datetime,
    generates: bool = True,
) -> list[Advice]:
    """Every rule that fires on ``points``, most severe first.

    ``quota_headroom_gpus`` is what the tenant's quota still allows in this deployment's
    flavor (None when unknown); the scale-out advice turns it into whole replicas. ``generates``
    is False for a deployment that produces no output tokens (runtime.tasks.generates).
    """
    ob = objectives or Objectives()
    now_ts = _ts(now)
    pts = _points(points)
    rules = {
        "scale_out": lambda: _rule_scale_out(pts, now_ts, ob, quota_headroom_gpus, gpus_per_replica),
        "kv_cache_pressure": lambda: _rule_kv_cache(pts, now_ts, ob),
        "slow_first_token": lambda: _rule_ttft(pts, now_ts, ob),
        "idle": lambda: _rule_idle(pts, now_ts, ob, generates),
    }
    found = [rule() for code, rule in rules.items() if generates or code not in GENERATION_RULES]
    order = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted((a for a in found if a is not None), key=lambda a: order[a.severity])
