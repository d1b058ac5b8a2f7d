"""Access tasks: publish a minted key, withdraw a revoked or expired one. Thin and repeatable."""

from __future__ import annotations

import logging

from celery import shared_task

from core.tasks import RETRY

log = logging.getLogger(__name__)


@shared_task(**RETRY)
def publish_key_task(key_id: int, sealed: str) -> str | None:
    """Write the key's Secret and local file; retried on cluster errors. A key revoked meanwhile
    is withdrawn instead, so a late publish never brings it back."""
    from access.keystore import publish, refresh_local_engines, unseal, withdraw
    from access.models import ApiKey

    key = ApiKey.objects.select_related("tenant").filter(pk=key_id).first()
    if key is None:
        return None
    plaintext = unseal(sealed)
    if plaintext is None or key.status != "active":
        withdraw(key)
        ApiKey.objects.filter(pk=key_id).update(gateway_state="withdrawn" if key.status != "active" else "failed")
        return "not-published"
    state = publish(key, plaintext)
    live = ApiKey.objects.filter(pk=key_id, revoked_at__isnull=True).exclude(
        gateway_state__in=("withdrawn", "expiring")
    )
    if not live.update(gateway_state=state):
        withdraw(key)  # revoked (or expired) while we published
    refresh_local_engines(key)
    return state


@shared_task(**RETRY)
def withdraw_key_task(key_id: int) -> str | None:
    """Delete the key's Secret and local file, and hand its running local engines the key set
    without it (they refuse it from the next request on; no restart)."""
    from access.keystore import refresh_local_engines, withdraw
    from access.models import ApiKey

    key = ApiKey.objects.select_related("tenant").filter(pk=key_id).first()
    if key is None:
        return None
    withdraw(key)
    ApiKey.objects.filter(pk=key_id).update(gateway_state="withdrawn")
    refresh_local_engines(key)
    return "withdrawn"


@shared_task(acks_late=True)
def expire_keys_task() -> list[int]:
    """Every minute (beat): withdraw keys past their expiry, and revoke those whose maker may no
    longer mint them (a change that reached no signal, such as a bulk update)."""
    from access.services import keys_expire, keys_revoke_unentitled

    return keys_expire() + keys_revoke_unentitled()


@shared_task(acks_late=True)
def count_key_usage_task() -> int:
    """Count what the local gateway logged since the last run (access.key_usage) and what the
    cluster Gateway's counters grew by (access.gateway_usage) into the per-key usage rows; each
    has nothing to do where its gateway does not run."""
    from access.gateway_usage import count_gateway_metrics
    from access.key_usage import count_gateway_log
    from runtime.exposition.parse import ScrapeError

    counted = count_gateway_log()
    try:
        counted += count_gateway_metrics() or 0
    except ScrapeError as error:  # Prometheus away: the counters are read whole on the next run
        log.warning("per-key usage from the Gateway not read: %s", error)
    return counted


@shared_task(acks_late=True)
def apply_tenant_endpoints_task() -> dict:
    """Every tenant's endpoint on the Gateway (access.tenant_endpoint)."""
    from access.tenant_endpoint import apply_tenant_endpoints

    return apply_tenant_endpoints()
