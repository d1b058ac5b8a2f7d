"""Deployment tasks: thin, idempotent, take ids, reload rows, return early when the work is gone."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from core.tasks import RETRY

log = logging.getLogger(__name__)

REQUEUE_KEY = "reconcile-requeue:{}"


@shared_task(**RETRY)
def reconcile_deployment_task(deployment_id: int) -> str | None:
    """Converge one deployment with its backend, then schedule what the result asks for. Safe
    to run any number of times."""
    from core.observability import RECONCILES
    from deployments.models import ModelDeployment
    from deployments.reconcile import reconcile

    dep = ModelDeployment.objects.filter(pk=deployment_id).select_related("tenant", "flavor").first()
    if dep is None:
        return None
    result = reconcile(dep)
    RECONCILES.labels(dep.backend, result.outcome).inc()
    if result.requeue_after is not None:
        requeue(deployment_id, result.requeue_after)
    return result.outcome


def requeue(deployment_id: int, seconds: float | None = None) -> bool:
    """Check back in `seconds` (default RECONCILE_REQUEUE_SECONDS), at most one pending follow-up
    per deployment: a reconcile that runs meanwhile asks again if it still needs to."""
    delay = seconds if seconds is not None else settings.RECONCILE_REQUEUE_SECONDS
    if not cache.add(REQUEUE_KEY.format(deployment_id), 1, timeout=max(1, int(delay))):
        return False
    reconcile_deployment_task.apply_async((deployment_id,), countdown=delay)
    return True


@shared_task(acks_late=True)
def sweep_task() -> dict:
    """List cluster objects once per namespace and re-enqueue deployments that drifted. A backend
    the cluster does not serve is skipped inside (deployments.sweep); a cluster that cannot be
    read at all is one warning per beat, and the next beat reads again."""
    from deployments.sweep import sweep
    from runtime.k8s import ClusterError

    try:
        return sweep()
    except ClusterError as error:
        log.warning("sweep: the cluster could not be read: %s", error)
        return {"errors": [str(error)]}
