"""Stops and starts the tenant's policy takes on its own: an idle deployment (reclaim.idle), a
serving schedule (reclaim.schedules) and a spent budget with the hard stop on (usage.budgets).

The actor is "policy" in the event timeline and the audit log, and the (role, state, action)
table in deployments.states says which states the policy may stop or start from. A policy stop
gives the GPUs back at once (the reconciler removes the workload and finds nothing left to
release); a policy start re-reserves through the normal quota checks, so it can fail with
QuotaExceeded like a person's start.
"""

from __future__ import annotations

from django.db import transaction

from core.models import audit
from deployments.choices import EventType, State
from deployments.models import ModelDeployment
from deployments.services import _budget_allows, _enqueue_reconcile, _give_back, _lock, _reserve, transition
from deployments.states import Action, Actor, authorize

POLICY = "policy"


@transaction.atomic
def deployment_policy_stop(*, deployment_id: int, reason: str, cause: str) -> ModelDeployment:
    """Stop a deployment by policy and release its GPUs now. `cause` is the event reason
    (CamelCase, e.g. "IdleStopped", "ScheduleStopped", "BudgetStopped"); `reason` the message."""
    dep = _lock(deployment_id)
    authorize(Actor.POLICY, dep.state, Action.STOP)
    transition(dep, State.STOPPED, actor=None, reason=cause, message=reason, type_=EventType.WARNING)
    released = dep.reserved_gpus
    _give_back(dep)
    dep.save()
    audit(
        actor=POLICY,
        action="deployment.stop",
        obj=dep,
        tenant=dep.tenant,
        reason=reason,
        changes={"released_gpus": released, "cause": cause},
    )
    _enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_policy_start(*, deployment_id: int, reason: str, cause: str) -> ModelDeployment:
    """Start a stopped deployment by policy (a serving schedule's window opened): re-reserve its
    GPUs through the normal checks (raises QuotaExceeded when they are not there)."""
    dep = _lock(deployment_id)
    authorize(Actor.POLICY, dep.state, Action.START)
    _budget_allows(dep)
    transition(dep, State.APPROVED, actor=None, reason=cause, message=reason)
    _reserve(dep)
    dep.save()
    audit(
        actor=POLICY,
        action="deployment.start",
        obj=dep,
        tenant=dep.tenant,
        reason=reason,
        changes={"reserved_gpus": dep.reserved_gpus, "cause": cause},
    )
    _enqueue_reconcile(dep)
    return dep
