"""vLLM metrics: scrape or query, parse with prometheus_client, derive rates and quantiles.

Two exposition dialects carry the same numbers:

* vLLM's own ``/metrics`` (``vllm:<name>``, labels ``model_name``, ``engine``);
* Ray's metrics port under Ray Serve LLM (``ray_vllm_<name>``, one series per replica with
  extra labels ``ReplicaId``, ``WorkerId``, ``SessionName`` …, beside hundreds of unrelated
  ``ray_*`` series).

Both are normalised to ``<name>`` and kept per series (one series = one label set, ``le``
aside). Totals are sums over series; rates are computed per series and *then* summed, the
way Prometheus does ``sum(rate(...))``. Summing first and differencing afterwards would turn
a replica that goes away (scale-down, restart) into a fake counter reset and a rate spike.

Counters absent from a snapshot count as zero: vLLM registers them all at start, and Ray
only exports a counter after its first increment (``ray_vllm_prefix_cache_hits_total`` is
missing from a Ray exposition until the first cache hit), so absence means "never counted".

No Django here: the Celery task stores :class:`MetricPoint` values and keeps the previous
:class:`Snapshot` (``to_dict``/``from_dict``) to difference against.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import Any, TypeVar

import requests
import urllib3
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "COUNTERS",
    "NORMAL_FINISH_REASONS",
    "GAUGES",
    "HISTOGRAMS",
    "HistogramSeries",
    "MetricPoint",
    "SERIES_FIELDS",
    "ScrapeError",
    "Snapshot",
    "derive",
    "filter_exposition",
    "histogram_quantile",
    "parse_exposition",
    "prometheus_selector",
    "query_prometheus",
    "scrape",
    "scrape_many",
]

PREFIXES = ("vllm:", "ray_vllm_")

COUNTERS = (
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",  # one series per finished_reason
    "num_preemptions_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
)
GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
# Only the histograms the derived series use: every other family is dropped before parsing,
# which is the expensive step (queue time, per-output-token time and the token-count
# histograms would add ~45 % to a Ray exposition's parse for nothing; bench/b3_metrics.py).
HISTOGRAMS = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "e2e_request_latency_seconds",
)

# vLLM 0.32 finished_reason values: stop, length, abort, error, repetition. stop/length are
# normal ends and repetition is the engine's repetition detector ending a request on purpose;
# everything else (abort = client went away or was cancelled, error, any future reason) is
# counted as a request that did not complete normally.
NORMAL_FINISH_REASONS = frozenset({"stop", "length", "repetition"})

# Exposition bodies above this are refused: a real Ray node exposition is ~1 MB.
MAX_BODY_BYTES = 32 * 1024 * 1024

SeriesKey = tuple[tuple[str, str], ...]
K = TypeVar("K")


class ScrapeError(Exception):
    """A metrics source could not be read: timeout, HTTP error, or no vLLM metrics in it."""


# --------------------------------------------------------------------------------------
# Filtering and name normalisation
# --------------------------------------------------------------------------------------


def _accepted_names() -> frozenset[str]:
    """Every raw sample / family name worth parsing, in both dialects."""
    names: set[str] = set()
    for prefix in PREFIXES:
        for name in (*COUNTERS, *GAUGES):
            names.add(prefix + name)
        for name in HISTOGRAMS:
            names.update(prefix + name + s for s in ("", "_bucket", "_sum", "_count"))
    return frozenset(names)


_ACCEPTED = _accepted_names()
_SAMPLE_NAME = re.compile(r"[^{\s]+")
_LINE_STARTS = ("#", *PREFIXES)
# Labels Ray stamps on every series that say where and by what it was recorded, not which
# series it is (a replica's series stay apart by ReplicaId/WorkerId, engine, model_name,
# finished_reason). They are most of a Ray line's characters, and prometheus_client reads
# labels a character at a time: dropping them before parsing halves the parse of a Ray
# exposition (bench/b3_metrics.py).
RAY_CONTEXT_LABELS = (
    "Component",
    "NodeAddress",
    "SessionName",
    "Version",
    "otel_scope_name",
    "otel_scope_schema_url",
    "otel_scope_version",
)
_RAY_CONTEXT = re.compile(r"(?<=[{,])(?:" + "|".join(RAY_CONTEXT_LABELS) + r')="(?:[^"\\]|\\.)*",?')


def filter_exposition(text: str) -> str:
    """Only the lines of the families we use (plus their ``# HELP``/``# TYPE`` lines).

    Parsing is the expensive step: a full Ray node exposition (~900 kB) takes ~150-400 ms
    in prometheus_client, the same text cut to the vLLM families a few ms. A set lookup per
    line is far cheaper than the parser's per-sample work.
    """
    kept: list[str] = []
    for line in text.splitlines():
        # Most lines of a Ray node's exposition are other families: one C-level prefix test
        # drops them before any splitting or regex work (halves the filter's cost there).
        if not line.startswith(_LINE_STARTS):
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] in _ACCEPTED:
                kept.append(line)
            continue
        match = _SAMPLE_NAME.match(line)
        if match and match.group(0) in _ACCEPTED:
            kept.append(_RAY_CONTEXT.sub("", line) if line[0] == "r" else line)
    return "\n".join(kept) + "\n" if kept else ""


def _normalise(sample_name: str) -> str | None:
    """``vllm:x`` / ``ray_vllm_x`` → ``x``; None for anything else."""
    for prefix in PREFIXES:
        if sample_name.startswith(prefix):
            return sample_name[len(prefix) :]
    return None


def _parse_le(raw: str) -> float:
    return math.inf if raw in ("+Inf", "Inf", "inf") else float(raw)


def _format_le(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(le)


# --------------------------------------------------------------------------------------
# Snapshot
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistogramSeries:
    """A cumulative histogram: ``buckets`` are ``(le, count)`` by ``le``, ending at +Inf."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def bucket_map(self) -> dict[float, float]:
        """``{le: cumulative count}``."""
        return dict(self.buckets)


@dataclass(frozen=True)
class Snapshot:
    """The vLLM metrics of one deployment at one instant, per series.

    ``counters``/``gauges`` map a normalised name (``prompt_tokens_total``) to
    ``{series labels: value}``; ``histograms`` map a name to ``{series labels: HistogramSeries}``.
    Series labels are sorted ``(name, value)`` pairs without ``le``.
    """

    timestamp: float
    counters: Mapping[str, Mapping[SeriesKey, float]] = field(default_factory=dict)
    gauges: Mapping[str, Mapping[SeriesKey, float]] = field(default_factory=dict)
    histograms: Mapping[str, Mapping[SeriesKey, HistogramSeries]] = field(default_factory=dict)

    # -- totals over all series of the deployment ------------------------------------------

    def counter(self, name: str) -> float:
        """Sum over series; 0.0 when absent (see module docstring)."""
        return sum(self.counters.get(name, {}).values())

    @property
    def counter_totals(self) -> dict[str, float]:
        """Every counter summed over series (``request_success_total`` over all reasons)."""
        return {name: self.counter(name) for name in COUNTERS}

    @property
    def success_by_reason(self) -> dict[str, float]:
        """``request_success_total`` summed per ``finished_reason``."""
        out: dict[str, float] = {}
        for key, value in self.counters.get("request_success_total", {}).items():
            reason = dict(key).get("finished_reason", "")
            out[reason] = out.get(reason, 0.0) + value
        return out

    def gauge_sum(self, name: str) -> float | None:
        """Sum over series (requests running/waiting); None when absent."""
        values = self.gauges.get(name)
        return sum(values.values()) if values else None

    def gauge_mean(self, name: str) -> float | None:
        """Mean over series: for ratios (``kv_cache_usage_perc``), where a sum means nothing."""
        values = self.gauges.get(name)
        return sum(values.values()) / len(values) if values else None

    def gauge_max(self, name: str) -> float | None:
        """Max over series: the hottest replica."""
        values = self.gauges.get(name)
        return max(values.values()) if values else None

    def histogram(self, name: str) -> HistogramSeries | None:
        """All series of ``name`` summed bucket by bucket; None when absent."""
        series = self.histograms.get(name)
        if not series:
            return None
        return _sum_histograms(series.values())

    @cached_property
    def owners(self) -> frozenset[SeriesKey]:
        """Label sets of the reporting processes (series labels minus ``finished_reason``)."""
        out: set[SeriesKey] = set()
        for group in (self.counters, self.gauges, self.histograms):
            for series in group.values():
                out.update(_owner(k) for k in series)
        return frozenset(out)

    @property
    def replica_count(self) -> int:
        """Distinct label sets reporting ``num_requests_running`` (engines × replicas)."""
        return len(self.gauges.get("num_requests_running", {}))

    @property
    def empty(self) -> bool:
        return not (self.counters or self.gauges or self.histograms)

    @classmethod
    def merged(cls, parts: Iterable[Snapshot]) -> Snapshot:
        """One deployment read from several nodes (a Ray cluster's pods) as one snapshot.

        Each node exports only the replicas it hosts, so series are disjoint and simply pooled;
        a key seen twice is added, as the parser does. The time is the latest part's.
        """
        parts = list(parts)
        counters: dict[str, dict[SeriesKey, float]] = {}
        gauges: dict[str, dict[SeriesKey, float]] = {}
        histograms: dict[str, dict[SeriesKey, HistogramSeries]] = {}
        for part in parts:
            for target, source in ((counters, part.counters), (gauges, part.gauges)):
                for name, series in source.items():
                    merged = target.setdefault(name, {})
                    for key, value in series.items():
                        _add(merged, key, value)
            for name, series in part.histograms.items():
                merged_h = histograms.setdefault(name, {})
                for key, hist in series.items():
                    merged_h[key] = _sum_histograms([merged_h[key], hist]) if key in merged_h else hist
        return cls(max((p.timestamp for p in parts), default=time.time()), counters, gauges, histograms)

    # -- storage --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (no Infinity: ``le`` is written as text) for a JSONField or cache."""
        return {
            "timestamp": self.timestamp,
            "counters": {n: [[dict(k), v] for k, v in s.items()] for n, s in self.counters.items()},
            "gauges": {n: [[dict(k), v] for k, v in s.items()] for n, s in self.gauges.items()},
            "histograms": {
                n: [[dict(k), [[_format_le(le), c] for le, c in h.buckets], h.sum, h.count] for k, h in s.items()]
                for n, s in self.histograms.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        """Inverse of :meth:`to_dict`."""

        def key(labels: Mapping[str, str]) -> SeriesKey:
            return tuple(sorted(labels.items()))

        return cls(
            timestamp=float(data["timestamp"]),
            counters={n: {key(lb): float(v) for lb, v in s} for n, s in data.get("counters", {}).items()},
            gauges={n: {key(lb): float(v) for lb, v in s} for n, s in data.get("gauges", {}).items()},
            histograms={
                n: {
                    key(lb): HistogramSeries(
                        buckets=tuple((_parse_le(le), float(c)) for le, c in buckets),
                        sum=float(total),
                        count=float(count),
                    )
                    for lb, buckets, total, count in s
                }
                for n, s in data.get("histograms", {}).items()
            },
        )


def _sum_histograms(series: Iterable[HistogramSeries]) -> HistogramSeries:
    buckets: dict[float, float] = {}
    total = count = 0.0
    for h in series:
        for le, c in h.buckets:
            buckets[le] = buckets.get(le, 0.0) + c
        total += h.sum
        count += h.count
    return HistogramSeries(tuple(sorted(buckets.items())), total, count)


class _Builder:
    """Collects raw samples (from either source) into a :class:`Snapshot`."""

    def __init__(self, match_labels: Mapping[str, str] | None) -> None:
        self.match = dict(match_labels or {})
        self.counters: dict[str, dict[SeriesKey, float]] = {}
        self.gauges: dict[str, dict[SeriesKey, float]] = {}
        self.buckets: dict[str, dict[SeriesKey, dict[float, float]]] = {}
        self.sums: dict[str, dict[SeriesKey, float]] = {}
        self.counts: dict[str, dict[SeriesKey, float]] = {}

    def add(self, sample_name: str, labels: Mapping[str, str], value: float) -> None:
        name = _normalise(sample_name)
        if name is None or any(labels.get(k) != v for k, v in self.match.items()):
            return
        le = labels.get("le")
        key = tuple(sorted((k, v) for k, v in labels.items() if k not in ("le", "__name__")))
        # Two samples with one key can only come from mixing both dialects; adding keeps
        # the deployment total right either way.
        if name in COUNTERS:
            _add(self.counters.setdefault(name, {}), key, value)
        elif name in GAUGES:
            _add(self.gauges.setdefault(name, {}), key, value)
        elif name.endswith("_bucket") and name[:-7] in HISTOGRAMS and le is not None:
            _add(self.buckets.setdefault(name[:-7], {}).setdefault(key, {}), _parse_le(le), value)
        elif name.endswith("_sum") and name[:-4] in HISTOGRAMS:
            _add(self.sums.setdefault(name[:-4], {}), key, value)
        elif name.endswith("_count") and name[:-6] in HISTOGRAMS:
            _add(self.counts.setdefault(name[:-6], {}), key, value)

    @property
    def empty(self) -> bool:
        return not (self.counters or self.gauges or self.buckets)

    def build(self, timestamp: float) -> Snapshot:
        histograms: dict[str, dict[SeriesKey, HistogramSeries]] = {}
        for name, per_series in self.buckets.items():
            for key, buckets in per_series.items():
                count = self.counts.get(name, {}).get(key, buckets.get(math.inf, 0.0))
                histograms.setdefault(name, {})[key] = HistogramSeries(
                    buckets=tuple(sorted(buckets.items())),
                    sum=self.sums.get(name, {}).get(key, 0.0),
                    count=count,
                )
        return Snapshot(timestamp, self.counters, self.gauges, histograms)


def _add(target: dict[K, float], key: K, value: float) -> None:
    target[key] = target.get(key, 0.0) + value


def parse_exposition(
    text: str,
    timestamp: float | None = None,
    *,
    match_labels: Mapping[str, str] | None = None,
    require_vllm: bool = True,
) -> Snapshot:
    """Parse a Prometheus text exposition (vLLM or Ray) into a :class:`Snapshot`.

    ``match_labels`` keeps only series carrying those labels — a Ray node's port exports
    every replica on the node, so e.g. ``{"model_name": "llama-8b"}`` picks one deployment.
    Raises :class:`ScrapeError` when the text does not parse, or holds no vLLM metrics and
    ``require_vllm`` is set (clear it for one node of several: a Ray head hosts no replica).
    """
    builder = _Builder(match_labels)
    try:
        for family in text_string_to_metric_families(filter_exposition(text)):
            for sample in family.samples:
                builder.add(sample.name, sample.labels, sample.value)
    except ValueError as exc:  # prometheus_client reports every syntax error as ValueError
        raise ScrapeError(f"unparseable exposition: {exc}") from exc
    if builder.empty and require_vllm:
        raise ScrapeError("no vllm:* or ray_vllm_* metrics in the exposition")
    return builder.build(time.time() if timestamp is None else timestamp)


# --------------------------------------------------------------------------------------
# Derivation: rates, ratios, quantiles
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricPoint:
    """What one scrape interval shows; None where it cannot be known (no prev, no data).

    Rates are per second over ``interval_s``; percentages are 0-100; latency quantiles are
    seconds over the requests observed *during* the interval.
    """

    timestamp: float
    interval_s: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    errors_per_s: float | None = None
    preemptions_per_s: float | None = None
    prefix_cache_hit_pct: float | None = None
    kv_cache_pct: float | None = None
    running: float | None = None
    waiting: float | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    itl_p50: float | None = None
    itl_p95: float | None = None
    e2e_p50: float | None = None
    e2e_p95: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        """Plain dict, e.g. for a JSONField or a chart series."""
        return asdict(self)


SERIES_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MetricPoint) if f.name not in ("timestamp", "interval_s"))


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


def _owner(key: SeriesKey) -> SeriesKey:
    """The process a series belongs to: its labels minus the per-value ``finished_reason``."""
    return tuple(kv for kv in key if kv[0] != "finished_reason")


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
        elif _owner(key) in prev.owners:
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
        if old is None and _owner(key) not in prev.owners:
            continue
        old_map = old.bucket_map() if old is not None else {}
        # A smaller count, or a different bucket layout (new vLLM version), is a restart.
        reset = old is not None and (hist.count < old.count or {le for le, _ in hist.buckets} != old_map.keys())
        for le, count in hist.buckets:
            _add(out, le, count if reset else count - old_map.get(le, 0.0))
    return out


def derive(prev: Snapshot | None, cur: Snapshot) -> MetricPoint:
    """One :class:`MetricPoint` for the interval ``prev → cur`` (gauges from ``cur`` alone).

    ``kv_cache_pct`` is the mean over engines/replicas: each reports its own 0-1 ratio, so
    a sum would exceed 100 % with two replicas.
    """
    kv = cur.gauge_mean("kv_cache_usage_perc")
    gauges = {
        "kv_cache_pct": None if kv is None else kv * 100.0,
        "running": cur.gauge_sum("num_requests_running"),
        "waiting": cur.gauge_sum("num_requests_waiting"),
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
        prefix_cache_hit_pct=100.0 * hits / queries if queries > 0 else None,
        **gauges,
        **quantiles,
    )


# --------------------------------------------------------------------------------------
# Sources: direct scrape, Prometheus HTTP API
# --------------------------------------------------------------------------------------

_ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


def _get_text(url: str, timeout: float, params: Mapping[str, str] | None = None) -> str:
    """GET with an overall deadline and a size cap.

    requests' timeout bounds each socket read, so a server dripping a byte a second never
    trips it; reading with ``read1`` (whatever has arrived) lets the deadline be checked.
    """
    deadline = time.monotonic() + timeout
    try:
        with requests.get(url, params=params, timeout=timeout, stream=True, headers={"Accept": _ACCEPT}) as resp:
            resp.raise_for_status()
            chunks: list[bytes] = []
            size = 0
            while chunk := resp.raw.read1(64 * 1024, decode_content=True):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ScrapeError(f"{url}: body larger than {MAX_BODY_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise ScrapeError(f"{url}: timed out: no complete answer within {timeout} s")
            # The exposition format is UTF-8 by definition, whatever the Content-Type says.
            return b"".join(chunks).decode("utf-8", errors="replace")
    except (requests.Timeout, urllib3.exceptions.TimeoutError) as exc:
        raise ScrapeError(f"{url}: timed out after {timeout} s") from exc
    except requests.HTTPError as exc:
        raise ScrapeError(f"{url}: HTTP {exc.response.status_code}") from exc
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        raise ScrapeError(f"{url}: {exc.__class__.__name__}: {exc}") from exc


def scrape(
    url: str,
    timeout: float = 5.0,
    *,
    match_labels: Mapping[str, str] | None = None,
    require_vllm: bool = True,
) -> Snapshot:
    """Fetch and parse one exposition (vLLM ``/metrics`` or a Ray metrics port)."""
    text = _get_text(url, timeout)
    taken_at = time.time()
    try:
        return parse_exposition(text, taken_at, match_labels=match_labels, require_vllm=require_vllm)
    except ScrapeError as exc:
        raise ScrapeError(f"{url}: {exc}") from exc


def scrape_many(
    targets: Mapping[K, str | Sequence[str]],
    timeout: float = 5.0,
    max_workers: int = 32,
    *,
    match_labels: Mapping[str, str] | None = None,
) -> dict[K, Snapshot | ScrapeError]:
    """Scrape every target concurrently; each key gets a Snapshot or the ScrapeError.

    A key's target is one URL, or several for a deployment spread over nodes (a Ray
    cluster's pods): those are read side by side and merged (:meth:`Snapshot.merged`). Every
    one of them must answer (a missing node would read as a drop in its counters), and
    together they must hold vLLM series; a node without any (the Ray head) is fine.

    With no more URLs than workers the call returns within about ``timeout``; beyond that,
    each further wave of ``max_workers`` URLs may add one ``timeout``. A URL still being read
    at the end is reported as timed out and its thread left to finish on its own (it stops at
    its own deadline), so one stuck endpoint never holds up the sweep.
    """
    urls = {key: [target] if isinstance(target, str) else list(target) for key, target in targets.items()}
    results: dict[K, Snapshot | ScrapeError] = {
        key: ScrapeError("no endpoint to scrape") for key, group in urls.items() if not group
    }
    jobs = [(key, url) for key, group in urls.items() for url in group]
    if not jobs:
        return results
    workers = max(1, min(max_workers, len(jobs)))
    waves = math.ceil(len(jobs) / workers)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scrape")
    parts: dict[K, list[Snapshot]] = {}
    try:
        futures = {
            pool.submit(scrape, url, timeout, match_labels=match_labels, require_vllm=len(urls[key]) == 1): (key, url)
            for key, url in jobs
        }
        # A small grace beyond the per-request deadlines for thread start and parsing.
        done, _ = wait(futures, timeout=waves * timeout + 1.0)
        for future, (key, url) in futures.items():
            if key in results:
                continue  # another of its URLs already failed
            if future not in done:
                results[key] = ScrapeError(f"{url}: timed out after {timeout} s")
            elif (exc := future.exception()) is None:
                parts.setdefault(key, []).append(future.result())
            elif isinstance(exc, ScrapeError):
                results[key] = exc
            else:  # a bug, not a bad endpoint: keep the sweep going but say what it was
                results[key] = ScrapeError(f"{url}: {exc!r}")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for key, snapshots in parts.items():
        if key in results:
            continue
        snapshot = snapshots[0] if len(snapshots) == 1 else Snapshot.merged(snapshots)
        if snapshot.empty:
            results[key] = ScrapeError(f"no vllm:* or ray_vllm_* metrics on any of its {len(snapshots)} endpoints")
        else:
            results[key] = snapshot
    return results


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_selector(selector_labels: Mapping[str, str]) -> str:
    """The PromQL instant-vector selector for every raw series :func:`parse_exposition` keeps."""
    names = [*COUNTERS, *GAUGES]
    names += [h + suffix for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")]
    # PromQL regexes are fully anchored RE2; the names hold only [a-z0-9_].
    matchers = [f'__name__=~"(vllm:|ray_vllm_)({"|".join(names)})"']
    matchers += [f'{k}="{_escape_label_value(v)}"' for k, v in sorted(selector_labels.items())]
    return "{" + ", ".join(matchers) + "}"


def query_prometheus(
    base_url: str,
    selector_labels: Mapping[str, str],
    timeout: float = 5.0,
    *,
    timestamp: float | None = None,
) -> Snapshot:
    """The same Snapshot built from Prometheus's HTTP API (``/api/v1/query``, raw series).

    Asking for the raw counters and buckets (not ``rate()``) keeps one derivation path for
    both sources. ``selector_labels`` narrow to one deployment (e.g. ``{"namespace": ns,
    "ray_io_cluster": name}``); the job/instance labels Prometheus adds keep replicas apart.
    """
    params = {"query": prometheus_selector(selector_labels)}
    if timestamp is not None:
        params["time"] = repr(timestamp)
    url = base_url.rstrip("/") + "/api/v1/query"
    body = _get_text(url, timeout, params=params)
    try:
        payload = json.loads(body)
        if payload.get("status") != "success":
            raise ScrapeError(f"{url}: {payload.get('errorType')}: {payload.get('error')}")
        result = payload["data"]["result"]
        builder = _Builder(None)
        eval_time: float | None = None
        for item in result:
            metric = item["metric"]
            ts, raw = item["value"]
            eval_time = float(ts)
            builder.add(metric["__name__"], metric, float(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise ScrapeError(f"{url}: not a Prometheus vector answer: {exc}") from exc
    if builder.empty:
        raise ScrapeError(f"{url}: no vLLM series match {params['query']}")
    when = timestamp if timestamp is not None else eval_time
    return builder.build(time.time() if when is None else when)
