"""API-key serializers: metadata for everyone who may list; the key itself only in the mint answer."""

from __future__ import annotations

from rest_framework import serializers

from access.models import ApiKey
from access.permissions import may_revoke
from access.services import DEFAULT_DAYS, MAX_DAYS, NAME_MESSAGE


class ApiKeySerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    deployment = serializers.IntegerField(source="deployment_id", read_only=True, allow_null=True)
    deployment_name = serializers.CharField(source="deployment.name", read_only=True, default=None)
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    scope = serializers.CharField(read_only=True, help_text='"deployment" or "tenant".')
    status = serializers.CharField(read_only=True, help_text='"active", "expired" or "revoked".')
    can_revoke = serializers.SerializerMethodField()
    # This month's use: the local gateway's log (access.key_usage) splits input and output tokens;
    # the cluster Gateway's counters (access.gateway_usage) report each response's total only.
    month_requests = serializers.SerializerMethodField(help_text="Requests this month.")
    month_prompt_tokens = serializers.SerializerMethodField(help_text="Prompt tokens this month (local gateway).")
    month_completion_tokens = serializers.SerializerMethodField(
        help_text="Completion tokens this month (local gateway)."
    )
    month_unsplit_tokens = serializers.SerializerMethodField(
        help_text="Tokens this month counted without an input/output split (the cluster Gateway)."
    )
    gateway_state = serializers.CharField(
        read_only=True,
        help_text='Where the key is published: "pending", "published" (gateway Secret), "local" (local engines '
        'only, no Gateway configured), "failed", "expiring" or "withdrawn".',
    )

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "tenant",
            "deployment",
            "deployment_name",
            "name",
            "prefix",
            "scope",
            "status",
            "created",
            "created_by",
            "expires_at",
            "revoked_at",
            "gateway_state",
            "last_used",
            "month_requests",
            "month_prompt_tokens",
            "month_completion_tokens",
            "month_unsplit_tokens",
            "can_revoke",
        ]
        read_only_fields = fields

    def get_month_requests(self, key: ApiKey) -> int:
        return getattr(key, "month_requests", 0)

    def get_month_prompt_tokens(self, key: ApiKey) -> int:
        return getattr(key, "month_prompt_tokens", 0)

    def get_month_completion_tokens(self, key: ApiKey) -> int:
        return getattr(key, "month_completion_tokens", 0)

    def get_month_unsplit_tokens(self, key: ApiKey) -> int:
        return getattr(key, "month_unsplit_tokens", 0)

    def get_can_revoke(self, key: ApiKey) -> bool:
        request = self.context.get("request")
        return bool(request) and key.revoked_at is None and may_revoke(request.user, key)


class ApiKeyCreateSerializer(serializers.Serializer):
    tenant = serializers.RegexField(
        r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        max_length=63,
        required=False,
        help_text="The tenant's slug; may be left out with a deployment (the key is minted in its tenant).",
    )
    deployment = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**31 - 1,
        help_text="Omit for a tenant-wide key. A deployment of another tenant than `tenant` is a 400.",
    )
    name = serializers.RegexField(r"^[\w .:@-]{1,100}$", max_length=100, error_messages={"invalid": NAME_MESSAGE})
    expires_in_days = serializers.IntegerField(min_value=1, max_value=MAX_DAYS, default=DEFAULT_DAYS)


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="Shown once: only its SHA-256 digest is stored.")

    class Meta(ApiKeySerializer.Meta):
        fields = ApiKeySerializer.Meta.fields + ["key"]
        read_only_fields = fields


class RevokeSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
