"""Periodic housekeeping for deployment metrics."""

from celery import shared_task


@shared_task(acks_late=True)
def downsample_metrics_task() -> dict:
    """Roll raw samples up and enforce retention (keeps the samples table bounded)."""
    from deployments.series import downsample

    return downsample()
