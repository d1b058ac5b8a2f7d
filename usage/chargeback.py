"""Chargeback for shared models (issue 34): a shared deployment's cost is split across the tenants
that used it, by tokens, day by day; the owner keeps the rest (its own tokens' share, every day
nobody called it, and the fractions of a cent), so the tenants' totals add up to the ledger's cost.

Tokens per consumer come from the per-key counts (access.KeyUsageDay, from the local gateway's log
or the cluster Gateway's counters): a key's tenant is the consumer, the portal's Try-it key is the
owner. A day's charge to a consumer
is the day's ledger cost × its tokens / all tokens that day (six places); a month's charge is the
sum of its days rounded down to the cent. A day without a price (an unpriced flavor) charges
nobody: its cost is unknown in the ledger too.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_DOWN, Decimal

from django.db.models import F, Q, Sum
from django.db.models.functions import Coalesce

from access.models import KeyUsageDay
from deployments.models import ModelDeployment
from quotas.models import Tenant
from usage.keys import next_month
from usage.models import UsageDay

CENT = Decimal("0.01")
SIX_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class Charge:
    """What `consumer` owes `owner` for deployment `deployment_id` in a month."""

    deployment_id: int
    deployment: str
    owner_id: int
    owner: str
    consumer_id: int
    consumer: str
    tokens: int  # the consumer's tokens: prompt, completion and unsplit (the cluster Gateway's)
    share_tokens: int  # everyone's tokens on the days that had a price
    cost: Decimal  # whole cents


def charges(month: date, tenant_ids: list[int] | None = None) -> list[Charge]:
    """The month's charges for shared deployments; with `tenant_ids`, those where one of them is
    the owner or the consumer."""
    days = KeyUsageDay.objects.filter(day__gte=month, day__lt=next_month(month))
    shared = days.filter(key__isnull=False).exclude(key__tenant_id=F("tenant_id"))
    if tenant_ids is not None:
        shared = shared.filter(Q(tenant_id__in=tenant_ids) | Q(key__tenant_id__in=tenant_ids))
    deployment_ids = set(shared.values_list("deployment_id", flat=True))
    if not deployment_ids:
        return []
    tokens: dict[tuple[int, date], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    rows = (
        days.filter(deployment_id__in=deployment_ids)
        .annotate(consumer=Coalesce("key__tenant_id", "tenant_id"))
        .values("deployment_id", "day", "consumer", "tenant_id")
        .annotate(used=Sum(F("prompt_tokens") + F("completion_tokens") + F("unsplit_tokens")))
    )
    owners = {}
    for row in rows:
        tokens[(row["deployment_id"], row["day"])][row["consumer"]] += row["used"]
        owners[row["deployment_id"]] = row["tenant_id"]
    cost = {
        (d, day): c
        for d, day, c in UsageDay.objects.filter(
            deployment_id__in=deployment_ids, day__gte=month, day__lt=next_month(month)
        ).values_list("deployment_id", "day", "cost")
    }
    owed: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    used: dict[tuple[int, int], int] = defaultdict(int)
    share_tokens: dict[int, int] = defaultdict(int)
    for (dep_id, day), by_consumer in tokens.items():
        day_cost, total = cost.get((dep_id, day)), sum(by_consumer.values())
        if day_cost is None or not total:
            continue
        share_tokens[dep_id] += total
        for consumer, count in by_consumer.items():
            if consumer != owners[dep_id]:
                owed[(dep_id, consumer)] += (day_cost * count / total).quantize(SIX_PLACES, ROUND_DOWN)
                used[(dep_id, consumer)] += count
    names = dict(ModelDeployment.objects.filter(pk__in=deployment_ids).values_list("pk", "name"))
    slugs = dict(Tenant.objects.filter(pk__in=set(owners.values()) | {c for _, c in owed}).values_list("pk", "slug"))
    found = [
        Charge(
            deployment_id=dep_id,
            deployment=names[dep_id],
            owner_id=owners[dep_id],
            owner=slugs[owners[dep_id]],
            consumer_id=consumer,
            consumer=slugs[consumer],
            tokens=used[(dep_id, consumer)],
            share_tokens=share_tokens[dep_id],
            cost=amount.quantize(CENT, ROUND_DOWN),
        )
        for (dep_id, consumer), amount in owed.items()
    ]
    if tenant_ids is not None:
        found = [c for c in found if c.owner_id in tenant_ids or c.consumer_id in tenant_ids]
    return sorted(found, key=lambda c: (c.owner, c.deployment, c.consumer))


def tenant_shares(found: list[Charge]) -> dict[int, tuple[Decimal, Decimal]]:
    """Per tenant id: (what it owes others for their shared models, what others owe it)."""
    out: dict[int, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    for charge in found:
        out[charge.consumer_id][0] += charge.cost
        out[charge.owner_id][1] += charge.cost
    return {tenant: (owes, owed) for tenant, (owes, owed) in out.items()}
