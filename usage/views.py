"""The usage page (reserved and serving GPU-hours, tokens, cost, budgets) and its CSV download.

Tenant members see their own tenants; platform admins see every tenant. The page reads the same
report as GET /api/v1/usage/ (usage.presenters) with the same parameters and the same checks.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from quotas.models import Tenant
from usage.api.serializers import UsageQuerySerializer
from usage.presenters import covered_tenants, csv_lines, report
from usage.reports import DEFAULT_SORT, PAGE_SIZE, SORT_CHOICES, SORT_LABELS, parse_month


def _query(request) -> tuple[dict, dict]:
    """Validated parameters (defaults where a value is bad) and the field errors to show."""
    query = UsageQuerySerializer(data=request.GET)
    if query.is_valid():
        data, errors = dict(query.validated_data), {}
    else:
        errors = {field: " ".join(str(e) for e in msgs) for field, msgs in query.errors.items()}
        good = UsageQuerySerializer(data={k: v for k, v in request.GET.items() if k not in errors})
        data = (
            dict(good.validated_data)
            if good.is_valid()
            else {"sort": DEFAULT_SORT, "limit": PAGE_SIZE, "offset": 0, "rows": "deployments"}
        )
    data.setdefault("month", parse_month(None))
    return data, errors


def _link(params: dict, **changes) -> str:
    merged = {k: v for k, v in {**params, **changes}.items() if v not in (None, "")}
    return "?" + urlencode(merged)


@login_required
def usage_report(request):
    """The month's usage per tenant and deployment, sortable, with budget warnings."""
    q, errors = _query(request)
    tenants = covered_tenants(request.user, q.get("tenant"))
    data = report(tenants, month=q["month"], sort=q["sort"], limit=PAGE_SIZE, offset=q["offset"])
    params = {"month": data["month"], "tenant": q.get("tenant") or "", "sort": q["sort"]}
    columns = []
    for key, heading in SORT_LABELS.items():  # the deployments table's sortable columns
        current = q["sort"].lstrip("-") == key
        descending = q["sort"].startswith("-")
        columns.append(
            {
                "heading": heading,
                "href": _link(params, sort=key if current and descending else f"-{key}", offset=""),
                "aria_sort": ("descending" if descending else "ascending") if current else "",
            }
        )
    offset = q["offset"]
    pages = {
        "prev": _link(params, offset=max(0, offset - PAGE_SIZE) or "") if offset else "",
        "next": _link(params, offset=offset + PAGE_SIZE) if offset + PAGE_SIZE < data["count"] else "",
        "first": offset + 1 if data["count"] else 0,
        "last": min(offset + PAGE_SIZE, data["count"]),
    }
    context = {
        "data": data,
        "errors": errors,
        "other_errors": [(k, v) for k, v in errors.items() if k not in ("month", "sort")],
        "columns": columns,
        "pages": pages,
        "params": params,
        "sorts": SORT_CHOICES,
        "tenant_choices": list(Tenant.objects.visible_to(request.user).values_list("slug", "display_name")),
        "csv_href": reverse("usage-csv-download") + _link(params),
        "keys_csv_href": reverse("usage-csv-download") + _link(params, rows="keys"),
        "shared_csv_href": reverse("usage-csv-download") + _link(params, rows="shared"),
        "api_href": reverse("usage-report") + _link(params),
    }
    return render(request, "usage/report.html", context, status=400 if errors else 200)


@login_required
def usage_csv(request):
    """The month's deployment rows as a CSV file (the API's /api/v1/usage/csv/)."""
    q, errors = _query(request)
    if errors:
        return usage_report(request)  # the page with the field errors (400)
    tenants = covered_tenants(request.user, q.get("tenant"))
    response = StreamingHttpResponse(
        csv_lines(tenants, month=q["month"], sort=q["sort"], rows=q["rows"]), content_type="text/csv"
    )
    suffix = "" if q["rows"] == "deployments" else f"-{q['rows']}"
    response["Content-Disposition"] = f'attachment; filename="usage-{q["month"]:%Y-%m}{suffix}.csv"'
    return response
