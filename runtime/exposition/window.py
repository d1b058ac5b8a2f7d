"""The rate window: how far back every rate and latency quantile looks, on both paths.

One rule, Grafana's ``$__rate_interval``, ``max($__interval + scrape interval, 4 × scrape
interval)`` (as restated in grafana/grafana pull request 77234, "Prometheus: Fix
$__rate_interval calculation", merged for Grafana 10.2/10.3): at least four scrapes
in every window, so a delayed or failed scrape never leaves rate() with fewer than two samples,
and never shorter than the step between two points plus one scrape, so consecutive windows
leave no scrape out. Here the step is the portal's cycle (METRICS_SCRAPE_SECONDS) and the scrape
interval Prometheus's for the engines, or the cycle itself when the portal scrapes them directly.

* Prometheus: ``rate(x[W])`` over that window (runtime.exposition.promql).
* Direct: each cycle adds the :class:`~runtime.exposition.derive.Interval` since its last
  snapshot to a short history; the point is the intervals of the last window combined
  (:func:`advance`). When Prometheus's samples in its window are the direct path's snapshots
  (tests/metrics/test_prometheus.py replays a real series into both), the figures are equal.

A stored point stands for one cycle, not for its window (:func:`rescaled`): summed over cycles,
rate × interval_s counts each token once (usage.rollup) and ratio parts add up, whatever the
window. An engine that goes idle reads 0 once its last busy interval has left the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from runtime.exposition.derive import RATIO_PARTS, Interval, MetricPoint, combined, interval, point
from runtime.exposition.snapshot import Snapshot

MIN_SCRAPES_PER_WINDOW = 4  # Prometheus's guidance: rate() over at least four scrape intervals


def rate_window(cycle_s: float, scrape_interval_s: float) -> float:
    """The rate window in seconds for points every `cycle_s` from samples every `scrape_interval_s`."""
    if cycle_s <= 0 or scrape_interval_s <= 0:
        raise ValueError("the cycle and the scrape interval must be positive")
    return max(cycle_s + scrape_interval_s, MIN_SCRAPES_PER_WINDOW * scrape_interval_s)


def within(history: Sequence[Interval], *, end: float, window_s: float) -> list[Interval]:
    """The newest intervals that lie in the window ending at `end`, oldest first; always the
    newest one (after a gap longer than the window it is the only one).

    An interval belongs to the window when most of it lies inside (its midpoint does): with
    snapshots every cycle and a window of four cycles, a cycle a little late or early keeps four
    intervals in the window instead of three or five, so the window's length stays steady.
    """
    kept: list[Interval] = []
    for part in reversed(history):
        if kept and (part.start + part.end) / 2 < end - window_s:
            break
        kept.append(part)
    kept.reverse()
    return kept


def rescaled(point: MetricPoint, seconds: float, window_s: float | None = None) -> MetricPoint:
    """`point` standing for the `seconds` since the previous point instead of the span its rates
    cover (`point.interval_s`): the rates stay, ``interval_s`` and the ratio parts become this
    cycle's share.

    A window spans several cycles, so each increment appears in several points; scaled by
    seconds / window each counts once in any sum of points (rate × interval_s for the usage
    ledger, sums of ratio parts). A span shorter than the window (a deployment's first cycles,
    or after a gap) is scaled by the window all the same, so its increments, seen again by the
    next points, are not counted twice.
    """
    span = point.interval_s
    if not span or seconds <= 0:
        return point
    factor = min(seconds, span) / max(span, window_s or span)
    scaled = {name: None if getattr(point, name) is None else getattr(point, name) * factor for name in RATIO_PARTS}
    return replace(point, interval_s=span * factor, **scaled)


def advance(
    history: Sequence[Interval], prev: Snapshot | None, cur: Snapshot, *, window_s: float
) -> tuple[MetricPoint | None, list[Interval]]:
    """The direct path's step: the point stored at `cur` and the history to keep for the next one.

    `prev` is the previous snapshot (None for the first); `history` the intervals kept so far.
    Without `prev` only gauges are known; a snapshot not newer than `prev` gives no point (None)
    and keeps the history. The history kept is what the next window can still reach.
    """
    if prev is None:
        return point(None, cur), []
    if cur.timestamp <= prev.timestamp:
        return None, list(history)
    new = interval(prev, cur)
    kept = within([*history, new], end=cur.timestamp, window_s=window_s)
    return rescaled(point(combined(kept), cur), new.seconds, window_s), kept
