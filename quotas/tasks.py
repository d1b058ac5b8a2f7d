"""Quota tasks: mirror tenants' quotas to Kueue; end temporary quota."""

from __future__ import annotations

import logging

from celery import shared_task

from core.tasks import RETRY
from runtime.backends import cluster_configured

log = logging.getLogger(__name__)


@shared_task(**RETRY)
def sync_kueue_task(tenant_id: int | None = None) -> int:
    """Apply the Namespace, ResourceFlavors, ClusterQueue and LocalQueue of one or all tenants.
    With no cluster configured (the demo) there is nothing to mirror to: a note, not a failure."""
    from quotas.kueue import sync_kueue

    if not cluster_configured():
        log.info("Kueue sync skipped: no Kubernetes cluster is configured (KUBERNETES_URL or KUBECONFIG)")
        return 0
    return sync_kueue(tenant_id=tenant_id)


@shared_task(acks_late=True)
def revert_temporary_quota_task() -> dict[str, int]:
    """Return temporary quota changes that are due to the values they replaced (quotas.temporary);
    a revert that does not fit the reservations yet waits and is tried again next beat."""
    from quotas.temporary import revert_due

    return revert_due()
