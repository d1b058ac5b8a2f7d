"""API keys for deployment endpoints: stored as a SHA-256 digest, shown once, revocable."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.db.models import Exists, OuterRef
from django.utils import timezone

from quotas.models import Membership, TenantOwnedQuerySet, platform_admins_q


class ApiKeyQuerySet(TenantOwnedQuerySet):
    def active(self):
        """Keys that authenticate now: not revoked and not expired."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())

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
    last_used = models.DateTimeField(null=True, blank=True)  # not provided by the gateway (docs/install.md, step 8)

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
