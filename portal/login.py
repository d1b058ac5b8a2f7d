"""The browser sign-in view, with a limit on failed attempts per client address."""

from __future__ import annotations

from django.contrib.auth.views import LoginView
from django.http import HttpResponse

from portal.throttles import LoginThrottle


class ThrottledLoginView(LoginView):
    """Django's LoginView; failed sign-ins count against LoginThrottle (THROTTLE_LOGIN), and an
    address that spent its budget gets 429 — even with the right password — until it ages."""

    def post(self, request, *args, **kwargs):
        throttle = LoginThrottle()
        if throttle.blocked(request):
            wait = throttle.wait()
            response = HttpResponse("Too many failed sign-in attempts. Try again later.",
                                    status=429, content_type="text/plain")
            if wait:
                response["Retry-After"] = str(int(wait) + 1)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        LoginThrottle().record_failure(self.request)
        return super().form_invalid(form)
