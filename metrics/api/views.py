"""Metrics API on a deployment: the dashboard's series, the latest values and the advice.

Served at /api/v1/deployments/<id>/metrics/, summary/ and advice/ (metrics/api/urls.py), over
the deployments API's own queryset and filters (VisibleDeploymentsMixin): another tenant's
deployment is a 404 here as it is there.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from deployments.api.views import VisibleDeploymentsMixin
from metrics import store


class MetricsQuerySerializer(serializers.Serializer):
    window = serializers.ChoiceField(choices=list(store.WINDOWS), default="1h")


def _advice_dict(advice) -> dict:
    return {
        "code": advice.code,
        "severity": advice.severity,
        "title": advice.title,
        "message": advice.message,
        "evidence": advice.evidence,
    }


class DeploymentMetricsViewSet(VisibleDeploymentsMixin, viewsets.GenericViewSet):
    """Engine metrics of the deployments of the tenants you belong to. Other tenants' are 404."""

    http_method_names = ["get", "head", "options"]

    @extend_schema(parameters=[MetricsQuerySerializer], responses={200: dict})
    @action(detail=True, methods=["get"])
    def metrics(self, request, pk=None):
        """Series for the dashboard: timestamps plus one list per metric, at a window's resolution."""
        dep = self.get_object()
        query = MetricsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(store.series(dep, query.validated_data["window"]))

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def summary(self, request, pk=None):
        """Latest values, the last scrape's outcome and the advice."""
        dep = self.get_object()
        scrape = getattr(dep, "scrape_state", None) if hasattr(dep, "scrape_state") else None
        return Response(
            {
                "latest": store.summary(dep),
                "scrape": None
                if scrape is None
                else {
                    "last_success": scrape.last_success,
                    "last_error": scrape.last_error,
                    "last_attempt": scrape.last_attempt,
                },
                "advice": [_advice_dict(a) for a in store.advice_for(dep)],
            }
        )

    @extend_schema(responses={200: {"type": "array", "items": {"type": "object"}}})
    @action(detail=True, methods=["get"])
    def advice(self, request, pk=None):
        """The advisor's recommendations with their evidence (series, window, value, threshold)."""
        return Response([_advice_dict(a) for a in store.advice_for(self.get_object())])
