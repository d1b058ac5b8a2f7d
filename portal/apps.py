from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from portal import checks, deprovision, schema  # noqa: F401  registers system checks, the OpenAPI token-auth extension

        deprovision.connect()  # a leaver's keys and tokens go at once
        from portal import auditing  # noqa: F401  sign-ins in the audit log (signal receivers)

        post_migrate.connect(_bootstrap_platform_admin, sender=self)  # PLATFORM_ADMIN_USERNAME


def _bootstrap_platform_admin(**kwargs) -> None:
    """After every `migrate`: the first platform admin from configuration (portal.accounts).
    A configuration that cannot be applied stops the migration with the reason."""
    from django.core.management.base import CommandError

    from portal.accounts import BootstrapError, platform_admin_bootstrap

    try:
        platform_admin_bootstrap()
    except BootstrapError as error:
        raise CommandError(str(error)) from None
