"""Stops and starts the tenant's policy takes on its own: an idle deployment (reclaim.idle), a
serving schedule (reclaim.schedules) and a spent budget with the hard stop on (usage.budgets).

They are the person's services (deployments.services.lifecycle) with the actor `Actor.POLICY`:
the same (role, state, action) table, the same GPU rule (released when the stop is recorded),
the same reconcile; the timeline and the audit log say "policy" and the cause.
"""

from __future__ import annotations

from django.db.models import OuterRef, Subquery

from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.services.common import POLICY
from deployments.services.lifecycle import deployment_start, deployment_stop
from deployments.states import Actor

__all__ = [
    "IDLE_STOPPED",
    "POLICY",
    "SCHEDULE_STOPPED",
    "WAKEABLE_CAUSES",
    "deployment_policy_start",
    "deployment_policy_stop",
    "last_stop_reason",
    "lock_for_policy",
]

# The causes (event reasons) of the policy's stops that a request may undo: the idle policy's and
# the serving schedule's, which stop a deployment nobody asked to stop. A person's stop, a budget
# hard stop and a failure are not undone by traffic (deployments.services.wake).
IDLE_STOPPED = "IdleStopped"
SCHEDULE_STOPPED = "ScheduleStopped"
WAKEABLE_CAUSES = frozenset({IDLE_STOPPED, SCHEDULE_STOPPED})


def lock_for_policy(deployment_id: int) -> ModelDeployment | None:
    """The deployment's row under its lock, with its tenant (whose policy decides); None when it is
    gone. The policy's sweeps and the wake re-check everything under this lock."""
    return (
        ModelDeployment.objects.select_for_update(of=("self",))
        .select_related("tenant")
        .filter(pk=deployment_id)
        .first()
    )


def last_stop_reason():
    """The reason of a deployment's latest move into *stopped* (a subquery on OuterRef pk): what
    stopped it, read from the timeline rather than stored, so a later stop by anyone else wins."""
    return Subquery(
        DeploymentEvent.objects.filter(deployment=OuterRef("pk"), to_state=State.STOPPED)
        .order_by("-created", "-id")
        .values("reason")[:1]
    )


def deployment_policy_stop(*, deployment_id: int, reason: str, cause: str) -> ModelDeployment:
    """Stop a deployment by policy. `cause` is the event reason (CamelCase, e.g. "IdleStopped",
    "ScheduleStopped", "BudgetStopped"); `reason` the message."""
    return deployment_stop(deployment_id=deployment_id, user=Actor.POLICY, cause=cause, reason=reason)


def deployment_policy_start(
    *, deployment_id: int, reason: str, cause: str, details: dict | None = None
) -> ModelDeployment:
    """Start a stopped deployment by policy (a serving schedule's window opened, a request woke it),
    through the normal quota and budget checks (raises QuotaExceeded when the GPUs are not there)."""
    return deployment_start(deployment_id=deployment_id, user=Actor.POLICY, cause=cause, reason=reason, details=details)
