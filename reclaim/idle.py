"""The idle policy: a serving deployment that generates no tokens for the tenant's
`idle_warn_hours` is warned about (a Warning event "IdleWarning", an audit entry and an e-mail to
the tenant admins, once per idle stretch); after `idle_stop_hours` it is stopped by the policy
and its GPUs go back to the quota (deployments.policy_actions, event "IdleStopped"). A person
starts it again through the normal quota checks.

The idle clock runs from the latest of three times, so it counts only time the portal watched:

* the end of the last interval with generated tokens (metrics.MetricSample, any resolution: raw
  points for a day, then the 1-minute and 10-minute rollups);
* when the deployment last started serving (its last transition into a running state), so a
  restarted deployment gets the whole allowance again;
* its first stored point since then, so a deployment whose metrics could not be read for hours
  (a wrong metrics URL, a new deployment never scraped) is not judged on the time nobody saw.

And it runs only while the newest raw point is fresh (FRESH) and carries a rate. After a portal
restart the first sweep therefore waits for a scrape that reads the engine's counters across
the gap (a rate over the whole gap: tokens generated meanwhile show as an increase), instead of
stopping on hours in which the portal saw nothing. Through Prometheus a point's rate covers only
the last 2 minutes, so a long scrape gap there can hide tokens generated early in the gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.exceptions import TransitionError
from core.models import audit
from deployments.choices import EventType
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.policy_actions import IDLE_STOPPED, POLICY, deployment_policy_stop, lock_for_policy
from deployments.states import RUNNING, STOPPABLE_BY_POLICY
from metrics.models import MetricSample, Resolution
from quotas.models import Tenant
from quotas.notify import notify_tenant_admins
from runtime import tasks
from runtime.tasks import generates

IDLE_WARNING = "IdleWarning"
# The newest raw point must be at most this old for the clock to run (40 scrapes at 15 s).
FRESH = timedelta(minutes=10)
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class IdleClock:
    """What the stored points say about one deployment's generated tokens."""

    last_token_at: datetime | None  # end of the newest interval with generated tokens
    serving_since: datetime | None  # its last transition into a running state
    watched_since: datetime | None  # its first point since then
    fresh: bool  # the newest raw point is recent and carries a rate

    @property
    def idle_since(self) -> datetime | None:
        """Since when it has been idle as far as the portal saw (None: it cannot tell)."""
        if not self.fresh or self.serving_since is None or self.watched_since is None:
            return None
        return max(t for t in (self.last_token_at, self.serving_since, self.watched_since) if t is not None)


def _serving_since(deployment_id: int) -> datetime | None:
    return (
        DeploymentEvent.objects.filter(deployment_id=deployment_id, to_state__in=RUNNING)
        .exclude(from_state__in=RUNNING)
        .order_by("-created", "-id")
        .values_list("created", flat=True)
        .first()
    )


def activity_field(task: str) -> str:
    """The rate that says a deployment did work: tokens generated, or for a pooling task (embedding,
    score: runtime.tasks), which generates none, prompt tokens processed."""
    return "generation_tokens_per_s" if generates(task) else "prompt_tokens_per_s"


def idle_clock(deployment_id: int, *, now: datetime, task: str = tasks.CHAT) -> IdleClock:
    """Read the clock's three times and the freshness from the stored points (a few indexed
    queries per resolution, each stopping at its first row)."""
    serving_since = _serving_since(deployment_id)
    field = activity_field(task)
    rated = MetricSample.objects.filter(deployment_id=deployment_id, **{f"{field}__isnull": False})
    last_token = watched = None
    for resolution in Resolution:
        rows = rated.filter(resolution=resolution)
        # A raw point's time ends its interval; a rollup's time starts its bucket.
        end = timedelta(seconds=0 if resolution == Resolution.RAW else int(resolution))
        token = rows.filter(**{f"{field}__gt": 0}).order_by("-ts").values_list("ts", flat=True).first()
        if token is not None and (last_token is None or token + end > last_token):
            last_token = token + end
        if serving_since is not None:
            first = rows.filter(ts__gte=serving_since).order_by("ts").values_list("ts", flat=True).first()
            if first is not None and (watched is None or first < watched):
                watched = first
    newest = rated.filter(resolution=Resolution.RAW).order_by("-ts").values_list("ts", flat=True).first()
    fresh = newest is not None and now - FRESH <= newest <= now + FRESH
    return IdleClock(last_token_at=last_token, serving_since=serving_since, watched_since=watched, fresh=fresh)


@dataclass(frozen=True)
class IdlePlan:
    """What the tenant's idle policy does to a deployment now, and when it will stop it."""

    action: str  # "none" | "warn" | "stop"
    idle_since: datetime | None = None
    stop_at: datetime | None = None


