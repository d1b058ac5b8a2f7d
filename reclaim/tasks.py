"""Reclaim tasks, run by beat: the idle policy and the serving schedules. Both are sweeps that
compare each deployment with its tenant's policy and converge, so a missed beat loses nothing
and two at once change each deployment once (row locks)."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True)
def idle_sweep_task() -> dict[str, int]:
    """Warn about and stop deployments idle past their tenant's idle policy (reclaim.idle)."""
    from reclaim.idle import idle_sweep

    return idle_sweep()


@shared_task(acks_late=True)
def schedule_sweep_task() -> dict[str, int]:
    """Stop deployments outside their tenant's serving schedule, start the ones it stopped
    when it opens (reclaim.schedules)."""
    from reclaim.schedules import schedule_sweep

    return schedule_sweep()
