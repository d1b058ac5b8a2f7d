from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from portal import checks, schema  # noqa: F401  registers system checks, the OpenAPI token-auth extension
