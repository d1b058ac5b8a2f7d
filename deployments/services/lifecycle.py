"""The lifecycle of what runs: stop, start, delete, and what the reconciler observes.

Each service locks the deployment row, checks the (role, state, action) table, moves the state,
settles the GPUs (`settle_gpus`, the one rule) in the same transaction, writes an event and an
audit entry, and only then — on commit — enqueues the reconcile. A person and the tenant's
policy go through the same services; the policy is the actor `Actor.POLICY`, recorded as
"policy". Nothing here talks to a cluster.
"""

from __future__ import annotations

from django.db import transaction

from core.exceptions import DomainError
from core.models import audit
from deployments.choices import EventType, RevisionStatus, State
from deployments.models import ModelDeployment
from deployments.preemption import readmitted_without_room
from deployments.services.common import POLICY, authorized, enqueue_reconcile, event, lock, settle_gpus, transition
from deployments.states import ADMITTED, NEVER_APPROVED, RUNNING, UNHEALTHY, WAITING, Action, Actor

EVENT_ACTOR = {Actor.POLICY: None}  # the timeline shows no person for the policy


def _who(user):
    """The audit log's actor: the user, or "policy"."""
    return POLICY if user == Actor.POLICY else user


@transaction.atomic
def deployment_stop(*, deployment_id: int, user, cause: str = "Stopped", reason: str = "") -> ModelDeployment:
    """Stop serving: the GPUs are released now (settle_gpus) and the reconciler removes the
    workload. `user` is a person or Actor.POLICY (idle, schedule, budget), `cause` the event's
    CamelCase reason and `reason` its message. A waiting proposal stays waiting."""
    dep = lock(deployment_id)
    authorized(dep, user, Action.STOP)
    released = dep.reserved_gpus
    kind = EventType.WARNING if user == Actor.POLICY else EventType.NORMAL
    transition(dep, State.STOPPED, actor=user, reason=cause, message=reason or "Stop requested.", type_=kind)
    settle_gpus(dep)
    dep.save()
    changes = {"released_gpus": released} | ({"cause": cause} if user == Actor.POLICY else {})
    audit(actor=_who(user), action="deployment.stop", obj=dep, tenant=dep.tenant, reason=reason, changes=changes)
    enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_start(
    *, deployment_id: int, user, cause: str = "Started", reason: str = "", details: dict | None = None
) -> ModelDeployment:
    """Start a stopped or failed deployment again on its serving revision (approved already):
    re-reserve its GPUs through the quota and budget checks (QuotaExceeded / 409 otherwise).
    `details` add to the audit entry's changes (the key that woke it, deployments.wake)."""
    dep = lock(deployment_id)
    authorized(dep, user, Action.START)
    transition(dep, State.APPROVED, actor=user, reason=cause, message=reason or "Start requested.")
    settle_gpus(dep)
    dep.save()
    changes = {"reserved_gpus": dep.reserved_gpus} | ({"cause": cause} if user == Actor.POLICY else {})
    changes |= details or {}
    audit(actor=_who(user), action="deployment.start", obj=dep, tenant=dep.tenant, reason=reason, changes=changes)
    enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_delete(*, deployment_id: int, user) -> ModelDeployment:
    """Delete: requests that never ran go straight to deleted; others are torn down first. The
    GPUs are released now either way; a waiting proposal is withdrawn."""
    from deployments.services.revisions import _close, _pending

    dep = lock(deployment_id)
    authorized(dep, user, Action.DELETE)
    if (pending := _pending(dep)) is not None:
        _close(pending, RevisionStatus.WITHDRAWN, by=user, reason="The deployment was deleted.")
    never_ran = dep.state in NEVER_APPROVED and dep.observed_generation == 0
    if never_ran:
        transition(dep, State.DELETED, actor=user, reason="Deleted")
    else:
        transition(
            dep, State.DELETING, actor=user, reason="Deleting", message="Removing the workload from the cluster."
        )
        enqueue_reconcile(dep)
    settle_gpus(dep)
    dep.save()
    audit(actor=user, action="deployment.delete", obj=dep, tenant=dep.tenant)
    return dep


