"""Monthly usage reports from the stored ledger (usage.models.UsageMonth), for the pages, the API
and the CSV export alike.

A report is a fixed number of SQL queries whatever the fleet size (bench/b7_usage_report.py):
the tenants, their totals (one GROUP BY), and one page of deployment rows sorted in SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db.models import (
    Case,
    Count,
    DecimalField,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, NullIf
from django.utils import timezone

from quotas.models import Tenant
from runtime.tasks import TASKS, pools
from usage.ledger import cost_per_million
from usage.models import UsageMonth

# A deployment that generates nothing (embedding, score: runtime.tasks) is counted and priced by
# its input (prompt) tokens; every other one by its output (generated) tokens.
POOLING_TASKS = [task for task in TASKS if pools(task)]

MONTH_RE = re.compile(r"^([0-9]{4})-(0[1-9]|1[0-2])$")  # ASCII digits only (\d takes any script's)
# Sort keys offered to people (pages, API, CSV) → the column they order by.
SORTS = {
    "tenant": "tenant__slug",
    "deployment": "deployment__name",
    "reserved": "reserved_gpu_hours",
    "serving": "serving_gpu_hours",
    "utilisation": "utilisation",
    "tokens": "tokens",
    "cost": "cost",
    "cost_per_mtok": "cost_per_mtok",
}
# The words for each sort key: the deployments table's headings and the page's sort menu (as
# "<label> (high first)" / "(low first)", the API's choices for `sort`).
SORT_LABELS = {
    "tenant": "Tenant",
    "deployment": "Deployment",
    "reserved": "Reserved GPU-h",
    "serving": "Serving GPU-h",
    "utilisation": "Utilisation",
    "tokens": "Tokens",
    "cost": "Cost",
    "cost_per_mtok": "$ / 1M tokens",
}
SORT_CHOICES = [
    choice
    for key, label in SORT_LABELS.items()
    for choice in ((f"-{key}", f"{label} (high first)"), (key, f"{label} (low first)"))
]
DEFAULT_SORT = "-cost"
PAGE_SIZE = 50
WARN_PCT = 80


def parse_month(value: str | None) -> date:
    """A "YYYY-MM" string as the month's first day (default: this month); ValueError otherwise."""
    if not value:
        return timezone.localdate().replace(day=1)
    match = MONTH_RE.match(value)
    if not match or not 2000 <= int(match.group(1)) <= 2999:
        raise ValueError("Give the month as YYYY-MM, e.g. 2026-11.")
    return date(int(match.group(1)), int(match.group(2)), 1)


@dataclass
class BudgetStatus:
    """Where a tenant stands against its monthly budget."""

    budget: Decimal | None
    spent: Decimal  # known cost so far (hours on unpriced flavors have no cost)
    hard_stop: bool
    stopped_at: object  # datetime | None

    @property
    def pct(self) -> float | None:
        if self.budget is None:
            return None
        if not self.budget:
            return 100.0 if self.spent >= 0 else 0.0
        return float(100 * self.spent / self.budget)

    @property
    def level(self) -> int:
        """0, 80 or 100: the warning level reached (a budget of 0 allows no spend: 100)."""
        if self.budget is None:
            return 0
        if self.spent >= self.budget:
            return 100
        return WARN_PCT if self.spent * 100 >= self.budget * WARN_PCT else 0

    def as_dict(self) -> dict:
        return {
            "monthly_budget": None if self.budget is None else str(self.budget),
            "spent": str(self.spent.quantize(Decimal("0.01"))),
            "pct": None if self.pct is None else round(self.pct, 1),
            "level": self.level,
            "hard_stop": self.hard_stop,
            "stopped_at": self.stopped_at,
        }


def budget_status(tenant: Tenant, spent: Decimal | None) -> BudgetStatus:
    return BudgetStatus(
        budget=tenant.monthly_budget,
        spent=spent or Decimal(0),
        hard_stop=tenant.budget_hard_stop,
        stopped_at=tenant.budget_stopped_at,
    )


def _rows(tenant_ids: list[int], month: date) -> QuerySet:
    reserved = NullIf(F("reserved_gpu_hours"), Value(Decimal(0)))
    return UsageMonth.objects.filter(month=month, tenant_id__in=tenant_ids).annotate(
        tokens=Case(When(deployment__task__in=POOLING_TASKS, then=F("prompt_tokens")), default=F("generation_tokens")),
        utilisation=ExpressionWrapper(
            Cast(F("serving_gpu_hours"), FloatField()) * 100.0 / Cast(reserved, FloatField()),
            output_field=FloatField(),
        ),
        cost_per_mtok=ExpressionWrapper(
            F("cost") * Decimal(1_000_000) / NullIf(F("tokens"), Value(0)),
            output_field=DecimalField(max_digits=30, decimal_places=6),
        ),
    )


ROW_FIELDS = (
    "deployment_id",
    "deployment__name",
    "deployment__state",
    "deployment__flavor__name",
    "deployment__task",
    "tenant__slug",
    "reserved_gpu_hours",
    "serving_gpu_hours",
    "utilisation",
    "prompt_tokens",
    "generation_tokens",
    "tokens",
    "cost",
    "cost_per_mtok",
    "unpriced_gpu_hours",
    "note",
    "updated",
)


JOINED_SORTS = ("tenant", "deployment")  # sort keys that live on another table