def idle_plan(tenant: Tenant, clock: IdleClock, *, warned_at: datetime | None, now: datetime) -> IdlePlan:
    """The policy's decision. With a warning configured, the stop comes no sooner than the
    warning promised (stop hours minus warn hours after it), so a warning sent late (the portal
    was down) still gives the admins that long to react."""
    warn_h, stop_h = tenant.idle_warn_hours, tenant.idle_stop_hours
    since = clock.idle_since
    if since is None or not (warn_h or stop_h):
        return IdlePlan("none")
    stop_at = since + stop_h * HOUR if stop_h else None
    if warn_h and stop_at is not None:
        notice = (stop_h - warn_h) * HOUR
        stop_at = max(stop_at, (warned_at or max(now, since + warn_h * HOUR)) + notice)
    if warn_h and warned_at is None and now >= since + warn_h * HOUR:
        return IdlePlan("warn", since, stop_at)
    if stop_at is not None and now >= stop_at and (warned_at is not None or not warn_h):
        return IdlePlan("stop", since, stop_at)
    return IdlePlan("none", since, stop_at)


def _warned_at(deployment_id: int, since: datetime | None) -> datetime | None:
    """The warning sent in this idle stretch, if any (a new stretch needs a new warning)."""
    if since is None:
        return None
    return (
        DeploymentEvent.objects.filter(deployment_id=deployment_id, reason=IDLE_WARNING, created__gte=since)
        .order_by("-created")
        .values_list("created", flat=True)
        .first()
    )


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def _utc(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def plan_for(dep: ModelDeployment, *, now: datetime) -> IdlePlan:
    """The idle policy's plan for one deployment as things stand (no lock, no change)."""
    if dep.state not in STOPPABLE_BY_POLICY:
        return IdlePlan("none")
    clock = idle_clock(dep.pk, now=now, task=dep.task)
    return idle_plan(dep.tenant, clock, warned_at=_warned_at(dep.pk, clock.idle_since), now=now)


def _warn(dep: ModelDeployment, plan: IdlePlan, now: datetime) -> None:
    assert plan.idle_since is not None
    stop = (
        f" The tenant's idle policy stops it at {_utc(plan.stop_at)} (in {_hours(plan.stop_at - now)}) and "
        f"releases its {dep.reserved_gpus} GPU(s) unless it generates tokens before then."
        if plan.stop_at
        else ""
    )
    message = f"No tokens generated for {_hours(now - plan.idle_since)} (since {_utc(plan.idle_since)}).{stop}"
    DeploymentEvent.objects.create(deployment=dep, type=EventType.WARNING, reason=IDLE_WARNING, message=message)
    audit(actor=POLICY, action="deployment.idle_warning", obj=dep, tenant=dep.tenant, reason=message)
    tenant = dep.tenant
    transaction.on_commit(
        lambda: notify_tenant_admins(tenant, subject=f"{dep.name} is idle", body=f"Deployment {dep}: {message}")
    )


def _stop(dep: ModelDeployment, plan: IdlePlan, now: datetime) -> None:
    assert plan.idle_since is not None
    hours = dep.tenant.idle_stop_hours
    message = (
        f"No tokens generated for {_hours(now - plan.idle_since)} (since {_utc(plan.idle_since)}); the tenant's "
        f"idle policy stops deployments after {hours} h and released its {dep.reserved_gpus} GPU(s). "
        "Start it again when it is needed."
    )
    deployment_policy_stop(deployment_id=dep.pk, reason=message, cause=IDLE_STOPPED)
    tenant = dep.tenant
    transaction.on_commit(
        lambda: notify_tenant_admins(
            tenant, subject=f"{dep.name} was stopped (idle)", body=f"Deployment {dep}: {message}"
        )
    )


@transaction.atomic
def idle_check(deployment_id: int, *, now: datetime | None = None) -> str:
    """Apply the idle policy to one deployment under its row lock: "warn", "stop" or "none".
    Two sweeps at once serialize on the lock; the second sees the first's warning or stop."""
    now = now or timezone.now()
    dep = lock_for_policy(deployment_id)
    if dep is None or dep.tenant.archived:
        return "none"
    plan = plan_for(dep, now=now)
    if plan.action == "warn":
        _warn(dep, plan, now)
    elif plan.action == "stop":
        try:
            _stop(dep, plan, now)
        except TransitionError:  # the state moved on under a lock we hold: cannot happen, never stop twice
            return "none"
    return plan.action


def idle_candidates() -> list[int]:
    """Serving deployments of tenants with an idle policy."""
    policy = Q(tenant__idle_warn_hours__gt=0) | Q(tenant__idle_stop_hours__gt=0)
    return list(
        ModelDeployment.objects.filter(policy, state__in=STOPPABLE_BY_POLICY, tenant__archived_at__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def idle_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Apply the idle policy to every candidate; returns how many were warned and stopped."""
    now = now or timezone.now()
    counts = {"warn": 0, "stop": 0, "none": 0}
    for pk in idle_candidates():
        counts[idle_check(pk, now=now)] += 1
    return counts


def idle_note(dep: ModelDeployment, now: datetime) -> str:
    """What the idle policy will do, for the advisor's idle advice (metrics.advice)."""
    plan = plan_for(dep, now=now)
    if plan.stop_at is None:
        return ""
    if plan.stop_at <= now:
        return "The tenant's idle policy stops it at its next check."
    return (
        f"The tenant's idle policy will stop it in {_hours(plan.stop_at - now)} ({_utc(plan.stop_at)}) "
        "unless it generates tokens."
    )