@transaction.atomic
def deployment_observe(
    *,
    deployment_id: int,
    generation: int,
    state: str | None,
    conditions: list[dict],
    observed_generation: int | None = None,
    message: str = "",
    endpoint_url: str | None = None,
    metrics_url: str | None = None,
    cluster_uid: str | None = None,
    reason: str = "",
    events: list[tuple[str, str, str]] = (),
) -> bool:
    """Record what the reconciler saw. A no-op (returns False) when the spec moved on since
    the reconcile read it, or when the state is no longer one the cluster may drive. A move to
    failed releases the GPUs (settle_gpus) in the same transaction."""
    dep = lock(deployment_id)
    if dep.generation != generation:
        return False  # stale observation: a newer reconcile is already enqueued
    changed = False
    moves = bool(state) and state != dep.state
    if moves and dep.state not in RUNNING:
        return False  # people or the policy moved it (stopped, deleting…): the cluster does not decide
    for type_, ev_reason, ev_message in events:  # what the runtime did comes before what it saw
        event(dep, reason=ev_reason, message=ev_message, type_=type_)
    if moves:
        type_ = EventType.WARNING if state in UNHEALTHY else EventType.NORMAL
        was = dep.state
        transition(dep, state, reason=reason or "Observed", message=message, type_=type_)
        _settle_observed(dep, was)
        changed = True
    if observed_generation is None:
        observed_generation = dep.observed_generation
    updates = {"conditions": conditions, "status_message": message, "observed_generation": observed_generation}
    for key, value in (("endpoint_url", endpoint_url), ("metrics_url", metrics_url), ("cluster_uid", cluster_uid)):
        if value is not None:
            updates[key] = value
    for key, value in updates.items():
        if getattr(dep, key) != value:
            setattr(dep, key, value)
            changed = True
    if changed:
        dep.save()
    return changed


def _settle_observed(dep: ModelDeployment, was: str) -> None:
    """The GPU rule after a move the cluster made: it never preempts another deployment. One a
    higher tier displaced (deployments.preemption) and Kueue admitted again, out of the queue,
    takes a reservation again; where the books have no room it says so and holds none."""
    if dep.displaced and was in WAITING and dep.state in ADMITTED:
        dep.displaced = False
        try:
            with transaction.atomic():
                settle_gpus(dep, preempt=False)
        except DomainError as refused:
            dep.displaced = True
            readmitted_without_room(dep, refused.message)
        return
    settle_gpus(dep, preempt=False)


@transaction.atomic
def deployment_mark_deleted(*, deployment_id: int) -> bool:
    """The workload is gone: finish the deletion (the GPUs were released when it began)."""
    dep = lock(deployment_id)
    if dep.state != State.DELETING:
        return False
    transition(dep, State.DELETED, reason="Deleted", message="The workload is gone.")
    settle_gpus(dep)
    dep.save()
    return True


@transaction.atomic
def deployment_record_queue(*, deployment_id: int, queue: dict | None) -> bool:
    """Store (or clear) the Kueue queue position on the Admitted condition, under the row lock so
    a reconcile recording at the same moment is not overwritten. `updated` is left alone: the
    position moving is not the deployment changing (the requeue backoff reads `updated`)."""
    row = ModelDeployment.objects.select_for_update().filter(pk=deployment_id).first()
    if row is None:
        return False
    conditions = []
    for c in row.conditions or []:
        if c.get("type") == "Admitted":
            c = {k: v for k, v in c.items() if k != "queue"}
            if queue is not None and c.get("status") != "True":
                c["queue"] = queue
        conditions.append(c)
    if conditions == row.conditions:
        return False
    ModelDeployment.objects.filter(pk=deployment_id).update(conditions=conditions)
    return True
