"""Quota tasks: mirror tenants' quotas to Kueue."""

from __future__ import annotations

from celery import shared_task

from core.tasks import RETRY


@shared_task(**RETRY)
def sync_kueue_task(tenant_id: int | None = None) -> int:
    """Apply the Namespace, ResourceFlavors, ClusterQueue and LocalQueue of one or all tenants."""
    from quotas.kueue import sync_kueue

    return sync_kueue(tenant_id=tenant_id)
