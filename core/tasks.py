"""Celery options shared by the apps' tasks."""

from __future__ import annotations

from django.db import InterfaceError, OperationalError

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
