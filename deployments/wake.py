"""Wake on request (issue 35): a request to a deployment the tenant's policy stopped starts it again.

The idle policy and the serving schedule stop deployments nobody asked to stop; the next client
request should not fail until someone presses Start. The activator (the local gateway here,
runtime.gateway_local; on a cluster the deployment's route while it is stopped) holds the request
and asks the portal to wake the deployment (access.wake: the API call, authenticated by the
client's own API key). `deployment_wake` is the one decision:

* running already (starting or serving): nothing to do, the activator waits for it;
* stopped by the idle policy or the schedule (`WAKEABLE_CAUSES`, the latest stop's reason on the
  timeline, so a person's later stop wins) and the tenant's schedule open now: started through the
  same service as a person's Start (`deployment_start` as the policy: the (role, state, action)
  table, the quota and the budget), audited as the policy with the key that woke it;
* anything else is refused with a code and a sentence the activator passes on in its 503:
  `not_wakeable` (a person, a budget stop or a failure stopped it), `schedule_closed`,
  `quota_exceeded`, `budget_stopped`, `archived`, `gone`.

A refusal is written to the timeline once a minute at most (a client retrying every second must
not bury the timeline), as a Warning event "WakeRefused".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.exceptions import DomainError
from deployments.choices import EventType, State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.policy_actions import WAKEABLE_CAUSES, deployment_policy_start, last_stop_reason, lock_for_policy
from deployments.states import DELETED_OR_DELETING, RUNNING, STARTING
from quotas.schedule import ScheduleError, parse_schedule
from runtime.backends import names

WOKEN = "WokenByRequest"
WAKE_REFUSED = "WakeRefused"
REFUSAL_EVENT_EVERY = timedelta(minutes=1)
RETRY_AFTER = 60  # seconds a refused client waits when nothing says how long (quota, budget)


@dataclass(frozen=True)
class Wake:
    """What a wake did: `outcome` "woken" (started now), "starting", "serving" or "refused"."""

    outcome: str
    state: str
    code: str = ""
    message: str = ""
    retry_after: int = 0

    @property
    def refused(self) -> bool:
        return self.outcome == "refused"


def wakeable(dep: ModelDeployment) -> bool:
    """Stopped by a policy a request may undo (read from the timeline, as the schedule reads it)."""
    if dep.state != State.STOPPED:
        return False
    reason = ModelDeployment.objects.filter(pk=dep.pk).annotate(r=last_stop_reason()).values_list("r", flat=True)
    return reason.first() in WAKEABLE_CAUSES


def wakes_on_request(dep: ModelDeployment) -> bool:
    """A request to its endpoint wakes it: a policy a request may undo stopped it, and an activator
    stands in front of its backend (the local gateway told the portal's URL; the cluster's activator
    is not built yet, issue 35)."""
    on_gateway = settings.LOCAL_GATEWAY and bool(settings.LOCAL_GATEWAY_PORTAL_URL)
    return on_gateway and dep.backend in names(on_cluster=False) and wakeable(dep)


def _refuse(dep: ModelDeployment, code: str, message: str, retry_after: int = RETRY_AFTER) -> Wake:
    # Events are stamped with the real time (auto_now_add): count them against it, not against a
    # `now` passed in for the schedule (a clock ahead of the real one wrote every refusal).
    since = timezone.now() - REFUSAL_EVENT_EVERY
    recent = DeploymentEvent.objects.filter(deployment=dep, reason=WAKE_REFUSED, created__gte=since)
    if not recent.exists():
        message_ = f"A request could not wake it: {message}"
        DeploymentEvent.objects.create(deployment=dep, type=EventType.WARNING, reason=WAKE_REFUSED, message=message_)
    return Wake("refused", dep.state, code, message, max(1, retry_after))


def _schedule_refusal(dep: ModelDeployment, now: datetime) -> tuple[str, int] | None:
    """(message, seconds until it opens) when the tenant's serving schedule is closed now."""
    try:
        schedule = parse_schedule(dep.tenant.serving_schedule)
    except ScheduleError:
        return "The tenant's serving schedule cannot be read; a platform admin must fix it.", RETRY_AFTER
    if schedule.is_open(now):
        return None
    opens = schedule.next_change(now)
    wait = int((opens - now).total_seconds()) if opens else RETRY_AFTER
    return f"Outside the tenant's serving schedule ({schedule.text}): {schedule.describe(now)}.", wait


@transaction.atomic
def deployment_wake(*, deployment_id: int, key_id: int | None, key_name: str, now: datetime | None = None) -> Wake:
    """Wake one deployment for a request presented with API key `key_id` (see the module docstring).
    The caller has checked that the key may use the deployment."""
    now = now or timezone.now()
    dep = lock_for_policy(deployment_id)
    if dep is None or dep.state in DELETED_OR_DELETING:
        return Wake("refused", dep.state if dep else State.DELETED, "gone", "The deployment was deleted.", RETRY_AFTER)
    if dep.state in RUNNING:
        return Wake("starting" if dep.state in STARTING else "serving", dep.state)
    if dep.tenant.archived:
        return _refuse(dep, "archived", "Its tenant is archived.")
    if not wakeable(dep):
        why = "a person stopped it" if dep.state == State.STOPPED else f"it is {dep.get_state_display().lower()}"
        return _refuse(
            dep, "not_wakeable", f"Requests wake only what the idle policy or serving schedule stopped; {why}. "
            "Start it on its page.",
        )  # fmt: skip
    if closed := _schedule_refusal(dep, now):
        return _refuse(dep, "schedule_closed", closed[0], closed[1])
    who = f"API key {key_name!r} (id {key_id})" if key_id is not None else "the portal's Try-it key"
    try:
        with transaction.atomic():
            deployment_policy_start(
                deployment_id=dep.pk,
                cause=WOKEN,
                reason=f"A request with {who} woke it: started again through the quota and budget checks.",
                details={"key_id": key_id},
            )
    except DomainError as error:
        return _refuse(dep, error.code, error.message)
    return Wake("woken", State.APPROVED)
