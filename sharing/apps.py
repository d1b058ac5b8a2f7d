from django.apps import AppConfig


class SharingConfig(AppConfig):
    """Shared models (issue 34): a tenant publishes a deployment, other tenants subscribe and reach
    it on their own endpoint with their own keys, under per-consumer limits. Sits above deployments
    and below access (the key listings and the gateways read the subscriptions)."""

    name = "sharing"
    verbose_name = "Shared models"
