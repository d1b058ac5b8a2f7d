"""API keys for deployment endpoints: stored as a SHA-256 digest, shown once, revocable."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from quotas.models import TenantOwnedQuerySet


class ApiKeyQuerySet(TenantOwnedQuerySet):
    def active(self):
        """Keys that authenticate now: not revoked and not expired."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())


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
    last_used = models.DateTimeField(null=True, blank=True)  # not provided by the gateway (README)

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
