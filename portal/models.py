"""Portal-wide models: named API tokens, SCIM groups (the audit log is core.models.AuditEvent)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from knox.models import AbstractAuthToken


class ApiToken(AbstractAuthToken):
    """A named API token. knox stores only its SHA-512 digest; the secret is shown once."""

    name = models.CharField(max_length=100)
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]


class ScimGroup(models.Model):
    """A group the identity provider pushed over SCIM (portal.scim). Its display name says what
    membership grants: "tenant-slug:role", a group named in OIDC_GROUP_ROLES, or one of
    OIDC_PLATFORM_ADMIN_GROUPS; any other name is kept and grants nothing."""

    display_name = models.CharField(max_length=255, unique=True)
    external_id = models.CharField(max_length=255, blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="scim_groups", blank=True)
    created = models.DateTimeField(auto_now_add=True)
    modified = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return self.display_name
