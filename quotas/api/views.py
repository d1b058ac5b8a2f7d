"""Quota API: flavors, quotas, quota-change requests (approve/reject), preview, cluster usage."""

from __future__ import annotations

from django.db.models import Sum
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, permissions, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from core.throttles import WriteThrottle
from quotas import flavors, services, tiers
from quotas.api.serializers import (
    DecisionSerializer,
    GpuFlavorSerializer,
    PreviewQuerySerializer,
    PriorityTierSerializer,
    QuotaChangeRequestSerializer,
    QuotaCreateSerializer,
    QuotaPreviewSerializer,
    QuotaSetSerializer,
    TenantQuotaSerializer,
)
from quotas.models import GpuFlavor, PriorityTier, QuotaChangeRequest, Tenant, TenantQuota, is_platform_admin


class IsPlatformAdminOrReadOnly(permissions.BasePermission):
    def has_permission(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return False
        return request.method in permissions.SAFE_METHODS or is_platform_admin(request.user)


class GpuFlavorViewSet(viewsets.ModelViewSet):
    """GPU flavors (Kueue ResourceFlavors). Everyone signed in reads; platform admins write."""

    serializer_class = GpuFlavorSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    throttle_classes = [WriteThrottle]
    lookup_field = "name"
    queryset = GpuFlavor.objects.all()
    filterset_fields = ["active", "accelerator_type"]

    # Writes go through quotas.flavors: audited (before/after, reason) and mirrored to Kueue.
    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        reason = data.pop("reason", "")
        serializer.instance = flavors.flavor_save(actor=self.request.user, values=data, reason=reason)

    def perform_update(self, serializer):
        data = dict(serializer.validated_data)
        reason = data.pop("reason", "")
        name = serializer.instance.name
        serializer.instance = flavors.flavor_save(actor=self.request.user, name=name, values=data, reason=reason)

    def perform_destroy(self, instance):
        # Quotas and deployments refer to it: retired (inactive), not deleted.
        flavors.flavor_retire(actor=self.request.user, name=instance.name, reason="Retired over the API.")


class PriorityTierViewSet(viewsets.ModelViewSet):
    """Priority tiers (Kueue WorkloadPriorityClasses). Everyone signed in reads them (a request
    names one its tenant allows); platform admins create, change and delete them."""

    serializer_class = PriorityTierSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    throttle_classes = [WriteThrottle]
    lookup_field = "name"
    queryset = PriorityTier.objects.all()

    def get_serializer_context(self):
        # Counted once per request, within the tenants the user sees.
        context = super().get_serializer_context()
        context["tier_usage"] = tiers.tier_usage(tenants=Tenant.objects.visible_to(self.request.user))
        return context

    # Writes go through quotas.tiers: audited (before/after, reason) and mirrored to Kueue.
    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        serializer.instance = tiers.tier_create(actor=self.request.user, **data)

    def perform_update(self, serializer):
        data = dict(serializer.validated_data)
        reason = data.pop("reason", "")
        name = serializer.instance.name
        serializer.instance = tiers.tier_update(actor=self.request.user, name=name, values=data, reason=reason)

    def perform_destroy(self, instance):
        tiers.tier_delete(actor=self.request.user, name=instance.name, reason="Deleted over the API.")


class TenantQuotaViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Quotas per tenant and flavor. Platform admins set them directly: POST (any tenant and
    flavor; creates the quota or changes it) or `set` on an existing one."""

    serializer_class = TenantQuotaSerializer
    filterset_fields = {"tenant__slug": ["exact"], "flavor__name": ["exact"]}
    throttle_classes = [WriteThrottle]

    def get_queryset(self):
        return TenantQuota.objects.visible_to(self.request.user).select_related("tenant", "flavor")

    @extend_schema(request=QuotaCreateSerializer, responses={201: TenantQuotaSerializer})
    def create(self, request, *args, **kwargs):
        body = QuotaCreateSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        quota = services.quota_set(tenant=data.pop("tenant"), flavor=data.pop("flavor"), actor=request.user, **data)
        return Response(TenantQuotaSerializer(quota).data, status=201)

    @extend_schema(request=QuotaSetSerializer, responses=TenantQuotaSerializer)
    @action(detail=True, methods=["post"], url_path="set")
    def set_values(self, request, pk=None):
        quota = self.get_object()
        data = QuotaSetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        quota = services.quota_set(tenant=quota.tenant, flavor=quota.flavor, actor=request.user, **data.validated_data)
        return Response(TenantQuotaSerializer(quota).data)


class QuotaChangeRequestViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Quota-change requests: tenant admins create; platform admins approve or reject."""

    serializer_class = QuotaChangeRequestSerializer
    filterset_fields = {"status": ["exact"], "tenant__slug": ["exact"], "flavor__name": ["exact"]}
    throttle_classes = [WriteThrottle]

    def get_queryset(self):
        return QuotaChangeRequest.objects.visible_to(self.request.user).select_related(
            "tenant", "flavor", "requested_by", "decided_by"
        )

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        serializer.instance = services.quota_change_request_create(
            tenant=data.pop("tenant"), flavor=data.pop("flavor"), user=self.request.user, **data
        )

    def _decide(self, request, decide, **extra):
        found = self.get_object()  # 404 for requests this user cannot see
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = decide(request_id=found.pk, approver=request.user, comment=body.validated_data["comment"])
        return Response(self.get_serializer(result).data)

    @extend_schema(request=DecisionSerializer, responses=QuotaChangeRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        return self._decide(request, services.quota_change_approve)

    @extend_schema(request=DecisionSerializer, responses=QuotaChangeRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        return self._decide(request, services.quota_change_reject)


class QuotaPreviewView(APIView):
    """Would `gpus` more GPUs of `flavor` fit the tenant's quota now?"""

    @extend_schema(parameters=[PreviewQuerySerializer], responses=QuotaPreviewSerializer)
    def get(self, request):
        query = PreviewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        tenant = get_object_or_404(Tenant.objects.visible_to(request.user), slug=query.validated_data["tenant"])
        flavor = get_object_or_404(GpuFlavor, name=query.validated_data["flavor"])
        preview = services.quota_preview(tenant=tenant, flavor=flavor, gpus=query.validated_data["gpus"])
        return Response(preview.as_dict())


def cluster_usage_rows() -> list[dict]:
    """Quota and reservations by cohort, tenant and flavor (admin cluster view, API and UI)."""
    rows = []
    for quota in TenantQuota.objects.select_related("tenant", "flavor").order_by("tenant__slug", "flavor__name"):
        rows.append(
            {
                "cohort": quota.tenant.effective_cohort,
                "tenant": quota.tenant.slug,
                "flavor": quota.flavor.name,
                "nominal_gpus": quota.nominal_gpus,
                "borrowing_limit_gpus": quota.borrowing_limit_gpus,
                "lending_limit_gpus": quota.lending_limit_gpus,
                "reserved_gpus": quota.reserved_gpus,
            }
        )
    return rows


class ClusterUsageView(APIView):
    """Platform admins: quota and reservations across tenants, with per-flavor totals."""

    @extend_schema(responses={200: dict})
    def get(self, request):
        if not is_platform_admin(request.user):
            return Response({"detail": "Only platform admins see the cluster view."}, status=403)
        totals = (
            TenantQuota.objects.values("flavor__name")
            .annotate(nominal=Sum("nominal_gpus"), reserved=Sum("reserved_gpus"))
            .order_by("flavor__name")
        )
        return Response(
            {
                "rows": cluster_usage_rows(),
                "totals": [
                    {"flavor": t["flavor__name"], "nominal_gpus": t["nominal"], "reserved_gpus": t["reserved"]}
                    for t in totals
                ],
            }
        )


PREVIEW_PARAMS = [OpenApiParameter("tenant", str), OpenApiParameter("flavor", str), OpenApiParameter("gpus", int)]
