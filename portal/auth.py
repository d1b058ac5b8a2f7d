"""API token authentication: knox's hashed tokens, with expiry, naming and last-use tracking."""

from __future__ import annotations

from django.utils import timezone
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header

from portal.throttles import LoginThrottle


class TokenAuthentication(KnoxTokenAuthentication):
    """`Authorization: Token llmp_…`. Expired tokens are refused and deleted by knox.

    Failed attempts count against the client address's login budget (LoginThrottle): DRF checks
    throttles only after authentication succeeds, so guessing tokens would otherwise be free.
    """

    def authenticate(self, request):
        if not get_authorization_header(request):
            return None  # no credentials offered: nothing to count
        throttle = LoginThrottle()
        if throttle.blocked(request):
            raise exceptions.Throttled(throttle.wait())
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure(request)
            raise

    def authenticate_credentials(self, token):
        user, auth_token = super().authenticate_credentials(token)
        now = timezone.now()
        # Write at most once a minute: a busy automation client must not turn reads into writes.
        if auth_token.last_used is None or (now - auth_token.last_used).total_seconds() > 60:
            type(auth_token).objects.filter(pk=auth_token.pk).update(last_used=now)
        return user, auth_token
