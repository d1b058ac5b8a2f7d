"""The month's use per API key (access.KeyUsageDay, counted from the local gateway's log by
access.key_usage and from the cluster Gateway's counters by access.gateway_usage), for the usage
page and the API's report alike: one row per key and deployment, most tokens first."""

from __future__ import annotations

from datetime import date

from django.db.models import F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from access.models import KeyUsageDay
from quotas.models import Tenant

KEY_ROWS_MAX = 500
TRY_IT = "the portal's Try-it"  # the rows of the portal's own key (no ApiKey row)


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def key_rows(tenants: QuerySet[Tenant], *, month: date) -> list[dict]:
    """Requests, failed requests and tokens per key and deployment in `month` (its first day): the
    keys of `tenants`, on their own deployments or on models shared with them, and the Try-it rows
    of their deployments. Another tenant's keys on a shared deployment are not listed to its owner
    (their use is in the chargeback rows, per consumer tenant)."""
    days = KeyUsageDay.objects.filter(day__gte=month, day__lt=next_month(month)).filter(
        Q(key__tenant__in=tenants) | Q(key__isnull=True, tenant__in=tenants)
    )
    days = days.annotate(consumer=Coalesce("key__tenant__slug", "tenant__slug"))
    grouped = days.values(
        "key_id", "key__name", "key__prefix", "consumer", "tenant__slug", "deployment_id", "deployment__name"
    )
    totals = grouped.annotate(
        requests_=Sum("requests"),
        failed_=Sum("failed"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        unsplit=Sum("unsplit_tokens"),
    ).order_by(-(F("prompt") + F("completion") + F("unsplit")), "consumer", "key__name", "deployment__name")
    return [
        {
            "key_id": row["key_id"],
            "key": row["key__name"] if row["key_id"] else TRY_IT,
            "prefix": row["key__prefix"] or "",
            "tenant": row["consumer"],
            "owner": row["tenant__slug"],
            "deployment_id": row["deployment_id"],
            "deployment": row["deployment__name"],
            "requests": row["requests_"],
            "failed": row["failed_"],
            "prompt_tokens": row["prompt"],
            "completion_tokens": row["completion"],
            "unsplit_tokens": row["unsplit"],
        }
        for row in totals[:KEY_ROWS_MAX]
    ]
