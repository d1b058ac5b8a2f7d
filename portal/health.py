"""Liveness and readiness probes."""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from rest_framework.exceptions import APIException

from portal.auth import TokenAuthentication
from quotas.models import is_platform_admin


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


def _caller_is_platform_admin(request) -> bool:
    """A platform admin signed in to the UI, or presenting an API token. A wrong token counts as a
    failed sign-in (portal.auth) and reads as anonymous here; with the database down nobody can be
    recognised, so everyone is anonymous."""
    try:
        user = request.user
        if not user.is_authenticated:
            user = (TokenAuthentication().authenticate(request) or (None, None))[0]
        return is_platform_admin(user)
    except (DatabaseError, APIException):
        return False


@never_cache
def readyz(request):
    """200 when the database and the broker answer, 503 otherwise. Probes and other anonymous
    callers get the verdict only: the checks' errors name hosts, ports and drivers. Platform
    admins also get each check's result."""
    checks = {"database": _check_database(), "broker": _check_broker()}
    ready = all(error is None for error in checks.values())
    body = {"status": "ready" if ready else "unavailable"}
    if _caller_is_platform_admin(request):
        body["checks"] = {name: error or "ok" for name, error in checks.items()}
    return JsonResponse(body, status=200 if ready else 503)
