"""API keys for deployment endpoints: stored as a SHA-256 digest, shown once, revocable."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.db.models import Exists, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from quotas.models import Membership, TenantOwnedQuerySet, platform_admins_q


class ApiKeyQuerySet(TenantOwnedQuerySet):
    def active(self):
        """Keys that authenticate now: not revoked and not expired."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())

    def with_month_usage(self):
        """Each key annotated with this month's `month_requests`, `month_prompt_tokens`,
        `month_completion_tokens` and `month_unsplit_tokens` (KeyUsageDay, counted by
        access.key_usage and access.gateway_usage; 0 without rows)."""
        first = timezone.localdate().replace(day=1)
        rows = KeyUsageDay.objects.filter(key=OuterRef("pk"), day__gte=first).values("key")
        figures = {
            f"month_{field}": Coalesce(Subquery(rows.annotate(total=Sum(field)).values("total")), 0)
            for field in ("requests", "prompt_tokens", "completion_tokens", "unsplit_tokens")
        }
        return self.annotate(**figures)

    def unentitled(self):
        """Keys whose maker may no longer mint them: the maker is deleted or deactivated, or is
        neither a platform admin nor a member of the key's tenant in a role that mints
        (access.permissions.minting_roles)."""
        from access.permissions import minting_roles

        member = Membership.objects.filter(
            tenant=OuterRef(OuterRef("tenant")), user=OuterRef("pk"), role__in=minting_roles()
        )
        maker = get_user_model().objects.filter(pk=OuterRef("created_by"), is_active=True)
        return self.exclude(Exists(maker.filter(platform_admins_q() | Exists(member))))


class ApiKey(models.Model):
    """A key for one deployment's endpoint, or for every endpoint of its tenant.

    Only the SHA-256 digest of the key is kept: the key is 32 random bytes, so a plain digest is
    as strong as a slow hash would be and lets the gateway-side copy (a Secret) and this row be
    matched without the key. `prefix` is the first characters, shown to tell keys apart.
    """

    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.PROTECT, related_name="api_keys")
    # None: valid for every deployment of the tenant. A deleted deployment's keys go with it.
    deployment = models.ForeignKey(
        "deployments.ModelDeployment", null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="api_keys_created"
    )
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys_revoked"
    )
    # Where the key was published: the gateway Secret's state ("" = not exposed on a Gateway).
    gateway_state = models.CharField(max_length=20, blank=True, default="")
    # The last request the local gateway logged for it (access.key_usage); the cluster Gateway does not say.
    last_used = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["tenant", "revoked_at"], name="access_key_tenant_revoked")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def scope(self) -> str:
        return "deployment" if self.deployment_id else "tenant"

    @property
    def status(self) -> str:
        if self.revoked_at:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "active"


class KeyUsageDay(models.Model):
    """Requests and tokens one API key sent to one deployment on one local day, as the local
    gateway logged them (access.key_usage) or the cluster Gateway's Limitador counted them
    (access.gateway_usage). `key` None: the portal's own Try-it key."""

    key = models.ForeignKey(ApiKey, null=True, on_delete=models.CASCADE, related_name="usage_days")
    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="+")
    deployment = models.ForeignKey("deployments.ModelDeployment", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    requests = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)  # answered with a status of 400 or more
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    # Tokens counted without an input/output split: the cluster Gateway reports each response's
    # `usage.total_tokens` only (runtime.manifests.telemetry).
    unsplit_tokens = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["key", "deployment", "day"], nulls_distinct=False, name="key_usage_one_row_per_key_day"
            )
        ]
        indexes = [models.Index(fields=["tenant", "day"])]

    def __str__(self) -> str:
        return f"key {self.key_id} → {self.deployment_id} on {self.day}"


class GatewaySeries(models.Model):
    """The value a Limitador counter series had when last read (access.gateway_usage): the next
    read counts only what it grew by (or all of it, after a restart set it back)."""

    series = models.CharField(max_length=64, unique=True)  # runtime.exposition.limitador digest
    value = models.FloatField(default=0.0)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.series[:12]} at {self.value}"


class UsageLogCursor(models.Model):
    """How far a usage log has been read: the time of the last record counted (access.key_usage)."""

    source = models.CharField(max_length=40, unique=True)
    position = models.FloatField(default=0.0)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.source} read to {self.position}"