def _ordered(rows: QuerySet, sort: str) -> QuerySet:
    key = sort.lstrip("-")
    column = F(SORTS[key])
    first = column.desc(nulls_last=True) if sort.startswith("-") else column.asc(nulls_last=True)
    ties = ("deployment__name", "deployment_id") if key == "tenant" else ("deployment_id",)
    return rows.order_by(first, *ties)


def _page(tenant_ids: list[int], month: date, sort: str, offset: int, limit: int) -> QuerySet:
    """One page of rows in `sort` order. A sort on the ledger's own columns picks the page's rows
    from the month's rows alone, and only those are joined to their deployment and tenant (one
    statement with a subquery): the join then costs a page, not the fleet."""
    if sort.lstrip("-") in JOINED_SORTS:
        return _ordered(_rows(tenant_ids, month), sort)[offset : offset + limit]
    chosen = _ordered(_rows(tenant_ids, month), sort)[offset : offset + limit].values("pk")
    return _ordered(_rows(tenant_ids, month).filter(pk__in=Subquery(chosen)), sort)


def _row(values: dict) -> dict:
    """One deployment's month. A pooling deployment has no output tokens (None, not 0): its tokens
    and its cost per 1M tokens are its input tokens'."""
    pooling = pools(values["deployment__task"])
    return {
        "deployment_id": values["deployment_id"],
        "deployment": values["deployment__name"],
        "state": values["deployment__state"],
        "flavor": values["deployment__flavor__name"],
        "task": values["deployment__task"],
        "tenant": values["tenant__slug"],
        "reserved_gpu_hours": values["reserved_gpu_hours"],
        "serving_gpu_hours": values["serving_gpu_hours"],
        "utilisation_pct": None if values["utilisation"] is None else round(values["utilisation"], 1),
        "prompt_tokens": values["prompt_tokens"],
        "generation_tokens": None if pooling else values["generation_tokens"],
        "tokens": values["tokens"],
        "tokens_counted": "input" if pooling else "output",
        "cost": values["cost"],
        "cost_per_mtok": values["cost_per_mtok"],
        "unpriced_gpu_hours": values["unpriced_gpu_hours"],
        "note": values["note"],
        "updated": values["updated"],
    }


def tenant_totals(tenants: list[Tenant], month: date) -> dict[int, dict]:
    """Per tenant id: the month's sums over its deployments (one query)."""
    sums = (
        UsageMonth.objects.filter(month=month, tenant_id__in=[t.pk for t in tenants])
        .values("tenant_id")
        .annotate(
            sum_reserved=Sum("reserved_gpu_hours"),
            sum_serving=Sum("serving_gpu_hours"),
            sum_prompt=Sum("prompt_tokens"),
            sum_generation=Sum("generation_tokens"),
            sum_cost=Sum("cost"),
            sum_unpriced=Sum("unpriced_gpu_hours"),
            n_unknown=Count("id", filter=Q(cost__isnull=True)),
            n_deployments=Count("id"),
            last_updated=Max("updated"),
        )
        .order_by()
    )
    by_id = {row["tenant_id"]: row for row in sums}
    out = {}
    for tenant in tenants:
        row = by_id.get(tenant.pk, {})
        known = row.get("sum_cost") or Decimal(0)
        cost = None if row.get("n_unknown") else known
        reserved, serving = row.get("sum_reserved") or Decimal(0), row.get("sum_serving") or Decimal(0)
        generation = row.get("sum_generation") or 0
        out[tenant.pk] = {
            "tenant": tenant.slug,
            "display_name": tenant.display_name,
            "deployments": row.get("n_deployments", 0),
            "reserved_gpu_hours": reserved,
            "serving_gpu_hours": serving,
            "utilisation_pct": round(float(100 * serving / reserved), 1) if reserved else None,
            "prompt_tokens": row.get("sum_prompt") or 0,
            "generation_tokens": generation,
            "cost": cost,
            "cost_per_mtok": cost_per_million(cost, generation),
            "unpriced_gpu_hours": row.get("sum_unpriced") or Decimal(0),
            "updated": row.get("last_updated"),
            "budget": budget_status(tenant, known),
            "object": tenant,
        }
    return out


def monthly_report(
    tenants: QuerySet[Tenant], *, month: date, sort: str = DEFAULT_SORT, limit: int = PAGE_SIZE, offset: int = 0
) -> dict:
    """The month's report over `tenants`: per-tenant totals with budget status, and one page of
    deployment rows in `sort` order. Three queries, whatever the number of deployments."""
    listed = list(tenants.order_by("slug"))
    totals = tenant_totals(listed, month)
    page = _page([t.pk for t in listed], month, sort, offset, limit)
    return {
        "month": month,
        "sort": sort,
        "tenants": list(totals.values()),
        "count": sum(t["deployments"] for t in totals.values()),
        "limit": limit,
        "offset": offset,
        "results": [_row(values) for values in page.values(*ROW_FIELDS)],
    }


def report_rows(tenants: QuerySet[Tenant], *, month: date, sort: str = DEFAULT_SORT) -> Iterator[dict]:
    """Every deployment row of the month in `sort` order (the CSV export), streamed."""
    ids = list(tenants.values_list("pk", flat=True))
    for values in _ordered(_rows(ids, month), sort).values(*ROW_FIELDS).iterator(chunk_size=2000):
        yield _row(values)
