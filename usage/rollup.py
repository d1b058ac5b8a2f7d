"""Writing the ledger: read the facts of a month, compute it (usage.ledger), store the day and
month rows (usage.models). Run by the beat task (usage.tasks) for the current month, and for the
previous one during the first day of a month, so late facts of its last hours are counted.

Tokens come from the metrics samples: their 10-minute rollups where they exist, then the 1-minute
rollups after the last of those, then raw points after that (as metrics.store.window_rows reads
a window), so no interval is counted twice and nothing rolled up is missed.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timedelta
from functools import reduce
from operator import or_

from django.db import transaction
from django.db.models import F, Max, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from deployments.models import DeploymentEvent, ModelDeployment
from metrics.models import MetricSample, Resolution, ScrapeState
from quotas.models import QuotaReservation
from usage.ledger import Figures, Held, ledger_days, month_bounds, month_note, month_total
from usage.models import UsageDay, UsageMonth

OWNER = "deployment"  # deployments.services.OWNER: the reservations a deployment holds
FIGURE_FIELDS = (
    "reserved_gpu_hours",
    "serving_gpu_hours",
    "prompt_tokens",
    "generation_tokens",
    "cost",
    "unpriced_gpu_hours",
)
_LEVELS = sorted((int(r) for r in Resolution), reverse=True)  # coarsest first


def token_days_many(ids: set[int] | list[int], start: datetime, end: datetime) -> dict[int, dict]:
    """Per deployment id: (prompt, generation) tokens per local day in [start, end), each interval
    counted once. One statement per resolution for the whole fleet (more only past 50 distinct
    cut-offs): each resolution is read from where the coarser one's last bucket ended, per
    deployment, and deployments that share a cut-off share a condition."""
    tz = timezone.get_current_timezone()
    out: dict[int, dict[date, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    cutoffs = dict.fromkeys(ids, start)
    for level in _LEVELS:
        by_cutoff: dict[datetime, list[int]] = defaultdict(list)
        for dep_id, cutoff in cutoffs.items():
            by_cutoff[cutoff].append(dep_id)
        conditions = [Q(deployment_id__in=dep_ids, ts__gte=cutoff) for cutoff, dep_ids in by_cutoff.items()]
        last: dict[int, datetime] = {}
        for i in range(0, len(conditions), 50):
            rows = (
                MetricSample.objects.filter(reduce(or_, conditions[i : i + 50]), resolution=level, ts__lt=end)
                .annotate(day=TruncDate("ts", tzinfo=tz))
                .values("deployment_id", "day")
                .annotate(
                    prompt=Sum(F("prompt_tokens_per_s") * F("interval_s")),
                    generation=Sum(F("generation_tokens_per_s") * F("interval_s")),
                    last=Max("ts"),
                )
                .order_by()
            )
            for row in rows:
                dep_id, day = row["deployment_id"], row["day"]
                out[dep_id][day][0] += row["prompt"] or 0.0
                out[dep_id][day][1] += row["generation"] or 0.0
                last[dep_id] = max(last.get(dep_id, row["last"]), row["last"])
        if level != Resolution.RAW:
            cutoffs.update({dep_id: ts + timedelta(seconds=level) for dep_id, ts in last.items()})
    return {dep_id: {day: (p, g) for day, (p, g) in days.items()} for dep_id, days in out.items()}


def token_days(deployment_id: int, start: datetime, end: datetime) -> dict[date, tuple[float, float]]:
    """One deployment's (prompt, generation) tokens per local day in [start, end)."""
    return token_days_many([deployment_id], start, end).get(deployment_id, {})


def _candidates(start: datetime, end: datetime) -> set[int]:
    """Deployments that may have usage in [start, end): a reservation overlapping it, or a
    successful scrape since it began."""
    held = QuotaReservation.objects.filter(owner_type=OWNER, created__lt=end).filter(
        Q(released__isnull=True) | Q(released__gt=start)
    )
    ids = set(held.values_list("owner_id", flat=True))
    ids |= set(ScrapeState.objects.filter(last_success__gte=start).values_list("deployment_id", flat=True))
    return ids


