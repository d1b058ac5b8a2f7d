"""Throttles: writes are limited per user. Failed sign-ins are django-axes' (portal/login.py)."""

from rest_framework.throttling import UserRateThrottle


class WriteThrottle(UserRateThrottle):
    """Counts only unsafe methods, so dashboards polling GETs never starve writes."""

    scope = "writes"

    def allow_request(self, request, view):
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return super().allow_request(request, view)
