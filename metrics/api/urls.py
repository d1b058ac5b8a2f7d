"""The metrics endpoints of a deployment: /api/v1/deployments/<id>/{metrics,summary,advice}/.

A router of its own with the deployments router's prefix and basename, so the URLs and their names
(deployment-metrics, deployment-summary, deployment-advice) are the ones these actions had on
DeploymentViewSet; one router refuses the same basename twice. No format-suffix twins (as in
portal/api_urls.py).
"""

from rest_framework.routers import SimpleRouter

from metrics.api.views import DeploymentMetricsViewSet

router = SimpleRouter()
router.register("deployments", DeploymentMetricsViewSet, basename="deployment")

urlpatterns = router.urls
