"""Browser URLs of the metrics app, under the deployment pages (included by portal/ui_urls.py)."""

from django.urls import path

from metrics import views

urlpatterns = [
    path("deployments/<int:pk>/charts/", views.deployment_charts, name="deployment-charts"),
]
