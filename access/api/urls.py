"""/api/v1/keys/ and the tenant endpoint's /v1/models (included by portal/api_urls.py)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from access.api.gateway_views import TenantEndpointsView, TenantModelsView, TenantModelView, WakeView
from access.api.views import ApiKeyViewSet

router = SimpleRouter()
router.register("keys", ApiKeyViewSet, basename="apikey")

urlpatterns = [
    *router.urls,
    path("tenant-endpoints/", TenantEndpointsView.as_view(), name="tenant-endpoints"),
    path("gateway/wake/<int:deployment>", WakeView.as_view(), name="gateway-wake"),
    path("gateway/<slug:tenant>/models", TenantModelsView.as_view(), name="gateway-models"),
    path("gateway/<slug:tenant>/models/<path:model>", TenantModelView.as_view(), name="gateway-model"),
]
