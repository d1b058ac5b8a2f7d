"""Where audit rows come from, and sign-ins in the audit log.

`AuditOriginMiddleware` gives every row written while serving a request its client address (the
trusted-proxy rule of portal.login.client_ip) and user agent. Sign-ins are audited from Django's
own signals, so every door is covered without a line in it: the sign-in form, /admin/login/,
OpenID Connect (mozilla-django-oidc logs in through django.contrib.auth) and API tokens
(portal.auth sends `user_login_failed` for django-axes):

* `signin.success`: actor the person, changes {"method"}: password, oidc, or the backend's name.
* `signin.failure`: actor "anonymous", the account tried (when it exists) as the object, changes
  {"method", "username", "locked_out"}; method password, oidc or token. Once an address is locked
  out (LOGIN_FAILURE_LIMIT) its further failures are not written: each would be a database row
  an anonymous client could make at will. The one that locks it out says `"locked_out": true`.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from core.models import USER_AGENT_MAX, audit, request_origin
from portal.login import client_ip

ANONYMOUS = "anonymous"  # the audit log's actor for a sign-in that failed
BACKEND_METHODS = {
    "django.contrib.auth.backends.ModelBackend": "password",
    "portal.oidc.PortalOIDCBackend": "oidc",
}
TOKEN_SENDER = "portal.auth"  # portal.auth.record_failure: a bad API token


def origin_of(request: HttpRequest | None) -> tuple[str | None, str]:
    """(client address or None, user agent) of a request, as the audit log stores them: an
    address that is not one (a proxy's "unknown", a zone suffix PostgreSQL's inet refuses) is
    None, and the user agent loses NUL bytes (no text column holds them) and its tail."""
    if request is None:
        return None, ""
    address = (client_ip(request) or "").split("%", 1)[0].strip()
    try:
        address = str(ipaddress.ip_address(address))
    except ValueError:
        address = None
    agent = str(request.META.get("HTTP_USER_AGENT", "")).replace("\x00", "")
    return address, agent[:USER_AGENT_MAX]


class AuditOriginMiddleware:
    """Sets core.models.request_origin for the request (after AuthenticationMiddleware)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = request_origin.set(origin_of(request))
        try:
            return self.get_response(request)
        finally:
            request_origin.reset(token)


@receiver(user_logged_in, dispatch_uid="portal.auditing.signed_in")
def _signed_in(sender, request, user, **kwargs) -> None:
    # login() has just written the backend it used into the session (its `backend` argument or
    # the one authenticate() set on the user).
    session = getattr(request, "session", None)
    backend = (session.get(BACKEND_SESSION_KEY) if session is not None else None) or getattr(user, "backend", "")
    method = BACKEND_METHODS.get(backend, backend.rpartition(".")[2] or "password")
    audit(actor=user, action="signin.success", obj=user, changes={"method": method}, origin=origin_of(request))


@receiver(user_login_failed, dispatch_uid="portal.auditing.sign_in_failed")
def _sign_in_failed(sender, credentials, request=None, **kwargs) -> None:
    if sender == TOKEN_SENDER:
        method = "token"
    else:
        method = "oidc" if "nonce" in (credentials or {}) else "password"
    sign_in_failure(request, method=method, username=(credentials or {}).get("username"))


def sign_in_failure(request: HttpRequest | None, *, method: str, username=None, reason: str = "") -> None:
    """Audit one failed sign-in (unless its address is already locked out: see the module)."""
    failures = getattr(request, "axes_failures_since_start", None)
    if isinstance(failures, int) and failures > settings.AXES_FAILURE_LIMIT:
        return
    username = username.replace("\x00", "")[:150] if isinstance(username, str) else ""
    User = get_user_model()
    account = User.objects.filter(username=username).first() if username else None
    audit(
        actor=ANONYMOUS,
        action="signin.failure",
        obj=account or User,
        object_id=None if account else "",
        reason=reason,
        changes={
            "method": method,
            "username": username,
            "locked_out": bool(getattr(request, "axes_locked_out", False)),
        },
        origin=origin_of(request),
    )
