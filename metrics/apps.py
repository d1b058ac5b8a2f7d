from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """Engine metrics: the scrape cycle, stored samples and rollups, the advisor and the
    dashboards' figures. Sits above deployments (it reads their rows) and below the portal."""

    name = "metrics"
    verbose_name = "Metrics"

    def ready(self) -> None:
        # The deployment pages show metrics through deployments' extension points: deployments
        # sits below this app and never imports it.
        from deployments.panels import register_detail_context, register_list_context
        from metrics.presenters import detail_panel, list_panel

        register_detail_context(detail_panel)
        register_list_context(list_panel)
