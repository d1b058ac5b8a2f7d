"""The scrape cycle: every serving deployment's metrics, concurrently, into derived samples.

Source: Prometheus when PROMETHEUS_URL is set: a fixed set of fleet-wide PromQL queries per
cycle (runtime.exposition.promql), whatever the number of deployments, which Prometheus answers
from its own scrapes. Otherwise the deployments' own endpoints. A
local engine has one (vLLM /metrics or its Ray metrics port). A KubeRay deployment has one per
pod: Ray exports a node's metrics on that node, and the replicas (with their ray_vllm_*
series) run on the worker pods, never on the head (num-gpus 0), while the Serve controller on the
head reports the replicas and the autoscaler's target (ray_serve_*). So each cycle lists the pods
of those deployments, one LIST per namespace, and reads every running pod's metrics port; a
deployment's reads are merged into one snapshot, and all of them must succeed. A failing
endpoint leaves a gap and a recorded error for that deployment only; it never stops the cycle
or produces a number from a partial read.

A cycle is cut into shards of METRICS_SHARD_SIZE deployments (metrics.tasks): parsing is CPU
work under the GIL, so one process tops out at about one core; shards spread it over every
worker process (bench/b3_metrics.py measures both). Each shard writes its samples and scrape
states in two statements.

Both sources read rates and latency quantiles over one rate window (rate_window_s,
runtime.exposition.window): Prometheus in its queries, the direct path from the intervals kept
in each deployment's ScrapeState.history. Every stored point stands for its own cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.observability import SCRAPE_FAILURES
from deployments.models import ModelDeployment
from deployments.states import SCRAPED
from metrics.kv_report import reported
from metrics.models import MetricSample, ScrapeState
from metrics.store import new_sample
from runtime import k8s
from runtime.backends import names as backend_names
from runtime.backends import traits as backend_traits
from runtime.exposition.derive import Interval, MetricPoint
from runtime.exposition.parse import ScrapeError
from runtime.exposition.promql import DEPLOYMENT_LABELS, fleet_points
from runtime.exposition.snapshot import Snapshot
from runtime.exposition.sources import scrape_many
from runtime.exposition.window import advance, rate_window, rescaled
from runtime.manifests.common import LABEL_DEPLOYMENT_ID, LABEL_MANAGED_BY, MANAGED_BY, PORT_METRICS

log = logging.getLogger(__name__)


def rate_window_s() -> float:
    """The seconds every rate and quantile covers, on the charts and in the stored points: from
    the cycle and Prometheus's scrape interval of the engines, or the cycle alone when the portal
    scrapes them itself (it is then the scrape interval)."""
    cycle = float(settings.METRICS_SCRAPE_SECONDS)
    scrape = float(settings.PROMETHEUS_SCRAPE_INTERVAL_SECONDS) if settings.PROMETHEUS_URL else cycle
    return rate_window(cycle, scrape)


def _from_pods(backend: str) -> bool:
    """Whether this backend's metrics are read from its workload's pods (KubeRay) rather than
    from the one metrics URL the reconciler recorded."""
    return backend_traits(backend).metrics_from_pods


def _prometheus_many(deps: list[ModelDeployment], *, at: float | None = None) -> dict[int, MetricPoint | ScrapeError]:
    """Every deployment's point from one fixed set of fleet-wide PromQL queries (runtime.exposition.promql):
    the number of requests to Prometheus does not depend on the number of deployments."""
    window = rate_window_s()
    keys = {dep.pk: (dep.tenant.namespace, dep.served_model_name) for dep in deps}
    try:
        points = fleet_points(
            settings.PROMETHEUS_URL,
            window_s=window,
            at=at,
            timeout=settings.METRICS_SCRAPE_TIMEOUT_SECONDS,
            keys=set(keys.values()),
        )
    except ScrapeError as error:
        return {pk: error for pk in keys}
    labels = ", ".join(DEPLOYMENT_LABELS)
    # One deployment per key: a tenant's live deployments serve distinct model names (the
    # database's unique_served_name_per_tenant), and the namespace is the tenant's.
    return {
        pk: points.get(key) or ScrapeError(f"Prometheus has no vLLM series with ({labels}) = {key}")
        for pk, key in keys.items()
    }


def pod_metrics_url(pod: dict) -> str | None:
    """The metrics URL of a running pod (its container port named "metrics"), else None."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip or meta.get("deletionTimestamp"):
        return None  # not started yet, or on its way out: neither holds a replica's counters
    port = PORT_METRICS
    for container in (pod.get("spec") or {}).get("containers") or []:
        for entry in container.get("ports") or []:
            if entry.get("name") == "metrics" and entry.get("containerPort"):
                port = int(entry["containerPort"])
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}/metrics"


