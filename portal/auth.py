"""API token authentication: knox's hashed tokens, with expiry, naming and last-use tracking."""

from __future__ import annotations

from axes.helpers import get_cache_timeout, get_credentials
from django.contrib.auth.signals import user_login_failed
from django.utils import timezone
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header

# OpenAI-style clients send `Bearer`; knox's own word is `Token`. Both carry the same token.
SCHEMES = (b"token", b"bearer")


class TokenAuthentication(KnoxTokenAuthentication):
    """`Authorization: Token llmp_…` or `Authorization: Bearer llmp_…`. Expired tokens are refused
    and deleted by knox.

    The token is checked first, so a valid one always authenticates, even from an address that is
    locked out. Only failures count against the address (django-axes, the same count as the
    sign-in forms: DRF checks throttles only after authentication succeeds, so guessing tokens
    would otherwise be free); the failure that reaches the limit, and every one after it, is 429.
    """

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in SCHEMES:
            return None  # no credentials offered, or another scheme's
        try:
            if len(parts) != 2:
                raise exceptions.AuthenticationFailed("Invalid token header: expected `Bearer <token>`.")
            return self.authenticate_credentials(parts[1])
        except exceptions.AuthenticationFailed:
            if record_failure(request):
                raise exceptions.Throttled(get_cache_timeout(request)) from None
            raise

    def authenticate_credentials(self, token):
        try:
            user, auth_token = super().authenticate_credentials(token)
        except UnicodeDecodeError:  # bytes no token has: a failed guess, not a server error
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        now = timezone.now()
        # Write at most once a minute: a busy automation client must not turn reads into writes.
        if auth_token.last_used is None or (now - auth_token.last_used).total_seconds() > 60:
            type(auth_token).objects.filter(pk=auth_token.pk).update(last_used=now)
        return user, auth_token


def record_failure(request) -> bool:
    """Count one failed token against the client address; True when that address is now locked out.

    axes listens to Django's user_login_failed signal (as for a wrong password) and flags the
    Django request, which is also what AxesMiddleware reads on the way out."""
    django_request = getattr(request, "_request", request)  # a DRF Request wraps Django's
    user_login_failed.send(sender=__name__, credentials=get_credentials(None), request=django_request)
    return bool(getattr(django_request, "axes_locked_out", False))
