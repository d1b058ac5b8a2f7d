"""Operating API on a deployment: /api/v1/deployments/<id>/timeline/, phases/ and logs/.

Same queryset and throttling as the deployments API (VisibleDeploymentsMixin): another tenant's
deployment is a 404. `timeline/?refresh=true` reads the cluster's Events for this deployment now
(at most once per deployment every few seconds, whoever asks); without it, the last read.
`logs/` is for tenant members only (Action.LOGS in the permission table).
"""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from deployments import operating
from deployments.api.views import VisibleDeploymentsMixin
from deployments.operating_views import refresh_allowed
from runtime.backends.insight import LOG_BYTES_MAX, LOG_LINES_MAX


class TimelineQuerySerializer(serializers.Serializer):
    refresh = serializers.BooleanField(default=False)


class LogsQuerySerializer(serializers.Serializer):
    lines = serializers.IntegerField(min_value=1, max_value=LOG_LINES_MAX, required=False)
    bytes = serializers.IntegerField(min_value=1, max_value=LOG_BYTES_MAX, required=False)
    download = serializers.BooleanField(default=False)


class DeploymentOperatingViewSet(VisibleDeploymentsMixin, viewsets.GenericViewSet):
    """Events, startup phases and engine logs of one deployment."""

    @extend_schema(parameters=[TimelineQuerySerializer], responses={200: dict, 400: dict})
    @action(detail=True, methods=["get"])
    def timeline(self, request, pk=None):
        """The portal's events and the Kubernetes Events of the deployment's objects, newest first."""
        dep = self.get_object()
        query = TimelineQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        refresh = query.validated_data["refresh"] and refresh_allowed(dep.pk)
        return Response(operating.timeline(dep, refresh=refresh))

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def phases(self, request, pk=None):
        """The latest start's phases: name, label, start, duration (s), running."""
        return Response({"phases": operating.phases(self.get_object())})

    @extend_schema(
        parameters=[LogsQuerySerializer],
        responses={(200, "application/json"): dict, (200, "text/plain"): str, 400: dict, 403: dict},
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        """The tail of each replica's engine log (bounded lines and bytes, secrets redacted);
        `download=true` answers it as one text/plain attachment."""
        dep = self.get_object()
        query = LogsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        result = operating.logs(
            dep, request.user, lines=query.validated_data.get("lines"), max_bytes=query.validated_data.get("bytes")
        )
        if query.validated_data["download"]:
            response = HttpResponse(operating.logs_text(result), content_type="text/plain; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{dep.resource_name}-logs.txt"'
            return response
        return Response(result)
