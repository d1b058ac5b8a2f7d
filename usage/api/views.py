"""Usage API: the monthly report (the usage page's figures), its CSV and budget status.

Tenant members see their own tenants, platform admins every tenant; `tenant=<slug>` narrows the
report to one (404 for a tenant you do not see, as everywhere in the API).
"""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from core.exports import CsvRenderer
from usage.api.serializers import TenantBudgetSerializer, UsageQuerySerializer, UsageReportSerializer
from usage.presenters import budget_dict, covered_tenants, csv_lines, report
from usage.reports import parse_month, tenant_totals


def _query(request) -> dict:
    query = UsageQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    data = dict(query.validated_data)
    data.setdefault("month", parse_month(None))
    return data


class UsageReportView(APIView):
    """Reserved and serving GPU-hours, utilisation, tokens and cost per tenant and deployment."""

    @extend_schema(parameters=[UsageQuerySerializer], responses={200: UsageReportSerializer})
    def get(self, request):
        q = _query(request)
        tenants = covered_tenants(request.user, q.get("tenant"))
        data = report(tenants, month=q["month"], sort=q["sort"], limit=q["limit"], offset=q["offset"])
        return Response(UsageReportSerializer(data).data)


class UsageCsvView(APIView):
    """Every deployment row of the month as CSV (the report's columns, sorted like it)."""

    renderer_classes = [JSONRenderer, CsvRenderer]

    @extend_schema(
        parameters=[UsageQuerySerializer],
        responses={(200, "text/csv"): OpenApiResponse(response=OpenApiTypes.STR, description="CSV, header first")},
    )
    def get(self, request):
        q = _query(request)
        tenants = covered_tenants(request.user, q.get("tenant"))
        response = StreamingHttpResponse(
            csv_lines(tenants, month=q["month"], sort=q["sort"], rows=q["rows"]), content_type="text/csv"
        )
        suffix = "" if q["rows"] == "deployments" else f"-{q['rows']}"
        response["Content-Disposition"] = f'attachment; filename="usage-{q["month"]:%Y-%m}{suffix}.csv"'
        return response


class UsageBudgetsView(APIView):
    """Each covered tenant's budget this month: spent, level (80 / 100 %), hard stop."""

    @extend_schema(parameters=[UsageQuerySerializer], responses={200: TenantBudgetSerializer(many=True)})
    def get(self, request):
        q = _query(request)
        tenants = list(covered_tenants(request.user, q.get("tenant")).order_by("slug"))
        rows = tenant_totals(tenants, q["month"])
        out = [
            {"tenant": t.slug, "month": f"{q['month']:%Y-%m}", **budget_dict(t, rows[t.pk]["budget"])} for t in tenants
        ]
        return Response(TenantBudgetSerializer(out, many=True).data)
