"""Usage per API key (issue 34): the local gateway logs every answered request with the key that
made it and the tokens the engine reported (runtime.gateway_local.usage); this counts that log
into one row per key, deployment and local day (KeyUsageDay) and moves each key's `last_used`.

The log is read from the cursor on: the time of the last record counted, kept in the database
(UsageLogCursor) and moved in the same transaction as the counts, under a row lock, so a record is
counted once however many workers run the task and wherever one of them stops. The log is the
gateway's, written from the portal's own routing file, but a record is still checked against the
database before it counts: its deployment must exist in the tenant it names, and its key must be
that tenant's and, if scoped, to that deployment; or, for a shared model, a tenant-wide key of the
consumer it names, which has (or had) a subscription to it. Anything else is skipped.

On the cluster the same rows are counted from the Gateway's metrics (access.gateway_usage), by the
same trust rule (`trusted`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from access.models import ApiKey, KeyUsageDay, UsageLogCursor
from deployments.models import ModelDeployment
from runtime.backends.local.gateway import GATEWAY_DIR
from runtime.gateway_local.usage import USAGE_FILE, UsageRecord, read_usage
from sharing.models import Subscription

LOCAL_GATEWAY = "local-gateway"
FAILED_STATUS = 400


def gateway_log() -> Path:
    """Where the local gateway writes its usage log (runtime.backends.local.gateway)."""
    return Path(settings.LOCAL_RUNTIME_DIR) / GATEWAY_DIR / USAGE_FILE


def _day(ts: float) -> date:
    return timezone.localdate(datetime.fromtimestamp(ts, tz=UTC))


def _well_formed(record: UsageRecord) -> bool:
    """Whether each field has its type (the log is the gateway's; a line someone edited is skipped,
    not a task that fails on it for ever)."""

    def count(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    return (
        isinstance(record.ts, (int, float))
        and not isinstance(record.ts, bool)
        and (record.key_id is None or count(record.key_id))
        and count(record.deployment_id)
        and isinstance(record.tenant, str)
        and isinstance(record.consumer, str)
        and count(record.prompt_tokens)
        and count(record.completion_tokens)
        and count(record.status)
    )


def trusted(records: list[UsageRecord]) -> tuple[list[UsageRecord], dict[int, int]]:
    """The records whose deployment, tenant and key agree with the database, and the tenant id of
    each of their deployments."""
    found = ModelDeployment.objects.filter(pk__in={r.deployment_id for r in records})
    rows = list(found.values_list("pk", "tenant__slug", "tenant_id"))
    deployments = {pk: slug for pk, slug, _ in rows}
    tenants = {pk: tenant_id for pk, _, tenant_id in rows}
    keys = {
        pk: (slug, scope)
        for pk, slug, scope in ApiKey.objects.filter(pk__in={r.key_id for r in records if r.key_id}).values_list(
            "pk", "tenant__slug", "deployment_id"
        )
    }
    shared = {r.deployment_id for r in records if r.consumer and r.consumer != r.tenant}
    subscribed = set(
        Subscription.objects.filter(publication__deployment_id__in=shared).values_list(
            "publication__deployment_id", "consumer__slug"
        )
    )
    kept = []
    for record in records:
        if deployments.get(record.deployment_id) != record.tenant:
            continue
        consumer = record.consumer or record.tenant
        if consumer != record.tenant and (record.key_id is None or (record.deployment_id, consumer) not in subscribed):
            continue
        if record.key_id is not None:
            slug, scope = keys.get(record.key_id, (None, None))
            allowed_scopes = (None, record.deployment_id) if consumer == record.tenant else (None,)
            if slug != consumer or scope not in allowed_scopes:
                continue
        kept.append(record)
    return kept, tenants


def count_usage(records: Iterable[UsageRecord], *, source: str = LOCAL_GATEWAY) -> int:
    """Count the records newer than `source`'s cursor; returns how many were counted."""
    with transaction.atomic():
        UsageLogCursor.objects.get_or_create(source=source)
        cursor = UsageLogCursor.objects.select_for_update().get(source=source)
        fresh = [r for r in records if _well_formed(r) and r.ts > cursor.position]
        if not fresh:
            return 0
        totals: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        last_used: dict[int, float] = {}
        trusted_records, tenants = trusted(fresh)
        for record in trusted_records:
            row = totals[(record.key_id, record.deployment_id, _day(record.ts))]
            row[0] += 1
            row[1] += record.status >= FAILED_STATUS
            row[2] += record.prompt_tokens
            row[3] += record.completion_tokens
            if record.key_id is not None:
                last_used[record.key_id] = max(last_used.get(record.key_id, 0.0), record.ts)
        for (key_id, deployment_id, day), (requests, failed, prompt, completion) in totals.items():
            KeyUsageDay.objects.get_or_create(
                key_id=key_id, deployment_id=deployment_id, day=day, defaults={"tenant_id": tenants[deployment_id]}
            )
            KeyUsageDay.objects.filter(key_id=key_id, deployment_id=deployment_id, day=day).update(
                requests=F("requests") + requests,
                failed=F("failed") + failed,
                prompt_tokens=F("prompt_tokens") + prompt,
                completion_tokens=F("completion_tokens") + completion,
            )
        for key_id, ts in last_used.items():
            when = datetime.fromtimestamp(ts, tz=UTC)
            ApiKey.objects.filter(pk=key_id).filter(Q(last_used__isnull=True) | Q(last_used__lt=when)).update(
                last_used=when
            )
        cursor.position = max(r.ts for r in fresh)
        cursor.save(update_fields=["position", "updated"])
        return len(trusted_records)


def count_gateway_log() -> int:
    """Count what the local gateway logged since the last run (the beat task)."""
    return count_usage(list(read_usage(gateway_log())))  # read before the transaction takes the cursor's lock