def _ray_pod_targets(deps: list[ModelDeployment]) -> dict[int, list[str] | ScrapeError]:
    """Every running pod's metrics URL per KubeRay deployment; one pod LIST per namespace."""
    from runtime.backends import get_cluster

    if not deps:
        return {}
    out: dict[int, list[str] | ScrapeError] = {}
    by_namespace: dict[str, list[int]] = {}
    for dep in deps:
        by_namespace.setdefault(dep.tenant.namespace, []).append(dep.pk)
    try:
        cluster = get_cluster()
    except Exception as error:  # no cluster configured, an unreadable kubeconfig: this cycle's gap
        return {pk: ScrapeError(f"cannot list the Ray pods: {error}") for pk in (d.pk for d in deps)}
    for namespace, ids in by_namespace.items():
        try:
            pods = cluster.list(k8s.POD, namespace, label_selector={LABEL_MANAGED_BY: MANAGED_BY})
        except k8s.ClusterError as error:
            out.update({pk: ScrapeError(f"cannot list the pods in {namespace}: {error}") for pk in ids})
            continue
        urls: dict[str, list[str]] = {}
        for pod in pods:
            labels = (pod.get("metadata") or {}).get("labels") or {}
            owner, url = labels.get(LABEL_DEPLOYMENT_ID), pod_metrics_url(pod)
            if owner and url:
                urls.setdefault(owner, []).append(url)
        for pk in ids:
            found = sorted(urls.get(str(pk), []))
            out[pk] = found or ScrapeError(f"no running pod of this deployment in {namespace}")
    return out


def _direct_many(deps: list[ModelDeployment]) -> dict[int, Snapshot | ScrapeError]:
    targets: dict[int, str | list[str]] = {d.pk: d.metrics_url for d in deps if not _from_pods(d.backend)}
    results: dict[int, Snapshot | ScrapeError] = {}
    for pk, found in _ray_pod_targets([d for d in deps if _from_pods(d.backend)]).items():
        if isinstance(found, ScrapeError):
            results[pk] = found
        else:
            targets[pk] = found
    results.update(scrape_many(targets, timeout=settings.METRICS_SCRAPE_TIMEOUT_SECONDS))
    return results


def _scraped() -> QuerySet[ModelDeployment]:
    deps = ModelDeployment.objects.filter(state__in=SCRAPED)
    if not settings.PROMETHEUS_URL:
        # Without Prometheus only direct endpoints can be read: a URL, or a Ray cluster's pods.
        pod_backends = [name for name in backend_names() if _from_pods(name)]
        deps = deps.exclude(Q(metrics_url="") & ~Q(backend__in=pod_backends))
    return deps


def scraped_ids() -> list[int]:
    """The deployments one cycle reads, by id, a tenant's together: a shard then spans few
    namespaces, and lists the Ray pods of each once (one tenant, one namespace)."""
    return list(_scraped().order_by("tenant_id", "pk").values_list("pk", flat=True))


def shards(ids: list[int], size: int) -> list[list[int]]:
    """`ids` cut into consecutive runs of at most `size`."""
    return [ids[i : i + size] for i in range(0, len(ids), max(1, size))]


