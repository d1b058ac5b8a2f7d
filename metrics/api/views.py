"""Metrics API on a deployment: the dashboard's series, the latest values, the advice and the KV cache report.

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
from deployments.states import Action, actor_of, authorize
from metrics import store
from metrics.advice import OBJECTIVE_FIELDS, advice_dict, advice_for
from metrics.charts import shown_series
from metrics.kv_report import kv_comparison
from metrics.models import AdvisorObjectives


class MetricsQuerySerializer(serializers.Serializer):
    window = serializers.ChoiceField(choices=list(store.WINDOWS), default="1h")


class ObjectivesSerializer(serializers.ModelSerializer):
    """The advisor's per-deployment objectives (absolute floors and the TTFT objective)."""

    ttft_p95_objective_s = serializers.FloatField(min_value=0.01, max_value=600.0)
    waiting_floor = serializers.FloatField(min_value=0.0, max_value=100_000.0)
    kv_cache_floor_pct = serializers.FloatField(min_value=1.0, max_value=100.0)
    breach_share_pct = serializers.FloatField(min_value=1.0, max_value=100.0)

    class Meta:
        model = AdvisorObjectives
        fields = list(OBJECTIVE_FIELDS)


class DeploymentMetricsViewSet(VisibleDeploymentsMixin, viewsets.GenericViewSet):
    """Engine metrics of the deployments of the tenants you belong to. Other tenants' are 404."""

    http_method_names = ["get", "put", "patch", "head", "options"]

    @extend_schema(parameters=[MetricsQuerySerializer], responses={200: dict})
    @action(detail=True, methods=["get"])
    def metrics(self, request, pk=None):
        """Series for the dashboard: timestamps plus one list per metric, at a window's resolution. An
        embedding or score deployment has no generation series (no output tokens, inter-token latency,
        decode time or time to first token), as its dashboard has no such chart."""
        dep = self.get_object()
        query = MetricsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = store.series(dep, query.validated_data["window"])
        return Response({**data, "series": shown_series(dep.task, data["series"])})

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def summary(self, request, pk=None):
        """Latest values, the last scrape's outcome, the advice, and the KV cache vLLM reported beside
        the portal's estimate (the deployment page's "KV cache" line)."""
        dep = self.get_object()
        scrape = getattr(dep, "scrape_state", None) if hasattr(dep, "scrape_state") else None
        latest = store.summary(dep)
        return Response(
            {
                "latest": None if latest is None else shown_series(dep.task, latest),
                "scrape": None
                if scrape is None
                else {
                    "last_success": scrape.last_success,
                    "last_error": scrape.last_error,
                    "last_attempt": scrape.last_attempt,
                },
                "advice": [advice_dict(dep.pk, a) for a in advice_for(dep)],
                "kv_cache": kv_comparison(dep),
            }
        )

    @extend_schema(responses={200: {"type": "array", "items": {"type": "object"}}})
    @action(detail=True, methods=["get"])
    def advice(self, request, pk=None):
        """The advisor's recommendations with their evidence (series, window, value, threshold)."""
        dep = self.get_object()
        return Response([advice_dict(dep.pk, a) for a in advice_for(dep)])

    @extend_schema(request=ObjectivesSerializer, responses={200: ObjectivesSerializer})
    @action(detail=True, methods=["get", "put", "patch"], serializer_class=ObjectivesSerializer)
    def objectives(self, request, pk=None):
        """The advisor's objectives for this deployment; members change them as they edit it."""
        dep = self.get_object()
        row = AdvisorObjectives.objects.filter(deployment=dep).first() or AdvisorObjectives(deployment=dep)
        if request.method == "GET":
            return Response(ObjectivesSerializer(row).data)
        authorize(actor_of(dep.tenant, request.user), dep.state, Action.UPDATE)
        serializer = ObjectivesSerializer(row, data=request.data, partial=request.method == "PATCH")
        serializer.is_valid(raise_exception=True)
        serializer.save(deployment=dep)
        return Response(serializer.data)
