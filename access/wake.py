"""The portal's side of the activator (issue 35): which API key may wake which deployment.

The activator (runtime.gateway_local; on a cluster, what a stopped deployment's route points at)
calls `POST /api/v1/gateway/wake/<deployment>` with the client's own key. The key decides, as it
does on the endpoint itself: a key of the deployment's tenant (tenant-wide, or minted for that
deployment), or a tenant-wide key of a tenant subscribed to it (sharing). What waking does is
deployments.wake's one decision; an unknown key, a revoked one and one that may not use the
deployment all look the same to the caller (nothing about other tenants' deployments leaks).
"""

from __future__ import annotations

from access.models import ApiKey
from access.services import key_lookup
from deployments.models import ModelDeployment
from deployments.wake import Wake, deployment_wake
from sharing.models import Subscription


def key_may_wake(key: ApiKey, deployment_id: int) -> bool:
    dep = ModelDeployment.objects.filter(pk=deployment_id).values_list("tenant_id", flat=True).first()
    if dep is None:
        return False
    if dep == key.tenant_id:
        return key.deployment_id in (None, deployment_id)
    subscribed = Subscription.objects.active().filter(publication__deployment_id=deployment_id)
    return key.deployment_id is None and subscribed.filter(consumer_id=key.tenant_id).exists()


def wake_for_key(plaintext: str, deployment_id: int) -> tuple[ApiKey | None, Wake | None, int]:
    """(the key, what the wake did, the deployment's tenant's wait in seconds); (None, None, 0) for a
    key that may not wake it; (key, None, 0) for a deployment it cannot see."""
    key = key_lookup(plaintext) if plaintext else None
    if key is None:
        return None, None, 0
    if not key_may_wake(key, deployment_id):
        return key, None, 0
    wake = deployment_wake(deployment_id=deployment_id, key_id=key.pk, key_name=key.name)
    timeout = ModelDeployment.objects.filter(pk=deployment_id).values_list("tenant__wake_timeout_seconds", flat=True)
    return key, wake, timeout.first() or 0
