"""How stored points combine, in one place: the rollups and the windows read across resolutions
both use :func:`combine`, and every ratio is divided here, at read time. Pure: no ORM.

* rates (tokens/s, requests/s …): weighted by the seconds each point covers, so a bucket's rate
  is its total increase over its total time;
* increments (prefix-cache hits and lookups, finished and failed requests, interval seconds):
  summed — the ratios built from them are then ratios of sums, correct at any resolution;
* gauges and latency quantiles: the mean of the points (a quantile of a bucket cannot be
  rebuilt without its histogram; the mean of the per-interval quantiles is an approximation,
  said so on the charts' page);
* peaks (:data:`PEAKS`): the highest sample of a gauge in the bucket. vLLM exposes requests
  running and KV-cache use as gauges only (no histogram or counter holds their maximum), so the
  highest value between two scrapes is unknowable; what a rollup can keep is the highest value
  scraped, which a mean would flatten (one busy sample among four reads a quarter of it). A raw
  point stores no peak: it is one sample, its own peak.
"""

from __future__ import annotations

from collections.abc import Sequence

from runtime.exposition.derive import RATE_COUNTS, RATIO_PARTS, SERIES_FIELDS, ratio_pct

RATES = tuple(name for _, name in RATE_COUNTS)
INCREMENTS = ("interval_s", *RATIO_PARTS)
PEAKS = {"running_peak": "running", "kv_cache_pct_peak": "kv_cache_pct"}  # peak column: its gauge
COLUMNS: tuple[str, ...] = ("interval_s", *SERIES_FIELDS, *PEAKS)  # the stored columns, in row order
MEANS = tuple(name for name in COLUMNS if name not in RATES and name not in INCREMENTS and name not in PEAKS)
# Shown on charts and in the API beside the stored columns, computed by :func:`with_ratios`.
RATIOS = {
    "prefix_cache_hit_pct": ("prefix_cache_hits", "prefix_cache_queries"),
    "error_pct": ("requests_failed", "requests_finished"),
}


def combine(rows: Sequence[Sequence[float | None]]) -> dict[str, float | None]:
    """One point from `rows` (tuples in :data:`COLUMNS` order), by the rules above."""
    index = {name: i for i, name in enumerate(COLUMNS)}
    out: dict[str, float | None] = {}
    for name in INCREMENTS:
        present = [r[index[name]] for r in rows if r[index[name]] is not None]
        out[name] = sum(present) if present else None
    for name in MEANS:
        present = [r[index[name]] for r in rows if r[index[name]] is not None]
        out[name] = sum(present) / len(present) if present else None
    for name, gauge in PEAKS.items():
        # A raw row has no peak of its own: its gauge is one.
        present = [r[index[name]] if r[index[name]] is not None else r[index[gauge]] for r in rows]
        present = [v for v in present if v is not None]
        out[name] = max(present) if present else None
    dt = index["interval_s"]
    for name in RATES:
        weighted = [(r[index[name]], r[dt]) for r in rows if r[index[name]] is not None and r[dt]]
        if weighted:
            out[name] = sum(v * t for v, t in weighted) / sum(t for _, t in weighted)
        else:
            present = [r[index[name]] for r in rows if r[index[name]] is not None]
            out[name] = sum(present) / len(present) if present else None
    return out


def with_ratios(columns: dict[str, list[float | None]]) -> dict[str, list[float | None]]:
    """`columns` plus each ratio per point, and the prefix-cache hit ratio accumulated over the
    window (``prefix_cache_hit_pct_cumulative``: all hits so far over all lookups so far)."""
    out = dict(columns)
    for ratio, (num, den) in RATIOS.items():
        out[ratio] = [ratio_pct(n, d) for n, d in zip(columns[num], columns[den], strict=True)]
    hits = lookups = 0.0
    cumulative: list[float | None] = []
    for n, d in zip(columns["prefix_cache_hits"], columns["prefix_cache_queries"], strict=True):
        hits, lookups = hits + (n or 0.0), lookups + (d or 0.0)
        cumulative.append(ratio_pct(hits, lookups))
    out["prefix_cache_hit_pct_cumulative"] = cumulative
    return out


def window_ratios(columns: dict[str, list[float | None]]) -> dict[str, float | None]:
    """Each ratio over the whole window: the sum of its numerators over the sum of its denominators."""
    return {
        ratio: ratio_pct(sum(v for v in columns[num] if v is not None), sum(v for v in columns[den] if v is not None))
        for ratio, (num, den) in RATIOS.items()
    }