def planned_shards(size: int) -> list[list[int]]:
    """One cycle's shards, the stalest first (never read, then longest since the last attempt).

    When a cycle takes longer than the interval, its last queued shards expire unread. In a
    fixed order those would be the same deployments every cycle, so they would never be read;
    stalest-first makes an overloaded cycle go round the whole fleet instead.
    """
    parts = shards(scraped_ids(), size)
    attempted = dict(
        ScrapeState.objects.filter(deployment_id__in=[pk for part in parts for pk in part]).values_list(
            "deployment_id", "last_attempt"
        )
    )

    def staleness(part: list[int]) -> tuple[bool, float]:
        times = [attempted.get(pk) for pk in part]
        if any(t is None for t in times):
            return (False, 0.0)
        return (True, min(t.timestamp() for t in times))

    return sorted(parts, key=staleness)


def collect(ids: Iterable[int] | None = None, *, at: float | None = None) -> int:
    """Read, derive and store one point per reachable deployment; returns points stored.

    `ids` limits the cycle to those deployments (a shard); None means all of them. A
    deployment that left the scraped states since the shard was planned is skipped. `at` is the
    evaluation time of the Prometheus queries (default now; the direct path reads now anyway).
    """
    deps = _scraped().select_related("tenant")
    if ids is not None:
        deps = deps.filter(pk__in=list(ids))
    deps = list(deps)
    if not deps:
        return 0
    results = _prometheus_many(deps, at=at) if settings.PROMETHEUS_URL else _direct_many(deps)
    window = rate_window_s()
    now = timezone.now()
    previous = {
        row[0]: row[1:]
        for row in ScrapeState.objects.filter(deployment_id__in=[d.pk for d in deps]).values_list(
            "deployment_id", "snapshot", "history", "last_success", "kv_cache"
        )
    }
    samples, states = [], []
    for dep in deps:
        snapshot, history, last_success, kv_cache = previous.get(dep.pk) or ({}, [], None, [])
        state = ScrapeState(
            deployment_id=dep.pk, last_attempt=now, snapshot=snapshot or {}, history=history or [], kv_cache=kv_cache
        )
        result = results.get(dep.pk)
        if isinstance(result, MetricPoint):
            # Prometheus: the point stands for the time since this deployment's last point.
            since = (now - last_success).total_seconds() if last_success else settings.METRICS_SCRAPE_SECONDS
            samples.append(new_sample(dep.pk, rescaled(result, since, window)))
            state.last_success = now
        elif isinstance(result, Snapshot):
            prev = Snapshot.from_dict(state.snapshot) if state.snapshot else None
            kept = [Interval.from_dict(part) for part in state.history]
            # Without a previous snapshot only gauges are known; rates start next cycle.
            point, kept = advance(kept, prev, result, window_s=window)
            if point is not None:
                samples.append(new_sample(dep.pk, point))
            state.snapshot, state.last_success = result.to_dict(), now
            state.history = [part.to_dict() for part in kept]
            # What the engines state now: an engine that restarted with another cache replaces its
            # old figure, and one that has not allocated its cache yet leaves none.
            state.kv_cache = reported(result)
        else:
            state.last_error = str(result or "no result")[:1000]
            SCRAPE_FAILURES.inc()
            log.info("metrics scrape of deployment %s failed: %s", dep.pk, state.last_error)
        states.append(state)
    # last_success is only written by a success: a failure keeps the time of the last good read.
    ok = [s for s in states if s.last_success is not None]
    failed = [s for s in states if s.last_success is None]
    with transaction.atomic():
        if samples:
            MetricSample.objects.bulk_create(samples)
        _upsert(ok, ["snapshot", "history", "last_success", "last_error", "last_attempt", "kv_cache"])
        _upsert(failed, ["last_error", "last_attempt"])
    return len(samples)


def _upsert(states: list[ScrapeState], fields: list[str]) -> None:
    if states:
        ScrapeState.objects.bulk_create(
            states, update_conflicts=True, unique_fields=["deployment"], update_fields=fields
        )


def collect_all() -> int:
    """One whole cycle in this process (tests, the demo's single worker, small fleets)."""
    return collect(None)
