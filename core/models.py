"""The audit log: who did what, to which object, when, why and from where.

Each row is also written, once its transaction commits, to the `audit` logger as one record
carrying the row (`record.audit`): with LOG_FORMAT=json (core.jsonlog) the stdout of every
process is a stream a SIEM can ingest. Rows older than AUDIT_RETENTION_DAYS are deleted by
core.tasks.purge_audit_task.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

log = logging.getLogger("audit")

# Where the current request comes from: (client address, user agent), set by the portal's
# middleware (portal.auditing) so every row written while serving a request carries them.
# Tasks and commands have no origin.
request_origin: ContextVar[tuple[str | None, str]] = ContextVar("audit_request_origin", default=(None, ""))
USER_AGENT_MAX = 512


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
    # The client address (portal.login.client_ip: TRUSTED_PROXY_COUNT) and user agent of the
    # request that made the change; empty for tasks and commands.
    ip_address = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=USER_AGENT_MAX, blank=True)

    class Meta:
        # The table and index keep the names they had in the portal app (moved without a copy).
        db_table = "portal_auditevent"
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="portal_audi_object__349d36_idx")]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type}:{self.object_id}"

    def as_record(self) -> dict:
        """The row as plain JSON values: the one shape of the export (JSON lines, CSV) and the log."""
        return {
            "id": self.pk,
            "created": self.created.isoformat(),
            "actor": self.actor.get_username() if self.actor_id and self.actor else None,
            "actor_name": self.actor_name,
            "action": self.action,
            "tenant": self.tenant.slug if self.tenant_id and self.tenant else None,
            "object_type": self.object_type,
            "object_id": self.object_id,
            "reason": self.reason,
            "changes": self.changes,
            "ip_address": self.ip_address,
            "user_agent": self.user_agent,
        }


# The columns of the CSV export, in the order of `AuditEvent.as_record`.
RECORD_FIELDS = (
    "id",
    "created",
    "actor",
    "actor_name",
    "action",
    "tenant",
    "object_type",
    "object_id",
    "reason",
    "changes",
    "ip_address",
    "user_agent",
)


def audit(
    *,
    actor,
    action: str,
    obj,
    tenant=None,
    reason: str = "",
    changes: dict | None = None,
    object_id: str | None = None,
    origin: tuple[str | None, str] | None = None,
):
    """Record one audit event for `obj` (call inside the transaction that made the change).
    `actor` is a user, a non-user actor's name (e.g. "policy"), or None for the system. `obj`
    may be a model class with `object_id` "" when there is no row (a sign-in to no account).
    `origin` (address, user agent) defaults to the current request's."""
    is_user = bool(getattr(actor, "pk", None))
    ip_address, user_agent = origin or request_origin.get()
    event = AuditEvent.objects.create(
        actor=actor if is_user else None,
        actor_name=actor.get_username() if is_user else str(actor or "system"),
        action=action,
        tenant=tenant,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk) if object_id is None else object_id,
        reason=reason,
        changes=changes or {},
        ip_address=ip_address,
        user_agent=user_agent[:USER_AGENT_MAX],
    )
    # After the commit: a change that rolls back was never made, and the stream says so by silence.
    transaction.on_commit(partial(stream_audit_event, event))
    return event


def stream_audit_event(event: AuditEvent) -> None:
    """Write one committed audit row to the `audit` logger (the SIEM's stream)."""
    log.info("%s %s:%s", event.action, event.object_type, event.object_id, extra={"audit": event.as_record()})


PURGE_BATCH = 5000


def audit_purge(*, older_than_days: int, now=None) -> int:
    """Delete audit rows created more than `older_than_days` ago (0: keep everything), in
    batches so no statement holds many row locks or runs long; returns how many went. The purge
    itself is audited when it deleted anything."""
    if older_than_days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    deleted = 0
    while True:
        batch = list(
            AuditEvent.objects.filter(created__lt=cutoff).order_by("id").values_list("id", flat=True)[:PURGE_BATCH]
        )
        if not batch:
            break
        deleted += AuditEvent.objects.filter(id__in=batch).delete()[0]
    if deleted:
        audit(
            actor=None,
            action="audit.purge",
            obj=AuditEvent,
            object_id="",
            reason=f"Older than AUDIT_RETENTION_DAYS={older_than_days}.",
            changes={"before": cutoff.isoformat(), "deleted": deleted},
        )
    return deleted
