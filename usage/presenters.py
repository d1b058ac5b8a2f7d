"""What the pages, the API and the CSV export share: which tenants a request covers, the report
as plain values, and the CSV rows."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import asdict
from datetime import date
from decimal import Decimal

from django.db.models import QuerySet
from django.http import Http404

from core.exports import Echo, csv_cell
from quotas.models import Tenant
from usage.budgets import banner
from usage.chargeback import charges, tenant_shares
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
# ?rows=keys and ?rows=shared: the per-key table and the chargeback table, as the report has them.
KEY_CSV_COLUMNS = (
    "month", "tenant", "key", "prefix", "key_id", "owner", "deployment", "deployment_id",
    "requests", "failed", "prompt_tokens", "completion_tokens", "unsplit_tokens",
)  # fmt: skip
SHARED_CSV_COLUMNS = ("month", "owner", "deployment", "deployment_id", "consumer", "tokens", "share_tokens", "cost")
CSV_ROWS = ("deployments", "keys", "shared")


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
    """The report with each tenant's budget as plain values and its banner, the month's use per
    API key, and the chargeback of shared models (usage.chargeback): per tenant what it owes
    others and what others owe it, and its cost after both (`net_cost`)."""
    data = monthly_report(tenants, month=month, sort=sort, limit=limit, offset=offset)
    found = charges(month, [t.pk for t in tenants])
    shares = tenant_shares(found)
    for row in data["tenants"]:
        tenant = row.pop("object")
        row["budget"] = budget_dict(tenant, row["budget"])
        owes, owed = shares.get(tenant.pk, (Decimal(0), Decimal(0)))
        row["shared_owes"], row["shared_owed"] = owes, owed
        row["net_cost"] = None if row["cost"] is None else row["cost"] - owed + owes
    data["month"] = f"{month:%Y-%m}"
    data["keys"] = key_rows(tenants, month=month)
    data["shared"] = [asdict(c) for c in found]
    return data


def csv_lines(tenants: QuerySet[Tenant], *, month: date, sort: str, rows: str = "deployments") -> Iterator[str]:
    """The month's deployment rows (or its per-key or chargeback rows) as CSV lines, header first."""
    writer = csv.writer(Echo())
    if rows == "keys":
        columns, found = KEY_CSV_COLUMNS, iter(key_rows(tenants, month=month))
    elif rows == "shared":
        columns, found = SHARED_CSV_COLUMNS, (asdict(c) for c in charges(month, [t.pk for t in tenants]))
    else:
        columns, found = CSV_COLUMNS, report_rows(tenants, month=month, sort=sort)
    yield writer.writerow(columns)
    label = f"{month:%Y-%m}"
    for row in found:
        row = {**row, "month": label}
        yield writer.writerow([csv_cell(row[name]) for name in columns])


def overview_usage(tenants: list[Tenant], month: date | None = None) -> dict[int, dict]:
    """Per tenant id: this month's reserved and serving GPU-hours, cost and budget (one query),
    for the overview's tenant blocks."""
    month = month or parse_month(None)
    out = {}
    for tenant_id, row in tenant_totals(tenants, month).items():
        out[tenant_id] = {**row, "month": f"{month:%Y-%m}", "budget": budget_dict(row.pop("object"), row["budget"])}
    return out
