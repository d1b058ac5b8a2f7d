"""Serving schedules: while a tenant's schedule (Tenant.serving_schedule, read by
quotas.schedule) is closed, its running deployments are stopped by the policy (event
"ScheduleStopped", GPUs released at once); when it opens, the deployments the schedule stopped
are started again through the normal quota checks (event "ScheduleStarted").

"Stopped by the schedule" is read from the timeline, not stored: the deployment is stopped and
its last move into *stopped* has the reason "ScheduleStopped". One a person stopped, or the idle
or budget policy, stays stopped; one a person started outside the window is stopped again (the
schedule says when deployments may run). A start the quota refuses is recorded ("ScheduleStartFailed",
a Warning event and an e-mail to the tenant admins) and tried again when the next window opens,
never again in the same window, so a full quota cannot make the sweep loop.

Level-triggered and idempotent: every sweep compares each deployment with its tenant's schedule
and converges, so a missed beat or a restart loses nothing. Each change re-checks the deployment
under its row lock, so concurrent sweeps never stop or start twice.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone

from core.exceptions import DomainError
from core.models import audit
from deployments.choices import EventType, State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.policy_actions import (
    POLICY,
    SCHEDULE_STOPPED,
    deployment_policy_start,
    deployment_policy_stop,
    last_stop_reason,
    lock_for_policy,
)
from deployments.states import STOPPABLE_BY_POLICY
from quotas.models import Tenant
from quotas.notify import notify_tenant_admins
from quotas.schedule import Schedule, ScheduleError, parse_schedule

log = logging.getLogger(__name__)

SCHEDULE_STARTED = "ScheduleStarted"
START_FAILED = "ScheduleStartFailed"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def stopped_by_schedule():
    """Deployments the schedule stopped and nobody touched since."""
    return (
        ModelDeployment.objects.filter(state=State.STOPPED)
        .annotate(stop_reason=last_stop_reason())
        .filter(stop_reason=SCHEDULE_STOPPED)
    )


def tenant_schedule(tenant: Tenant) -> Schedule | None:
    """The tenant's parsed schedule; None when the stored text cannot be read (the policy
    service refuses such text, so only a hand edit gets here: act on nothing, say so)."""
    try:
        return parse_schedule(tenant.serving_schedule)
    except ScheduleError as error:
        log.warning("Serving schedule of tenant %s ignored: %s", tenant.slug, error)
        return None


@transaction.atomic
def schedule_stop(deployment_id: int, *, now: datetime) -> bool:
    """Stop one running deployment whose tenant's schedule is closed (re-checked under the lock)."""
    dep = lock_for_policy(deployment_id)
    if dep is None or dep.state not in STOPPABLE_BY_POLICY or dep.tenant.archived:
        return False
    schedule = tenant_schedule(dep.tenant)
    if schedule is None or schedule.is_open(now):
        return False
    message = (
        f"Outside the tenant's serving schedule ({schedule.text}): {schedule.describe(now)}. "
        f"Its {dep.reserved_gpus} GPU(s) are released; the schedule starts it again when it opens."
    )
    deployment_policy_stop(deployment_id=dep.pk, reason=message, cause=SCHEDULE_STOPPED)
    return True


def _failed_since(deployment_id: int, since: datetime) -> bool:
    return DeploymentEvent.objects.filter(deployment_id=deployment_id, reason=START_FAILED, created__gte=since).exists()


@transaction.atomic
def schedule_start(deployment_id: int, *, now: datetime) -> str:
    """Start one deployment the schedule stopped, once its tenant's schedule is open: "started",
    "failed" (the quota or another rule refused: recorded, the admins told) or "none"."""
    dep = lock_for_policy(deployment_id)
    if dep is None or dep.state != State.STOPPED or dep.tenant.archived:
        return "none"
    if not stopped_by_schedule().filter(pk=dep.pk).exists():
        return "none"  # a person stopped it (or started and stopped it) since the schedule did
    schedule = tenant_schedule(dep.tenant)
    if schedule is None or not schedule.is_open(now):
        return "none"
    window = schedule.opened_at(now) or EPOCH  # always open: one try, then it waits for a person
    if _failed_since(dep.pk, window):
        return "none"
    try:
        with transaction.atomic():
            deployment_policy_start(
                deployment_id=dep.pk,
                reason=f"The tenant's serving schedule ({schedule.text or 'always'}) is open: started again.",
                cause=SCHEDULE_STARTED,
            )
    except DomainError as error:
        _record_failure(dep, schedule, error, now)
        return "failed"
    return "started"


def _record_failure(dep: ModelDeployment, schedule: Schedule, error: DomainError, now: datetime) -> None:
    retry = "when the next window opens" if not schedule.always else "when a person starts it"
    message = f"The serving schedule could not start it: {error.message} It is tried again {retry}."
    DeploymentEvent.objects.create(deployment=dep, type=EventType.WARNING, reason=START_FAILED, message=message)
    audit(actor=POLICY, action="deployment.schedule_start_failed", obj=dep, tenant=dep.tenant, reason=message)
    tenant = dep.tenant
    transaction.on_commit(
        lambda: notify_tenant_admins(
            tenant, subject=f"{dep.name} could not be started", body=f"Deployment {dep}: {message}"
        )
    )


def schedule_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Converge every tenant's deployments with its schedule; returns what changed."""
    now = now or timezone.now()
    counts = {"stopped": 0, "started": 0, "failed": 0}
    live = Tenant.objects.filter(archived_at__isnull=True)
    for tenant in live.exclude(serving_schedule=""):
        schedule = tenant_schedule(tenant)
        if schedule is None or schedule.is_open(now):
            continue
        for pk in (
            ModelDeployment.objects.filter(tenant=tenant, state__in=STOPPABLE_BY_POLICY)
            .order_by("pk")
            .values_list("pk", flat=True)
        ):
            counts["stopped"] += schedule_stop(pk, now=now)
    for pk in stopped_by_schedule().filter(tenant__in=live).order_by("pk").values_list("pk", flat=True):
        result = schedule_start(pk, now=now)
        if result != "none":
            counts[result] += 1
    return counts
