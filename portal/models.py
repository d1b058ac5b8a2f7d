"""Portal-wide models: named API tokens (the audit log is core.models.AuditEvent)."""

from __future__ import annotations

from django.db import models
from knox.models import AbstractAuthToken


class ApiToken(AbstractAuthToken):
    """A named API token. knox stores only its SHA-512 digest; the secret is shown once."""

    name = models.CharField(max_length=100)
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