def compute_month(month: date, *, now: datetime, ids: set[int] | None = None) -> dict[int, tuple[dict, Figures, str]]:
    """Per deployment id: its days, its month total and the month's note."""
    tz = timezone.get_current_timezone()
    start, end = month_bounds(month, tz)
    ids = _candidates(start, end) if ids is None else ids
    held: dict[int, list[Held]] = defaultdict(list)
    unpriced: dict[int, set[str]] = defaultdict(set)
    reservations = (
        QuotaReservation.objects.filter(owner_type=OWNER, owner_id__in=ids, created__lt=end)
        .filter(Q(released__isnull=True) | Q(released__gt=start))
        .select_related("quota__flavor")
        .order_by("created")
    )
    for r in reservations:
        price = r.quota.flavor.price_per_gpu_hour
        held[r.owner_id].append(Held(r.created, r.released, r.gpus, price))
        if price is None:
            unpriced[r.owner_id].add(r.quota.flavor.name)
    transitions: dict[int, list[tuple[datetime, str]]] = defaultdict(list)
    events = (
        DeploymentEvent.objects.filter(deployment_id__in=ids, created__lt=end)
        .exclude(to_state="")
        .order_by("created", "id")
        .values_list("deployment_id", "created", "to_state")
    )
    for dep_id, at, state in events:
        transitions[dep_id].append((at, state))
    tokens = token_days_many(ids, start, min(end, now))
    out = {}
    for dep_id in ids:
        days = ledger_days(
            held=held[dep_id],
            transitions=transitions[dep_id],
            tokens=tokens.get(dep_id, {}),
            start=start,
            end=end,
            now=now,
            tz=tz,
        )
        total = month_total(days.values())
        out[dep_id] = (days, total, month_note(total, unpriced_flavors=unpriced[dep_id]))
    return out


def _figures(fig: Figures) -> dict:
    return {name: getattr(fig, name) for name in FIGURE_FIELDS}


@transaction.atomic
def refresh_month(month: date, *, now: datetime | None = None, ids: set[int] | None = None) -> int:
    """Recompute and store the ledger of `month` (of deployments `ids`, default every one with
    usage in it); returns the number of deployments written. Safe to run any number of times."""
    now = now or timezone.now()
    first = month.replace(day=1)
    computed = compute_month(first, now=now, ids=ids)
    tenants = dict(ModelDeployment.objects.filter(pk__in=computed).values_list("pk", "tenant_id"))
    computed = {k: v for k, v in computed.items() if k in tenants}  # a deployment deleted meanwhile
    end_day = month_bounds(first, timezone.get_current_timezone())[1].date()
    UsageDay.objects.filter(deployment_id__in=computed, day__gte=first, day__lt=end_day).delete()
    UsageDay.objects.bulk_create(
        [
            UsageDay(deployment_id=dep_id, tenant_id=tenants[dep_id], day=day, **_figures(fig))
            for dep_id, (days, _, _) in computed.items()
            for day, fig in days.items()
        ]
    )
    UsageMonth.objects.bulk_create(
        [
            UsageMonth(deployment_id=dep_id, tenant_id=tenants[dep_id], month=first, note=note, **_figures(total))
            for dep_id, (_, total, note) in computed.items()
        ],
        update_conflicts=True,
        unique_fields=["deployment", "month"],
        update_fields=[*FIGURE_FIELDS, "note", "tenant", "updated"],
    )
    return len(computed)


def months_to_refresh(now: datetime) -> list[date]:
    """The current month, and the previous one on a month's first day (its last hours' facts)."""
    today = timezone.localdate(now)
    months = [today.replace(day=1)]
    if today.day == 1:
        months.insert(0, (today - timedelta(days=1)).replace(day=1))
    return months
