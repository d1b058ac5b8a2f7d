"""Filtering an exposition to the families the portal reads, and parsing it into a Snapshot."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from runtime.exposition.cacheinfo import engine_key, tokens_from_labels
from runtime.exposition.snapshot import (
    CACHE_INFO,
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    PREFIXES,
    SERVE_GAUGES,
    HistogramSeries,
    SeriesKey,
    Snapshot,
    add_to,
    parse_le,
)


class ScrapeError(Exception):
    """A metrics source could not be read: timeout, HTTP error, or no vLLM metrics in it."""


# --------------------------------------------------------------------------------------
# Filtering and name normalisation
# --------------------------------------------------------------------------------------


def _accepted_names() -> frozenset[str]:
    """Every raw sample / family name worth parsing, in both dialects."""
    names: set[str] = set()
    for prefix in PREFIXES:
        for name in (*COUNTERS, *GAUGES, CACHE_INFO):
            names.add(prefix + name)
        for name in HISTOGRAMS:
            names.update(prefix + name + s for s in ("", "_bucket", "_sum", "_count"))
    return frozenset(names | set(SERVE_GAUGES))


_ACCEPTED = _accepted_names()
_SAMPLE_NAME = re.compile(r"[^{\s]+")
_LINE_STARTS = ("#", *PREFIXES, *SERVE_GAUGES)
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
    """``vllm:x`` / ``ray_vllm_x`` → ``x``; Ray Serve's gauges keep their names; None for anything else."""
    if sample_name in SERVE_GAUGES:
        return sample_name
    for prefix in PREFIXES:
        if sample_name.startswith(prefix):
            return sample_name[len(prefix) :]
    return None


class SnapshotBuilder:
    """Collects raw samples (from either source) into a :class:`Snapshot`."""

    def __init__(self, match_labels: Mapping[str, str] | None) -> None:
        self.match = dict(match_labels or {})
        self.counters: dict[str, dict[SeriesKey, float]] = {}
        self.gauges: dict[str, dict[SeriesKey, float]] = {}
        self.buckets: dict[str, dict[SeriesKey, dict[float, float]]] = {}
        self.sums: dict[str, dict[SeriesKey, float]] = {}
        self.counts: dict[str, dict[SeriesKey, float]] = {}
        self.kv_cache_tokens: dict[SeriesKey, int] = {}

    def add(self, sample_name: str, labels: Mapping[str, str], value: float) -> None:
        name = _normalise(sample_name)
        if name is None or any(labels.get(k) != v for k, v in self.match.items()):
            return
        le = labels.get("le")
        key = tuple(sorted((k, v) for k, v in labels.items() if k not in ("le", "__name__")))
        # Two samples with one key can only come from mixing both dialects; adding keeps
        # the deployment total right either way.
        if name == CACHE_INFO:
            tokens = tokens_from_labels(labels)
            if tokens is not None:
                self.kv_cache_tokens[engine_key(labels)] = tokens
        elif name in COUNTERS:
            add_to(self.counters.setdefault(name, {}), key, value)
        elif name in GAUGES or name in SERVE_GAUGES:
            add_to(self.gauges.setdefault(name, {}), key, value)
        elif name.endswith("_bucket") and name[:-7] in HISTOGRAMS and le is not None:
            add_to(self.buckets.setdefault(name[:-7], {}).setdefault(key, {}), parse_le(le), value)
        elif name.endswith("_sum") and name[:-4] in HISTOGRAMS:
            add_to(self.sums.setdefault(name[:-4], {}), key, value)
        elif name.endswith("_count") and name[:-6] in HISTOGRAMS:
            add_to(self.counts.setdefault(name[:-6], {}), key, value)

    @property
    def empty(self) -> bool:
        """Whether no vLLM series was added (Ray Serve's replica gauges alone do not count)."""
        return not (self.counters or set(self.gauges) - set(SERVE_GAUGES) or self.buckets)

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
        return Snapshot(timestamp, self.counters, self.gauges, histograms, self.kv_cache_tokens)


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
    builder = SnapshotBuilder(match_labels)
    try:
        for family in text_string_to_metric_families(filter_exposition(text)):
            for sample in family.samples:
                builder.add(sample.name, sample.labels, sample.value)
    except ValueError as exc:  # prometheus_client reports every syntax error as ValueError
        raise ScrapeError(f"unparseable exposition: {exc}") from exc
    if builder.empty and require_vllm:
        raise ScrapeError("no vllm:* or ray_vllm_* metrics in the exposition")
    return builder.build(time.time() if timestamp is None else timestamp)
