"""Sign-in doors and their lockout (django-axes): the client address, the 429 answer, the form view.

axes counts failed sign-ins per client address in the shared cache: the browser form and
/admin/login/ through its authentication backend and middleware, API tokens through
portal.auth.TokenAuthentication. The Nth failure (LOGIN_FAILURE_LIMIT) locks the address out until
LOGIN_COOLOFF_SECONDS pass without a failure; while locked, even the right password is refused.
"""

from __future__ import annotations

from axes.helpers import get_cache_timeout
from django.conf import settings
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, JsonResponse

LOCKED_OUT = "Too many failed sign-in attempts from this address. Try again later."


def client_ip(request: HttpRequest) -> str | None:
    """The client's address (AXES_CLIENT_IP_CALLABLE), read as DRF's throttles read it (NUM_PROXIES).

    With TRUSTED_PROXY_COUNT = 0 it is REMOTE_ADDR: X-Forwarded-For is the client's own to write.
    With N trusted proxies each appending the address it saw, the client is the Nth entry from the
    right; whatever the client put further left is ignored.
    """
    remote_addr = request.META.get("REMOTE_ADDR")
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    count = settings.TRUSTED_PROXY_COUNT
    if not count or not forwarded:
        return remote_addr
    addresses = [address.strip() for address in forwarded.split(",")]
    return addresses[-min(count, len(addresses))] or remote_addr


def lockout_response(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: 429 with Retry-After; JSON for API clients, plain text for browsers."""
    if request.path.startswith("/api/") or "HTTP_AUTHORIZATION" in request.META:
        response = JsonResponse({"detail": LOCKED_OUT}, status=429)
    else:
        response = HttpResponse(LOCKED_OUT, status=429, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(get_cache_timeout(request))
    return response


class ThrottledLoginView(LoginView):
    """Django's LoginView. Its form authenticates through AxesStandaloneBackend (first in
    AUTHENTICATION_BACKENDS), which refuses a locked-out address before any password is checked;
    AxesMiddleware then answers 429 (lockout_response). Nothing to add here: the admin's login view
    gets the same protection the same way."""
