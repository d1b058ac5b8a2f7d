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
    """Failed sign-ins per client address (THROTTLE_LOGIN): the browser login form and API
    token authentication. Only failures count, so a busy client with a good token is never
    slowed; once the budget is spent every attempt from that address is refused until it ages."""

    scope = "login"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def blocked(self, request) -> bool:
        """True when this address has no failed attempts left (checks, does not count)."""
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        return len(self.history) >= self.num_requests

    def record_failure(self, request) -> None:
        self.blocked(request)  # loads and trims the history
        self.throttle_success()  # stores it with this attempt added
