"""Deployment tasks: thin, idempotent, take ids, reload rows, return early when the work is gone."""

from __future__ import annotations

from celery import shared_task

from core.tasks import RETRY


@shared_task(**RETRY)
def reconcile_deployment_task(deployment_id: int) -> str | None:
    """Converge one deployment with its backend. Safe to run any number of times."""
    from core.observability import RECONCILES
    from deployments.models import ModelDeployment
    from deployments.reconcile import reconcile

    dep = ModelDeployment.objects.filter(pk=deployment_id).select_related("tenant", "flavor").first()
    if dep is None:
        return None
    result = reconcile(dep)
    RECONCILES.labels(dep.backend, result).inc()
    return result


@shared_task(acks_late=True)
def sweep_task() -> dict:
    """List cluster objects once per namespace and re-enqueue deployments that drifted."""
    from deployments.reconcile import sweep

    return sweep()
