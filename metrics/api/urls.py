"""The metrics endpoints of a deployment: /api/v1/deployments/<id>/{metrics,summary,advice}/.

A router of its own with the deployments router's prefix and basename, so the URLs, their names
(deployment-metrics, deployment-summary, deployment-advice) and the `.json` suffix twins are the
ones these actions had on DeploymentViewSet; one router refuses the same basename twice.
"""

from rest_framework.routers import SimpleRouter
from rest_framework.urlpatterns import format_suffix_patterns

from metrics.api.views import DeploymentMetricsViewSet

router = SimpleRouter()
router.register("deployments", DeploymentMetricsViewSet, basename="deployment")

urlpatterns = format_suffix_patterns(router.urls)
