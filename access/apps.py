from django.apps import AppConfig


class AccessConfig(AppConfig):
    """Endpoint access: API keys (stored hashed, revocable) and their gateway objects.
    Sits above deployments (keys belong to a deployment or a tenant)."""

    name = "access"
    verbose_name = "Endpoint access"

    def ready(self) -> None:
        # The deployment page's Endpoint panel links to minting only for those who may mint
        # (deployments sits below this app and never imports it).
        from access.views import endpoint_panel
        from deployments.panels import register_detail_context

        register_detail_context(endpoint_panel)
