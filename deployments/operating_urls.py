"""URLs of the operating partials (included before the detail page's action catch-all)."""

from django.urls import path

from deployments import operating_views

urlpatterns = [
    path("deployments/<int:pk>/phases/", operating_views.deployment_phases, name="deployment-phases-panel"),
    path("deployments/<int:pk>/timeline/", operating_views.deployment_timeline, name="deployment-timeline-panel"),
    path("deployments/<int:pk>/logs/", operating_views.deployment_logs, name="deployment-logs-panel"),
]
