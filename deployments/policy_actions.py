"""Stops and starts the tenant's policy takes on its own: an idle deployment (reclaim.idle), a
serving schedule (reclaim.schedules) and a spent budget with the hard stop on (usage.budgets).

They are the person's services (deployments.services.lifecycle) with the actor `Actor.POLICY`:
the same (role, state, action) table, the same GPU rule (released when the stop is recorded),
the same reconcile; the timeline and the audit log say "policy" and the cause.
"""

from __future__ import annotations

from deployments.models import ModelDeployment
from deployments.services.common import POLICY
from deployments.services.lifecycle import deployment_start, deployment_stop
from deployments.states import Actor

__all__ = ["POLICY", "deployment_policy_start", "deployment_policy_stop"]


def deployment_policy_stop(*, deployment_id: int, reason: str, cause: str) -> ModelDeployment:
    """Stop a deployment by policy. `cause` is the event reason (CamelCase, e.g. "IdleStopped",
    "ScheduleStopped", "BudgetStopped"); `reason` the message."""
    return deployment_stop(deployment_id=deployment_id, user=Actor.POLICY, cause=cause, reason=reason)


def deployment_policy_start(*, deployment_id: int, reason: str, cause: str) -> ModelDeployment:
    """Start a stopped deployment by policy (a serving schedule's window opened), through the
    normal quota and budget checks (raises QuotaExceeded when the GPUs are not there)."""
    return deployment_start(deployment_id=deployment_id, user=Actor.POLICY, cause=cause, reason=reason)
