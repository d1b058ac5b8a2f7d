"""Platform administration over the API: tenants (create, edit, policy, archive) and their members.

Thin callers of the same services as the platform pages (quotas.tenants, quotas.members,
deployments.archive). Lives in portal because archiving drives deployments, which quotas may not
import. Who may do what is decided by the services (403), what a user may see by
`Tenant.objects.visible_to` (404).
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.exceptions import Forbidden
from core.throttles import WriteThrottle
from deployments.archive import tenant_archive
from quotas import members, tenants
from quotas.api.tenant_serializers import (
    ArchiveSerializer,
    MemberAddSerializer,
    MemberRoleSerializer,
    MembershipSerializer,
    PolicySerializer,
    ReasonSerializer,
    TenantSerializer,
    TenantWriteSerializer,
)
from quotas.models import Tenant

USERNAME = r"[\w.@+-]{1,150}"  # Django's username characters


def _body(serializer_class, request, **kwargs) -> dict:
    body = serializer_class(data=request.data, **kwargs)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


class TenantViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Tenants you belong to (all of them for platform admins). Platform admins create, edit,
    set the policy of and archive tenants; tenant admins manage their own tenant's members."""

    serializer_class = TenantSerializer
    lookup_field = "slug"
    throttle_classes = [WriteThrottle]
    http_method_names = ["get", "post", "patch", "put", "delete", "head", "options"]

    def get_queryset(self):
        return Tenant.objects.visible_to(self.request.user).prefetch_related(
            "allowed_flavors", "allowed_models", "allowed_tiers", "auto_approve_tiers"
        )

    def _tenant_response(self, tenant: Tenant, code=status.HTTP_200_OK) -> Response:
        tenant = self.get_queryset().get(pk=tenant.pk)
        return Response(TenantSerializer(tenant, context=self.get_serializer_context()).data, status=code)

    @extend_schema(request=TenantWriteSerializer, responses={201: TenantSerializer})
    def create(self, request, *args, **kwargs):
        data = _body(TenantWriteSerializer, request)
        tenant = tenants.tenant_create(actor=request.user, **data)
        return self._tenant_response(tenant, status.HTTP_201_CREATED)

    @extend_schema(request=TenantWriteSerializer, responses=TenantSerializer)
    def partial_update(self, request, *args, **kwargs):
        tenant = self.get_object()
        data = _body(TenantWriteSerializer, request, partial=True)
        tenant = tenants.tenant_update(tenant_id=tenant.pk, actor=request.user, **data)
        return self._tenant_response(tenant)

    @extend_schema(methods=["GET"], responses=PolicySerializer)
    @extend_schema(methods=["PUT"], request=PolicySerializer, responses=PolicySerializer)
    @action(detail=True, methods=["get", "put"])
    def policy(self, request, slug=None):
        """The tenant's request policy: auto-approve ceiling, GPUs per deployment, allowed flavors, models and
        priority tiers (and the tiers it auto-approves)."""
        tenant = self.get_object()
        if request.method == "PUT":
            data = _body(PolicySerializer, request)
            tenant = tenants.tenant_policy_set(tenant_id=tenant.pk, actor=request.user, **data)
        return Response(PolicySerializer(tenant).data)

    @extend_schema(request=ArchiveSerializer, responses=TenantSerializer)
    @action(detail=True, methods=["post"])
    def archive(self, request, slug=None):
        """Stop the tenant's deployments, release its quota and archive it (confirm with its slug)."""
        tenant = self.get_object()
        data = _body(ArchiveSerializer, request)
        tenant = tenant_archive(tenant_id=tenant.pk, actor=request.user, **data)
        return self._tenant_response(tenant)

    @extend_schema(methods=["GET"], responses=MembershipSerializer(many=True))
    @extend_schema(methods=["POST"], request=MemberAddSerializer, responses={201: MembershipSerializer})
    @action(detail=True, methods=["get", "post"], pagination_class=None)  # a plain list, not a page
    def members(self, request, slug=None):
        """The tenant's members (tenant admins and platform admins); add one by username or e-mail."""
        tenant = self.get_object()
        if not members.can_manage_members(tenant, request.user):
            raise Forbidden("Only tenant admins see and manage the member list.")
        if request.method == "POST":
            membership = members.membership_add(
                tenant=tenant, actor=request.user, **_body(MemberAddSerializer, request)
            )
            return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)
        rows = tenant.memberships.select_related("user").order_by("user__username")
        return Response(MembershipSerializer(rows, many=True).data)

    @extend_schema(methods=["PATCH"], request=MemberRoleSerializer, responses=MembershipSerializer)
    @extend_schema(methods=["DELETE"], responses={204: None})  # an optional {"reason"} body is read
    @action(detail=True, methods=["patch", "delete"], url_path=f"members/(?P<username>{USERNAME})", url_name="member")
    def member(self, request, slug=None, username=None):
        """Change a member's role, or remove them."""
        tenant = self.get_object()
        if not members.can_manage_members(tenant, request.user):
            raise Forbidden("Only tenant admins see and manage the member list.")
        get_object_or_404(tenant.memberships, user__username=username)
        if request.method == "DELETE":
            members.membership_remove(
                tenant=tenant, actor=request.user, username=username, **_body(ReasonSerializer, request)
            )
            return Response(status=status.HTTP_204_NO_CONTENT)
        data = _body(MemberRoleSerializer, request)
        membership = members.membership_set_role(tenant=tenant, actor=request.user, username=username, **data)
        return Response(MembershipSerializer(membership).data)
