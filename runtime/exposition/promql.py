"""The whole fleet's metric points from Prometheus: a fixed set of PromQL queries per cycle.

Each query covers every deployment at once, grouped by the labels that identify one
(``DEPLOYMENT_LABELS``: the pod's ``namespace``, which Prometheus's Kubernetes discovery
attaches, and vLLM's own ``model_name``); so a cycle costs :data:`QUERY_COUNT` HTTP requests
whatever the size of the fleet. Prometheus does the maths the portal's direct scrape does in
:mod:`runtime.exposition.derive`:

* counters: ``sum by (…) (rate(x[W]))`` — per-series rates summed, resets handled by rate();
* histograms: ``histogram_quantile(q, sum by (…, le) (rate(x_bucket[W])))`` for p50 and p95;
* gauges: ``sum`` (requests running / waiting, waiting by reason) or ``avg`` (KV-cache use, a
  0-1 ratio per engine).

The window W is the rate window of runtime.exposition.window, the direct path's too.

Both dialects (``vllm:x`` and Ray's ``ray_vllm_x``) are matched by one ``__name__`` regex, so a
family is one query whichever way it is exported.

When the direct path and Prometheus agree: rate() divides the increase between the first and
the last sample in the window by their distance and extrapolates it to the window's edges. For
a target scraped steadily through the whole window (gaps at the edges under 1.1 scrape
intervals) the extrapolation cancels and rate() is exactly (last - first) / (t_last - t_first):
the direct path's figure for those two expositions (tests/metrics/test_prometheus.py checks
this against a real Prometheus). Prometheus stops the extrapolation at zero for a counter that
starts inside the window, so the first window of a fresh engine reads a little lower; and a
deployment spread over several targets sums per-target rates over each target's own samples.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from runtime.exposition.derive import NORMAL_FINISH_REASONS, QUANTILE_FAMILIES, MetricPoint
from runtime.exposition.parse import ScrapeError
from runtime.exposition.snapshot import ADMISSION_REASONS, SERVE_GAUGES, SERVE_LLM_DEPLOYMENT, WAITING_REASONS
from runtime.exposition.sources import get_text

DEPLOYMENT_LABELS = ("namespace", "model_name")
DeploymentKey = tuple[str, ...]  # values of DEPLOYMENT_LABELS, in that order

# (MetricPoint field, family) for the counters read as rates. request_success_total is read
# by finished_reason (one query) and split into finished and failed.
RATE_FIELDS = (
    ("prompt_tokens_per_s", "prompt_tokens_total"),
    ("generation_tokens_per_s", "generation_tokens_total"),
    ("preemptions_per_s", "num_preemptions_total"),
    ("prefix_cache_hits", "prefix_cache_hits_total"),
    ("prefix_cache_queries", "prefix_cache_queries_total"),
)
QUANTILE_FIELDS = QUANTILE_FAMILIES  # (MetricPoint prefix, histogram family), as derived directly
QUANTILES = (0.5, 0.95)
# Rejections per second by reason (vllm:admission_rejections_total{reason}): field per reason.
REJECTION_FIELDS = {
    "max_num_queued_reqs": "rejected_queued_reqs_per_s",
    "max_num_queued_tokens": "rejected_queued_tokens_per_s",
}
assert set(REJECTION_FIELDS) == set(ADMISSION_REASONS)
GAUGE_NAMES = ("num_requests_running", "num_requests_waiting", "num_requests_waiting_by_reason")


def _names(*families: str) -> str:
    """``{__name__=~"vllm:a|ray_vllm_a|…"}``: every dialect of `families` in one selector."""
    alternatives = "|".join(f"{prefix}{name}" for name in families for prefix in ("vllm:", "ray_vllm_"))
    return f'{{__name__=~"{alternatives}"}}'


def _by(*extra: str) -> str:
    return "by (" + ", ".join((*DEPLOYMENT_LABELS, *extra)) + ")"


@dataclass(frozen=True)
class Query:
    """One PromQL query of the cycle and what its answer fills in."""

    name: str  # a MetricPoint field, or a group handled by fleet_points
    promql: str


def cycle_queries(window_s: float) -> tuple[Query, ...]:
    """The cycle's queries for a rate window of `window_s` seconds (a fixed set, fleet-wide)."""
    w = f"{max(1, round(window_s * 1000))}ms"
    queries = [Query(field, f"sum {_by()} (rate({_names(family)}[{w}]))") for field, family in RATE_FIELDS]
    queries.append(Query("requests", f"sum {_by('finished_reason')} (rate({_names('request_success_total')}[{w}]))"))
    queries.append(Query("rejections", f"sum {_by('reason')} (rate({_names('admission_rejections_total')}[{w}]))"))
    queries.append(Query("requests_gauges", f"sum {_by('__name__', 'reason')} ({_names(*GAUGE_NAMES)})"))
    queries.append(Query("kv_cache_pct", f"avg {_by()} ({_names('kv_cache_usage_perc')})"))
    # Ray Serve's replica gauges carry the Serve deployment ("LLMServer:<model id>"), not
    # model_name: label_replace gives them the model_name the other answers are keyed by.
    serve = f'{{__name__=~"{"|".join(SERVE_GAUGES)}", deployment=~"{SERVE_LLM_DEPLOYMENT}.+"}}'
    queries.append(
        Query(
            "replicas",
            f"label_replace(sum by (namespace, deployment, __name__) ({serve}), "
            f'"model_name", "$1", "deployment", "{SERVE_LLM_DEPLOYMENT}(.+)")',
        )
    )
    for short, family in QUANTILE_FIELDS:
        buckets = f"sum {_by('le')} (rate({_names(family + '_bucket')}[{w}]))"
        # Both quantiles in one answer: label_replace tells them apart (and keeps `or` from
        # dropping the second, whose labels would otherwise equal the first's).
        parts = [f'label_replace(histogram_quantile({q}, {buckets}), "quantile", "{q}", "", "")' for q in QUANTILES]
        queries.append(Query(short, " or ".join(parts)))
    return tuple(queries)


