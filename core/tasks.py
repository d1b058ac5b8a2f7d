"""Celery options shared by the apps' tasks, and the audit log's retention task."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from core.models import audit_purge
from runtime.k8s import TransientClusterError

# Retried: cluster hiccups and database blips (a dropped connection, a locked SQLite file in the
# demo). Everything else is a bug or a permanent refusal and is recorded, not retried.
RETRY = dict(
    acks_late=True,
    autoretry_for=(TransientClusterError, OperationalError, InterfaceError),
    retry_backoff=2,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=8,
)


@shared_task(**RETRY)
def purge_audit_task() -> int:
    """Delete audit rows past AUDIT_RETENTION_DAYS. Safe to run any number of times."""
    return audit_purge(older_than_days=settings.AUDIT_RETENTION_DAYS)
