"""Liveness and readiness probes."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache


@never_cache
def healthz(request):
    """The process is up and serving requests (no dependencies checked)."""
    return JsonResponse({"status": "ok"})


def _check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return None
    except Exception as exc:  # any failure means "not ready"; the message says which
        return f"{type(exc).__name__}: {exc}"[:200]


def _check_broker() -> str | None:
    from portal.celery import app

    try:
        with app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
            # ensure_connection with max_retries=0 fails fast when the broker is down.
            conn.ensure_connection(max_retries=0, timeout=settings.CELERY_BROKER_CONNECTION_TIMEOUT)
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]


@never_cache
def readyz(request):
    """Ready when the database and the broker answer; 503 with the failing checks otherwise."""
    checks = {"database": _check_database(), "broker": _check_broker()}
    ready = all(error is None for error in checks.values())
    body = {"status": "ready" if ready else "unavailable",
            "checks": {name: error or "ok" for name, error in checks.items()}}
    return JsonResponse(body, status=200 if ready else 503)
