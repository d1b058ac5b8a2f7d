from django.apps import AppConfig


class AccessConfig(AppConfig):
    """Endpoint access: API keys (stored hashed, revocable) and their gateway objects.
    Sits above deployments (keys belong to a deployment or a tenant)."""

    name = "access"
    verbose_name = "Endpoint access"
