"""Platform admins' cluster API: what the last sweep read (pending workloads, orphans), and
deleting an orphan — the same service the Cluster page's confirm form calls."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.throttles import WriteThrottle
from deployments.reconcile import last_orphans, last_pending_workloads, orphan_delete
from quotas.models import is_platform_admin
from runtime.backends import presence
from runtime.k8s import ClusterError
from runtime.platform import platform_spec
from runtime.preemption import preemption_settings

ADMINS_ONLY = {"detail": "Only platform admins see and clean up the cluster.", "code": "permission_denied"}


class OrphanSerializer(serializers.Serializer):
    backend = serializers.CharField(max_length=20)
    namespace = serializers.SlugField(max_length=63)
    name = serializers.CharField(max_length=253)


class ClusterSweepView(APIView):
    """The last sweep's Kueue pending workloads per ClusterQueue, the orphans it found and which
    backends it found installed on the cluster; the queueing strategy and preemption every tenant
    ClusterQueue gets, each preemption field with its value, its setting and the behaviour it
    implies (runtime.preemption, as the Cluster page shows them)."""

    @extend_schema(responses={200: dict, 403: dict})
    def get(self, request):
        if not is_platform_admin(request.user):
            return Response(ADMINS_ONLY, status=status.HTTP_403_FORBIDDEN)
        return Response(
            {
                "pending": last_pending_workloads(),
                "orphans": last_orphans(),
                "backends": presence(),
                "queueing_strategy": settings.KUEUE_QUEUEING_STRATEGY,
                "preemption": preemption_settings(platform_spec()),
            }
        )


class ClusterReadinessView(APIView):
    """Is the cluster set up for the portal: each check green / amber / red, with the fix."""

    @extend_schema(responses={200: dict, 403: dict})
    def get(self, request):
        if not is_platform_admin(request.user):
            return Response(ADMINS_ONLY, status=status.HTTP_403_FORBIDDEN)
        from portal.readiness import cluster_readiness

        return Response(cluster_readiness())


class OrphanDeleteView(APIView):
    """Delete one object the last sweep reported as orphaned (checked again first; audited)."""

    throttle_classes = [WriteThrottle]

    @extend_schema(request=OrphanSerializer, responses={200: dict, 403: dict, 404: dict, 409: dict})
    def post(self, request):
        if not is_platform_admin(request.user):
            return Response(ADMINS_ONLY, status=status.HTTP_403_FORBIDDEN)
        body = OrphanSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            deleted = orphan_delete(actor=request.user, **body.validated_data)
        except LookupError as error:
            return Response({"detail": str(error), "code": "not_found"}, status=status.HTTP_404_NOT_FOUND)
        except ValueError as error:
            return Response({"detail": str(error), "code": "conflict"}, status=status.HTTP_409_CONFLICT)
        except ClusterError as error:
            return Response({"detail": str(error), "code": "cluster_error"}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        return Response({"deleted": deleted})
