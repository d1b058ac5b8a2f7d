"""The scrape cycle: every serving deployment's metrics, concurrently, into derived samples.

Source: the deployment's own endpoint (Ray metrics port / vLLM /metrics), or Prometheus when
PROMETHEUS_URL is set. A failing endpoint leaves a gap and a recorded error for that
deployment only; it never stops the cycle or produces a number from a partial read.

A cycle is cut into shards of METRICS_SHARD_SIZE deployments (runtime.tasks): parsing is CPU
work under the GIL, so one process tops out at about one core; shards spread it over every
worker process (bench/b3_metrics.py measures both). Each shard writes its samples and scrape
states in two statements.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from deployments.choices import State
from deployments.models import MetricSample, ModelDeployment, ScrapeState
from deployments.series import new_sample
from portal.observability import SCRAPE_FAILURES
from runtime.metrics import ScrapeError, Snapshot, derive, query_prometheus, scrape_many

log = logging.getLogger(__name__)
SCRAPED_STATES = (State.READY, State.DEGRADED, State.PROVISIONING)


def _prometheus_many(deps: list[ModelDeployment]) -> dict[int, Snapshot | ScrapeError]:
    def one(dep):
        try:
            return dep.pk, query_prometheus(settings.PROMETHEUS_URL, {"namespace": dep.tenant.namespace,
                                                                      "model_name": dep.served_model_name},
                                            timeout=settings.METRICS_SCRAPE_TIMEOUT_SECONDS)
        except ScrapeError as error:
            return dep.pk, error

    with ThreadPoolExecutor(max_workers=16) as pool:
        return dict(pool.map(one, deps))


def _scraped() -> QuerySet[ModelDeployment]:
    deps = ModelDeployment.objects.filter(state__in=SCRAPED_STATES)
    if not settings.PROMETHEUS_URL:
        deps = deps.exclude(metrics_url="")  # without Prometheus only direct endpoints can be read
    return deps


def scraped_ids() -> list[int]:
    """The deployments one cycle reads, by id."""
    return list(_scraped().order_by("pk").values_list("pk", flat=True))


def shards(ids: list[int], size: int) -> list[list[int]]:
    """`ids` cut into consecutive runs of at most `size`."""
    return [ids[i : i + size] for i in range(0, len(ids), max(1, size))]


def collect(ids: Iterable[int] | None = None) -> int:
    """Scrape, derive and store one point per reachable deployment; returns points stored.

    `ids` limits the cycle to those deployments (a shard); None means all of them. A
    deployment that left the scraped states since the shard was planned is skipped.
    """
    deps = _scraped().select_related("tenant")
    if ids is not None:
        deps = deps.filter(pk__in=list(ids))
    deps = list(deps)
    if not deps:
        return 0
    if settings.PROMETHEUS_URL:
        results = _prometheus_many(deps)
    else:
        results = scrape_many({d.pk: d.metrics_url for d in deps}, timeout=settings.METRICS_SCRAPE_TIMEOUT_SECONDS)
    now = timezone.now()
    previous = dict(ScrapeState.objects.filter(deployment_id__in=[d.pk for d in deps])
                    .values_list("deployment_id", "snapshot"))
    samples, states = [], []
    for dep in deps:
        state = ScrapeState(deployment_id=dep.pk, last_attempt=now, snapshot=previous.get(dep.pk) or {})
        result = results.get(dep.pk)
        if isinstance(result, Snapshot):
            prev = Snapshot.from_dict(state.snapshot) if state.snapshot else None
            if prev is None or result.timestamp > prev.timestamp:
                # Without a previous snapshot only gauges are known; rates start next cycle.
                samples.append(new_sample(dep.pk, derive(prev, result)))
            state.snapshot, state.last_success = result.to_dict(), now
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
        _upsert(ok, ["snapshot", "last_success", "last_error", "last_attempt"])
        _upsert(failed, ["last_error", "last_attempt"])
    return len(samples)


def _upsert(states: list[ScrapeState], fields: list[str]) -> None:
    if states:
        ScrapeState.objects.bulk_create(states, update_conflicts=True, unique_fields=["deployment"],
                                        update_fields=fields)


def collect_all() -> int:
    """One whole cycle in this process (tests, the demo's single worker, small fleets)."""
    return collect(None)