QUERY_COUNT = len(cycle_queries(60))


def instant_query(base_url: str, promql: str, *, at: float, timeout: float) -> list[dict]:
    """The result vector of one instant query at unix time `at` (``/api/v1/query``)."""
    url = base_url.rstrip("/") + "/api/v1/query"
    body = get_text(url, timeout, params={"query": promql, "time": f"{at:.3f}"})
    try:
        payload = json.loads(body)
        if payload.get("status") != "success":
            raise ScrapeError(f"{url}: {payload.get('errorType')}: {payload.get('error')}")
        if payload["data"]["resultType"] != "vector":
            raise ScrapeError(f"{url}: expected a vector, got {payload['data']['resultType']}")
        return list(payload["data"]["result"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ScrapeError(f"{url}: not a Prometheus vector answer: {exc}") from exc


def _value(item: dict) -> float | None:
    raw = float(item["value"][1])
    return None if math.isnan(raw) or math.isinf(raw) else raw


def _key(metric: dict) -> DeploymentKey:
    return tuple(metric.get(label, "") for label in DEPLOYMENT_LABELS)


def fleet_points(
    base_url: str,
    *,
    window_s: float,
    at: float | None = None,
    timeout: float = 5.0,
    keys: Iterable[DeploymentKey] | None = None,
) -> dict[DeploymentKey, MetricPoint]:
    """One :class:`MetricPoint` per deployment Prometheus knows, at `at` (default: now).

    Rates cover the `window_s` seconds before `at`; ratio parts (prefix-cache hits and lookups,
    finished and failed requests) are stored as increments, rate × window. `keys` limits the
    answer to those deployments (the query itself is the same for any fleet). Raises
    :class:`ScrapeError` when Prometheus cannot be read: the whole cycle then has a gap.
    """
    at = time.time() if at is None else at
    wanted = None if keys is None else set(keys)
    values: dict[DeploymentKey, dict[str, float | None]] = {}

    def put(key: DeploymentKey, name: str, value: float | None) -> None:
        if wanted is None or key in wanted:
            values.setdefault(key, {})[name] = value

    queries = cycle_queries(window_s)
    # Independent queries, sent side by side: the cycle waits for the slowest, not for the sum.
    with ThreadPoolExecutor(max_workers=len(queries), thread_name_prefix="promql") as pool:
        answers = list(pool.map(lambda q: instant_query(base_url, q.promql, at=at, timeout=timeout), queries))
    for query, answer in zip(queries, answers, strict=True):
        for item in answer:
            metric, value = item.get("metric") or {}, _value(item)
            key = _key(metric)
            if wanted is not None and key not in wanted:
                continue
            row = values.setdefault(key, {})
            if query.name == "requests":
                failed = metric.get("finished_reason") not in NORMAL_FINISH_REASONS
                row["requests_per_s"] = (row.get("requests_per_s") or 0.0) + (value or 0.0)
                row["errors_per_s"] = (row.get("errors_per_s") or 0.0) + (value or 0.0 if failed else 0.0)
            elif query.name == "rejections":
                name = REJECTION_FIELDS.get(metric.get("reason", ""))
                if name is not None:  # a reason this portal does not know yet: left out
                    row[name] = (row.get(name) or 0.0) + (value or 0.0)
            elif query.name == "requests_gauges":
                row[_gauge_field(metric)] = value
            elif query.name == "replicas":
                target = metric.get("__name__", "").endswith("target_replicas")
                row["replicas_target" if target else "replicas_running"] = value
            elif query.name == "kv_cache_pct":
                row["kv_cache_pct"] = None if value is None else value * 100.0
            elif query.name in QUANTILE_NAMES:
                row[f"{query.name}_p{round(float(metric.get('quantile', 'nan')) * 100)}"] = value
            else:
                row[query.name] = value
    return {key: _point(row, at, window_s) for key, row in values.items()}


QUANTILE_NAMES = frozenset(short for short, _ in QUANTILE_FIELDS)


def _gauge_field(metric: dict) -> str:
    """The MetricPoint field of one answer of the gauges query (by family and reason)."""
    name = metric.get("__name__", "")
    if name.endswith("waiting_by_reason"):
        reason = metric.get("reason", "")
        return f"waiting_{reason}" if reason in WAITING_REASONS else "waiting_other"
    return "waiting" if name.endswith("waiting") else "running"


COUNTED = (*(name for name, _ in RATE_FIELDS), "requests_per_s", "errors_per_s", *REJECTION_FIELDS.values())


def _point(row: dict[str, float | None], at: float, window_s: float) -> MetricPoint:
    if any(name in row for name in COUNTED):
        # A counter without a series counts as zero once the deployment has rates at all, as
        # on the direct path: Ray only exports a counter after its first increment.
        for name in COUNTED:
            row.setdefault(name, 0.0)
    if row.get("waiting") is not None:
        # A reason without a series (Ray: none before the first set) is none waiting for it, as
        # on the direct path, once the engine reports waiting by reason at all.
        if any(f"waiting_{reason}" in row for reason in WAITING_REASONS):
            for reason in WAITING_REASONS:
                row.setdefault(f"waiting_{reason}", 0.0)
    rates = {name: row.get(name) for name in ("requests_per_s", "errors_per_s")}
    # The ratio parts as increments over the window, so that sums of them divide correctly.
    increments = {
        "prefix_cache_hits": row.get("prefix_cache_hits"),
        "prefix_cache_queries": row.get("prefix_cache_queries"),
        "requests_finished": rates["requests_per_s"],
        "requests_failed": rates["errors_per_s"],
    }
    increments = {k: None if v is None else v * window_s for k, v in increments.items()}
    fields = {
        name: row.get(name)
        for name in (
            "prompt_tokens_per_s",
            "generation_tokens_per_s",
            "preemptions_per_s",
            "kv_cache_pct",
            "running",
            "waiting",
            "replicas_running",
            "replicas_target",
            *(f"waiting_{reason}" for reason in WAITING_REASONS),
            *REJECTION_FIELDS.values(),
            *(f"{short}_p{round(q * 100)}" for short, _ in QUANTILE_FIELDS for q in QUANTILES),
        )
    }
    return MetricPoint(timestamp=at, interval_s=window_s, **rates, **increments, **fields)
