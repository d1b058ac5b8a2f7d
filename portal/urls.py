from csp.constants import NONCE
from csp.decorators import csp_update
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from core.observability import metrics_view
from portal import health
from portal.account_views import InviteAcceptView
from portal.login import ThrottledLoginView

# The API docs pages (templates/drf_spectacular/) follow the site-wide Content-Security-Policy plus:
# Swagger UI: drf-spectacular's init script (swagger_ui.js), inline, with this response's nonce.
api_docs = csp_update({"script-src": [NONCE]})(SpectacularSwaggerView.as_view(url_name="api-schema"))
# Redoc (2.x, drf-spectacular-sidecar 2026.10.1): no script beyond 'self', but its styles are made at
# runtime. Those of styled-components carry this response's nonce (static/portal/redoc.js passes it);
# two elements come before Redoc knows the nonce and are allowed by hash: perfect-scrollbar's CSS that
# the bundle injects as it loads, and the empty <style> styled-components fills through the CSSOM.
# A sidecar upgrade that changes them shows up as a violation in tests/browser/test_csp.py. Search
# runs in a Worker made from a blob: URL. Redoc also requests a logo from cdn.redoc.ly: blocked
# (img-src), and Redoc then hides it.
REDOC_STYLE_HASHES = [
    "'sha256-QMIg+bpjm3JdElJ388KYke01izlUW0UoNOeKjpMxdgc='",  # perfect-scrollbar CSS
    "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",  # "" (empty)
]
api_redoc = csp_update({"style-src": [NONCE, *REDOC_STYLE_HASHES], "worker-src": ["'self'", "blob:"]})(
    SpectacularRedocView.as_view(url_name="api-schema")
)


def favicon(request):
    """Browsers ask for /favicon.ico on pages without an icon link (the admin, the API docs)."""
    return redirect(static("portal/favicon.svg"), permanent=True)


urlpatterns = [
    path("favicon.ico", favicon),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", api_docs, name="api-docs"),
    path("api/redoc/", api_redoc, name="api-redoc"),
    path("api/v1/", include("portal.api_urls")),
    path("scim/v2/", include("portal.scim_urls")),  # the identity provider's provisioning
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/invite/<uidb64>/<token>/", InviteAcceptView.as_view(), name="invite-accept"),
    path("", include("deployments.urls")),  # revisions, confirmations: before ui_urls' action catch-all
    path("", include("portal.ui_urls")),
]
if settings.OIDC_ENABLED:
    urlpatterns.insert(0, path("oidc/", include("mozilla_django_oidc.urls")))
