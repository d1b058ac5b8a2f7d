"""Throttles: writes are limited per user; sign-in attempts per client address."""

from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle


class WriteThrottle(UserRateThrottle):
    """Counts only unsafe methods, so dashboards polling GETs never starve writes."""

    scope = "writes"

    def allow_request(self, request, view):
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return super().allow_request(request, view)


class LoginThrottle(SimpleRateThrottle):
    scope = "login"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
