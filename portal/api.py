"""API for the signed-in user: who am I, my API tokens, the audit log (tenants: portal.platform_api)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from knox.models import get_token_model
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from core.limits import check_room
from core.models import RECORD_FIELDS, AuditEvent, audit
from core.throttles import WriteThrottle
from quotas.choices import Role
from quotas.models import Membership, is_platform_admin

ApiToken = get_token_model()


class TokenSerializer(serializers.ModelSerializer):
    name = serializers.RegexField(
        r"^[\w .:@-]{1,100}$", max_length=100, error_messages={"invalid": "Letters, digits, spaces and . : @ - _ only."}
    )
    expires_in_days = serializers.IntegerField(min_value=1, max_value=3650, write_only=True, required=False)
    id = serializers.CharField(source="token_key", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "created", "expiry", "last_used", "expires_in_days"]
        read_only_fields = ["created", "expiry", "last_used"]


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; only its digest is stored.")

    class Meta(TokenSerializer.Meta):
        fields = TokenSerializer.Meta.fields + ["token"]


@transaction.atomic
def token_create(*, user, name: str, expires_in_days: int | None = None):
    """Create a named token; returns (instance, secret). The secret is never stored or logged.
    At most MAX_API_TOKENS_PER_USER unexpired tokens (core.limits), counted under the user's row lock."""
    get_user_model().objects.select_for_update(no_key=True).get(pk=user.pk)  # serializes this user's creations
    unexpired = ApiToken.objects.filter(Q(expiry__isnull=True) | Q(expiry__gt=timezone.now()), user=user)
    check_room(held=unexpired.count(), setting="MAX_API_TOKENS_PER_USER", what="unexpired API tokens of yours")
    ttl = timedelta(days=expires_in_days) if expires_in_days else settings.REST_KNOX["TOKEN_TTL"]
    instance, secret = ApiToken.objects.create(user=user, expiry=ttl, name=name)
    # The token's primary key is its digest: audit by the public prefix instead.
    audit(
        actor=user,
        action="token.create",
        obj=instance,
        object_id=instance.token_key,
        changes={"name": name, "prefix": instance.token_key},
    )
    return instance, secret


def token_revoke(*, user, token, reason: str = "") -> None:
    """Delete a token (it stops authenticating at once); `user` is the actor: the token's holder,
    or "system" when portal.deprovision revokes a leaver's tokens."""
    audit(
        actor=user,
        action="token.revoke",
        obj=token,
        object_id=token.token_key,
        reason=reason,
        changes={"name": token.name, "prefix": token.token_key},
    )
    token.delete()


class TokenViewSet(mixins.ListModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Your API tokens: create (the secret is shown once), list, revoke."""

    serializer_class = TokenSerializer
    lookup_field = "token_key"
    throttle_classes = [WriteThrottle]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user, expiry__gt=timezone.now()) | ApiToken.objects.filter(
            user=self.request.user, expiry__isnull=True
        )

    @extend_schema(responses={201: TokenCreatedSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        instance, secret = token_create(user=request.user, **serializer.validated_data)
        instance.token = secret
        return Response(TokenCreatedSerializer(instance).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        token_revoke(user=self.request.user, token=instance)


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None, allow_null=True, read_only=True)
    tenant = serializers.CharField(source="tenant.slug", default=None, allow_null=True, read_only=True)

    class Meta:
        model = AuditEvent
        fields = list(RECORD_FIELDS)  # the same columns as the exports
        extra_kwargs = {
            "actor_name": {
                "help_text": 'Who acted: the username, "policy" (the tenant\'s auto-approve policy) or "system".'
            }
        }


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log: platform admins see everything, tenant admins their tenant's entries."""

    serializer_class = AuditEventSerializer
    filterset_fields = ["action", "object_type", "object_id"]

    def get_queryset(self):
        user = self.request.user
        qs = AuditEvent.objects.select_related("actor", "tenant")
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return qs.none()
        if is_platform_admin(user):
            return qs
        admin_of = Membership.objects.filter(user=user, role=Role.TENANT_ADMIN).values("tenant")
        return qs.filter(tenant__in=admin_of)


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    platform_admin = serializers.BooleanField()
    tenants = serializers.DictField(child=serializers.CharField())


@extend_schema(responses=MeSerializer)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def me(request):
    """Who the credentials belong to, and their role per tenant."""
    roles = dict(Membership.objects.filter(user=request.user).values_list("tenant__slug", "role"))
    return Response(
        {"username": request.user.username, "platform_admin": is_platform_admin(request.user), "tenants": roles}
    )
