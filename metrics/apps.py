from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """Engine metrics: the scrape cycle, stored samples and rollups, the advisor and the
    dashboards' figures. Sits above deployments (it reads their rows) and below the portal."""

    name = "metrics"
    verbose_name = "Metrics"
