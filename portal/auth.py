"""API token authentication: knox's hashed tokens, with expiry, naming and last-use tracking."""

from __future__ import annotations

from django.utils import timezone
from knox.auth import TokenAuthentication as KnoxTokenAuthentication


class TokenAuthentication(KnoxTokenAuthentication):
    """`Authorization: Token llmp_…`. Expired tokens are refused and deleted by knox."""

    def authenticate_credentials(self, token):
        user, auth_token = super().authenticate_credentials(token)
        now = timezone.now()
        # Write at most once a minute: a busy automation client must not turn reads into writes.
        if auth_token.last_used is None or (now - auth_token.last_used).total_seconds() > 60:
            type(auth_token).objects.filter(pk=auth_token.pk).update(last_used=now)
        return user, auth_token
