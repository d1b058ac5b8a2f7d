"""What the pages, the API and the CSV export share: which tenants a request covers, the report
as plain values, and the CSV rows."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import date

from django.db.models import QuerySet
from django.http import Http404

from core.exports import Echo, csv_cell
from quotas.models import Tenant
from usage.budgets import banner
from usage.keys import key_rows
from usage.reports import BudgetStatus, monthly_report, parse_month, report_rows, tenant_totals

CSV_COLUMNS = (
    "month",
    "tenant",
    "deployment",
    "deployment_id",
    "state",
    "flavor",
    "task",
    "reserved_gpu_hours",
    "serving_gpu_hours",
    "utilisation_pct",
    "prompt_tokens",
    "generation_tokens",
    "tokens",
    "tokens_counted",
    "cost",
    "cost_per_mtok",
    "unpriced_gpu_hours",
    "note",
)


def covered_tenants(user, slug: str | None) -> QuerySet[Tenant]:
    """The tenants a report for `user` covers: theirs (all for platform admins), or the one
    named by `slug` (404 when the user does not see it, as for any other tenant object)."""
    tenants = Tenant.objects.visible_to(user)
    if slug:
        tenants = Tenant.objects.filter(pk__in=tenants.filter(slug=slug).values("pk"))
        if not tenants.exists():
            raise Http404("No such tenant.")
    return tenants


def budget_dict(tenant: Tenant, status: BudgetStatus) -> dict:
    """A tenant's budget status as plain values, with the banner its pages show."""
    return {**status.as_dict(), "banner": banner(tenant, status)}


def report(tenants: QuerySet[Tenant], *, month: date, sort: str, limit: int, offset: int) -> dict:
    """The report with each tenant's budget as plain values and its banner, and the month's use
    per API key."""
    data = monthly_report(tenants, month=month, sort=sort, limit=limit, offset=offset)
    for row in data["tenants"]:
        row["budget"] = budget_dict(row.pop("object"), row["budget"])
    data["month"] = f"{month:%Y-%m}"
    data["keys"] = key_rows(tenants, month=month)
    return data


def csv_lines(tenants: QuerySet[Tenant], *, month: date, sort: str) -> Iterator[str]:
    """The month's deployment rows as CSV lines, header first."""
    writer = csv.writer(Echo())
    yield writer.writerow(CSV_COLUMNS)
    label = f"{month:%Y-%m}"
    for row in report_rows(tenants, month=month, sort=sort):
        row = {**row, "month": label}
        yield writer.writerow([csv_cell(row[name]) for name in CSV_COLUMNS])


def overview_usage(tenants: list[Tenant], month: date | None = None) -> dict[int, dict]:
    """Per tenant id: this month's reserved and serving GPU-hours, cost and budget (one query),
    for the overview's tenant blocks."""
    month = month or parse_month(None)
    out = {}
    for tenant_id, row in tenant_totals(tenants, month).items():
        out[tenant_id] = {**row, "month": f"{month:%Y-%m}", "budget": budget_dict(row.pop("object"), row["budget"])}
    return out
