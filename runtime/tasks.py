"""Celery tasks: thin, idempotent, take ids, reload rows, return early when the work is gone."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import InterfaceError, OperationalError

from runtime.k8s import TransientClusterError

log = logging.getLogger(__name__)

# Retried: cluster hiccups and database blips (a dropped connection, a locked SQLite file in the
# demo). Everything else is a bug or a permanent refusal and is recorded, not retried.
RETRY = dict(
    acks_late=True,
    autoretry_for=(TransientClusterError, OperationalError, InterfaceError),
    retry_backoff=2,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=8,
)


@shared_task(**RETRY)
def reconcile_deployment_task(deployment_id: int) -> str | None:
    """Converge one deployment with its backend. Safe to run any number of times."""
    from deployments.models import ModelDeployment
    from portal.observability import RECONCILES
    from runtime.reconcile import reconcile

    dep = ModelDeployment.objects.filter(pk=deployment_id).select_related("tenant", "flavor").first()
    if dep is None:
        return None
    result = reconcile(dep)
    RECONCILES.labels(dep.backend, result).inc()
    return result


@shared_task(**RETRY)
def sync_kueue_task(tenant_id: int | None = None) -> int:
    """Apply the Namespace, ResourceFlavors, ClusterQueue and LocalQueue of one or all tenants."""
    from runtime.kueue import sync_kueue

    return sync_kueue(tenant_id=tenant_id)


@shared_task(acks_late=True)
def sweep_task() -> dict:
    """List cluster objects once per namespace and re-enqueue deployments that drifted."""
    from runtime.reconcile import sweep

    return sweep()


@shared_task(acks_late=True)
def scrape_metrics_task() -> int:
    """One scrape cycle: cut into shards, the first done here, the others by any worker process.

    Parsing expositions is CPU-bound under the GIL, so one process reads at most one core's
    worth; shards let every worker process (and every worker pod) share a big fleet. A shard
    not started within one scrape interval expires, so an overloaded fleet never piles up
    cycles; the next cycle starts with the stalest shards (planned_shards), and rates span
    whatever time passed since each deployment's last snapshot.
    """
    from django.conf import settings

    from runtime.collect import collect, planned_shards

    parts = planned_shards(settings.METRICS_SHARD_SIZE)
    for part in parts[1:]:
        scrape_metrics_shard_task.apply_async((part,), expires=settings.METRICS_SCRAPE_SECONDS)
    return collect(parts[0]) if parts else 0


@shared_task(acks_late=True)
def scrape_metrics_shard_task(deployment_ids: list[int]) -> int:
    """Scrape and store one shard of a cycle (see scrape_metrics_task)."""
    from runtime.collect import collect

    return collect(deployment_ids)
