"""/api/v1/publications/ and /api/v1/subscriptions/ (included by portal/api_urls.py)."""

from rest_framework.routers import SimpleRouter

from sharing.api.views import PublicationViewSet, SubscriptionViewSet

router = SimpleRouter()
router.register("publications", PublicationViewSet, basename="publication")
router.register("subscriptions", SubscriptionViewSet, basename="subscription")

urlpatterns = router.urls
