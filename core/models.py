"""The audit log: who did what, to which object, when and why."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    """Who did what, to which object, when and why. Written by services, never edited."""

    created = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who acted, as text: the username, "policy" (a tenant's auto-approve policy) or "system". Kept
    # when the user row goes, and the only record of actors that are not users.
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, db_index=True)  # e.g. "quota_change.approve"
    tenant = models.ForeignKey(
        "quotas.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    reason = models.TextField(blank=True)
    changes = models.JSONField(default=dict, blank=True)

    class Meta:
        # The table and index keep the names they had in the portal app (moved without a copy).
        db_table = "portal_auditevent"
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="portal_audi_object__349d36_idx")]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type}:{self.object_id}"


def audit(
    *, actor, action: str, obj, tenant=None, reason: str = "", changes: dict | None = None, object_id: str | None = None
):
    """Record one audit event for `obj` (call inside the transaction that made the change).
    `actor` is a user, a non-user actor's name (e.g. "policy"), or None for the system."""
    is_user = bool(getattr(actor, "pk", None))
    return AuditEvent.objects.create(
        actor=actor if is_user else None,
        actor_name=actor.get_username() if is_user else str(actor or "system"),
        action=action,
        tenant=tenant,
        object_type=obj._meta.label_lower,
        object_id=object_id or str(obj.pk),
        reason=reason,
        changes=changes or {},
    )
