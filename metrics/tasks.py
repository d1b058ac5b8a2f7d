"""Metrics tasks: the scrape cycle (sharded across worker processes) and the rollups."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True)
def scrape_metrics_task() -> int:
    """One scrape cycle: cut into shards, the first done here, the others by any worker process.

    Parsing expositions is CPU-bound under the GIL, so one process reads at most one core's
    worth; shards let every worker process (and every worker pod) share a big fleet. A shard
    not started within one scrape interval expires, so an overloaded fleet never piles up
    cycles; the next cycle starts with the stalest shards (planned_shards), and rates span the
    rate window, or whatever longer time passed since each deployment's last snapshot. With Prometheus the cycle is
    a fixed set of fleet-wide queries and one bulk write, done here in one go.
    """
    from django.conf import settings

    from metrics.collect import collect, planned_shards

    if settings.PROMETHEUS_URL:
        return collect(None)  # a fixed set of fleet-wide queries: nothing to shard
    parts = planned_shards(settings.METRICS_SHARD_SIZE)
    for part in parts[1:]:
        scrape_metrics_shard_task.apply_async((part,), expires=settings.METRICS_SCRAPE_SECONDS)
    return collect(parts[0]) if parts else 0


@shared_task(acks_late=True)
def scrape_metrics_shard_task(deployment_ids: list[int]) -> int:
    """Scrape and store one shard of a cycle (see scrape_metrics_task)."""
    from metrics.collect import collect

    return collect(deployment_ids)


@shared_task(acks_late=True)
def downsample_metrics_task() -> dict:
    """Roll raw samples up and enforce retention (keeps the samples table bounded)."""
    from metrics.store import downsample

    return downsample()
