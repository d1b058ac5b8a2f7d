"""The operating endpoints of a deployment (timeline/, phases/, logs/): a router of their own with
the deployments router's prefix and basename, as metrics/api/urls.py does."""

from rest_framework.routers import SimpleRouter

from deployments.api.operating import DeploymentOperatingViewSet

router = SimpleRouter()
router.register("deployments", DeploymentOperatingViewSet, basename="deployment")

urlpatterns = router.urls
