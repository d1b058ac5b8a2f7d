"""What the portal keeps of a tenant's credentials: that they are set, by whom, when, and how to
tell them apart. Never the values: those live only in the tenant's Secret in its namespace
(quotas.tenant_secrets writes it; the portal never reads it back).

The fingerprint is the last 4 characters of the Hugging Face token, or of the S3 access key id
(an identifier, not the secret: nothing of the secret access key is kept). A Hugging Face token
is "hf_" and 34 random characters, so its last 4 leave 30 unknown: enough to tell which token was
set ("ends in …", as the token pages of Hugging Face and GitHub show) and no help to a guesser.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

FINGERPRINT_CHARS = 4


class SecretKind(models.TextChoices):
    HF_TOKEN = "hf_token", "Hugging Face token"
    S3 = "s3", "S3 credentials"


class TenantSecret(models.Model):
    """One credential Secret of a tenant, as the portal last wrote it (a row exists exactly while
    the Secret does: set writes the Secret first, delete removes it first, both under the
    tenant row's lock)."""

    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="secrets")
    kind = models.CharField(max_length=16, choices=SecretKind.choices)
    fingerprint = models.CharField(
        max_length=FINGERPRINT_CHARS, help_text="The last characters of the token or access key id."
    )
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    set_by_name = models.CharField(max_length=150, blank=True, help_text="Kept when the user row goes.")
    set_at = models.DateTimeField()

    class Meta:
        ordering = ["tenant", "kind"]
        constraints = [models.UniqueConstraint(fields=["tenant", "kind"], name="quotas_tenantsecret_one_per_kind")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of {self.tenant_id} (ends in {self.fingerprint})"
