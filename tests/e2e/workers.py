"""The test process's broker: its URL and a purge before a test starts a worker (the worker itself
is `tests.support.processes.celery_worker`)."""

from __future__ import annotations

import redis


def broker_url() -> str:
    """The test process's own broker (a Redis database of the tests' own, see pyproject)."""
    from django.conf import settings

    return settings.CELERY_BROKER_URL


def purge_broker() -> None:
    """Drop messages earlier tests left (requeues whose deployments rolled back)."""
    redis.Redis.from_url(broker_url()).flushdb()
