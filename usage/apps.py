from django.apps import AppConfig


class UsageConfig(AppConfig):
    """The usage ledger (reserved and serving GPU-hours, tokens, cost) and monthly budgets.
    Sits above metrics (token counters) and deployments (reservation and serving intervals)."""

    name = "usage"
    verbose_name = "Usage and cost"
