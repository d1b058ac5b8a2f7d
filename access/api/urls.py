"""/api/v1/keys/ (included by portal/api_urls.py)."""

from rest_framework.routers import SimpleRouter

from access.api.views import ApiKeyViewSet

router = SimpleRouter()
router.register("keys", ApiKeyViewSet, basename="apikey")

urlpatterns = router.urls
