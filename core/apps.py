from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The bottom layer every app may import: domain errors, the audit log, shared throttles,
    safe redirects and the portal's own Prometheus counters. It imports no other app."""

    name = "core"
    verbose_name = "Core"
