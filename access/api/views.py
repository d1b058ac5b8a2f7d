"""/api/v1/keys/: list, mint (the key is in the 201 answer, once), read, revoke."""

from __future__ import annotations

import re

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from access.api.serializers import ApiKeyCreatedSerializer, ApiKeyCreateSerializer, ApiKeySerializer, RevokeSerializer
from access.models import ApiKey
from access.services import key_mint, key_revoke, key_tenant
from core.exceptions import DomainError
from core.params import query_int
from core.throttles import WriteThrottle
from deployments.models import ModelDeployment
from quotas.models import Tenant

SLUG = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LIST_FILTERS = [
    OpenApiParameter("tenant", str, description="Tenant slug"),
    OpenApiParameter("deployment", int, description="Keys scoped to this deployment"),
    OpenApiParameter("status", str, enum=["active", "revoked", "expired"]),
]


class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """API keys of the tenants you belong to (viewers see names and dates, never a key)."""

    serializer_class = ApiKeySerializer
    throttle_classes = [WriteThrottle]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return ApiKey.objects.none()
        keys = ApiKey.objects.visible_to(self.request.user).select_related("tenant", "deployment", "created_by")
        return keys.with_month_usage()

    def filter_queryset(self, queryset):
        return filter_keys(queryset, self.request.query_params)

    @extend_schema(parameters=LIST_FILTERS)
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyCreatedSerializer})
    def create(self, request, *args, **kwargs):
        body = ApiKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        tenant = key_tenant(
            tenant=get_object_or_404(Tenant.objects.visible_to(request.user), slug=data["tenant"])
            if data.get("tenant")
            else None,
            deployment=_visible_deployment(request.user, data.get("deployment")),
        )
        key, plaintext = key_mint(
            user=request.user,
            tenant=tenant,
            name=data["name"],
            deployment_id=data.get("deployment"),
            expires_in_days=data["expires_in_days"],
        )
        key.key = plaintext
        return Response(ApiKeyCreatedSerializer(key, context={"request": request}).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RevokeSerializer, responses={200: ApiKeySerializer})
    @action(detail=True, methods=["post"], serializer_class=RevokeSerializer)
    def revoke(self, request, pk=None):
        """Revoke the key: the gateway and the local engines stop accepting it within moments."""
        key = self.get_object()
        body = RevokeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = key_revoke(user=request.user, key_id=key.pk, reason=body.validated_data["reason"])
        return Response(ApiKeySerializer(key, context={"request": request}).data)


def _visible_deployment(user, deployment_id: int | None) -> ModelDeployment | None:
    """The deployment a key is asked for, among those the user sees (400 on the field otherwise:
    another tenant's deployment and a missing one read the same)."""
    if deployment_id is None:
        return None
    found = ModelDeployment.objects.visible_to(user).select_related("tenant").filter(pk=deployment_id).first()
    if found is None:
        raise DomainError("No such deployment.", field="deployment")
    return found


def filter_keys(queryset, params):
    """The one filter for the key list (API and page): tenant, deployment, status."""
    from django.db.models import Q
    from django.utils import timezone

    tenant = str(params.get("tenant") or "")
    if tenant:  # a slug or nothing matches (a NUL or an overlong value never reaches the database)
        queryset = queryset.filter(tenant__slug=tenant) if SLUG.match(tenant) else queryset.none()
    deployment = query_int(params, "deployment", minimum=1)  # 400 on anything but a whole number
    if deployment is not None:
        queryset = queryset.filter(deployment_id=deployment)
    now = timezone.now()
    wanted = params.get("status")
    if wanted == "active":
        queryset = queryset.filter(revoked_at__isnull=True, expires_at__gt=now)
    elif wanted == "revoked":
        queryset = queryset.filter(revoked_at__isnull=False)
    elif wanted == "expired":
        queryset = queryset.filter(~Q(expires_at__gt=now), revoked_at__isnull=True)
    return queryset
