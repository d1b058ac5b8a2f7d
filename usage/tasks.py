"""Beat task: refresh the usage ledger, then apply the budgets."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from usage.budgets import budget_sweep
from usage.rollup import months_to_refresh, refresh_month


@shared_task(acks_late=True)
def refresh_usage_task() -> dict:
    """Recompute this month's ledger (and last month's on the 1st), then warn, stop or clear by
    budget. Safe to run any number of times: every figure is recomputed from the facts."""
    now = timezone.now()
    written = {month.isoformat(): refresh_month(month, now=now) for month in months_to_refresh(now)}
    return {"written": written, "budgets": budget_sweep(now=now)}
