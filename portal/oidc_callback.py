"""The OpenID callback (OIDC_CALLBACK_CLASS): mozilla-django-oidc's, with the provider's refusals
in the audit log.

A failure in the token exchange or in our backend reaches the audit log through Django's
`user_login_failed` (portal.auditing). A provider that answers `?error=…` (the person cancelled,
an access policy refused them) never reaches authentication, so it is written here: once per
sign-in this browser started (the `state` must be one it holds), never for a bare request to the
callback, which anyone could send at will.
"""

from __future__ import annotations

from mozilla_django_oidc.views import OIDCAuthenticationCallbackView

from portal.auditing import sign_in_failure


class AuditedOIDCCallbackView(OIDCAuthenticationCallbackView):
    def get(self, request):
        error = request.GET.get("error")
        if error and request.GET.get("state") in request.session.get("oidc_states", {}):
            sign_in_failure(request, method="oidc", reason=f"The identity provider answered {error[:100]!r}.")
        return super().get(request)
