"""Deployment state changes. UI views, API actions, the admin and tasks all call these.

Each service locks the deployment row (select_for_update), checks the transition, adjusts
the quota reservation in the same transaction, writes an event and an audit entry, and only
then — on commit — enqueues the reconcile. Nothing here talks to a cluster.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from core.exceptions import ConflictError, DomainError, Forbidden
from core.models import audit
from deployments.choices import EventType, State
from deployments.limits import LIMITS
from deployments.models import SPEC_FIELDS, DeploymentEvent, ModelDeployment
from deployments.profiles import profile_note
from deployments.states import HOLDS_QUOTA, PERMISSIONS, RUNNING, Action, Actor, actor_of, authorize, check_transition
from deployments.validation import check_draft
from quotas.models import Tenant
from quotas.policy import auto_approves, budget_block_reason
from quotas.services import quota_release, quota_reserve

OWNER = "deployment"
# A change to any of these changes what runs on the GPUs (the model, where, how its memory is laid
# out), so it needs approval again unless the tenant's policy covers it. More GPUs do as well;
# fewer do not. Names, autoscaling targets and the token secret's name change nothing the
# approver weighed.
APPROVAL_FIELDS = frozenset(
    {
        "model_source",
        "flavor",
        "backend",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_model_len",
        "gpu_memory_utilization",
        "enable_chunked_prefill",
        "max_num_batched_tokens",
        "quantization",
        "dtype",
    }
)


def needs_approval(changed, *, old_gpus: int, new_gpus: int) -> bool:
    """Whether a spec change (field names) must be approved again."""
    return bool(APPROVAL_FIELDS & set(changed)) or new_gpus > old_gpus


class DraftInvalid(DomainError):
    """A draft failed validation; `errors` maps fields to messages."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors

    def as_dict(self) -> dict:
        return {field: [message] for field, message in self.errors.items()}


def _authorized(dep: ModelDeployment, user, action: Action) -> None:
    """Check the (role, state, action) table for this user on this locked deployment."""
    authorize(actor_of(dep.tenant, user), dep.state, action)


def _enqueue_reconcile(dep: ModelDeployment) -> None:
    from deployments.tasks import reconcile_deployment_task

    # robust: the decision is committed by then. If the broker is down the publish fails, and the
    # beat sweep re-enqueues the deployment later; the caller must not get a 500 for a done change.
    transaction.on_commit(lambda: reconcile_deployment_task.delay(dep.pk), robust=True)


def _event(
    dep: ModelDeployment,
    *,
    reason: str,
    message: str = "",
    actor=None,
    from_state: str = "",
    to_state: str = "",
    type_: str = EventType.NORMAL,
) -> DeploymentEvent:
    return DeploymentEvent.objects.create(
        deployment=dep,
        actor=actor if getattr(actor, "pk", None) else None,
        reason=reason,
        message=message,
        type=type_,
        from_state=from_state,
        to_state=to_state,
    )


def transition(
    dep: ModelDeployment, target: str, *, actor=None, reason: str, message: str = "", type_: str = EventType.NORMAL
) -> None:
    """Move a locked deployment to `target` and record the event (caller saves the row)."""
    check_transition(dep.state, target)
    _event(dep, reason=reason, message=message, actor=actor, from_state=dep.state, to_state=target, type_=type_)
    dep.state = target


def _lock(deployment_id: int) -> ModelDeployment:
    return (
        ModelDeployment.objects.select_for_update(of=("self",)).select_related("tenant", "flavor").get(pk=deployment_id)
    )


def _reserve(dep: ModelDeployment) -> None:
    reservation = quota_reserve(
        tenant=dep.tenant, flavor=dep.flavor, gpus=dep.gpus_needed, owner_type=OWNER, owner_id=dep.pk
    )
    dep.reserved_gpus = reservation.gpus


def _give_back(dep: ModelDeployment) -> bool:
    """Release the reservation (exactly once) and zero the row's copy; the caller saves the row.
    The one place the release-then-zero pair lives."""
    released = quota_release(owner_type=OWNER, owner_id=dep.pk)
    dep.reserved_gpus = 0
    return released


def _release(dep: ModelDeployment) -> None:
    """Give the reservation back now and have the reconciler remove what may still run."""
    if _give_back(dep):
        dep.save(update_fields=["reserved_gpus"])
        _enqueue_reconcile(dep)


def _budget_allows(dep: ModelDeployment) -> None:
    """Refuse (409) to reserve GPUs for a tenant its budget's hard stop has stopped (quotas.policy)."""
    if reason := budget_block_reason(dep.tenant):
        raise ConflictError(reason, field="tenant", code="budget_stopped")


def _policy_covers(dep: ModelDeployment, fit: str | None) -> bool:
    """The tenant's auto-approve policy: within nominal quota and at most its GPU ceiling."""
    return auto_approves(tenant=dep.tenant, gpus=dep.gpus_needed, fit=fit)


def _policy_reason(tenant: Tenant) -> str:
    return f"Auto-approved by tenant policy (within nominal quota and ≤ {tenant.auto_approve_max_gpus} GPUs)."


def _name_taken(tenant: Tenant, name: str) -> DomainError:
    return DomainError(
        f"A deployment named {name!r} already exists in {tenant.slug}; delete it or choose another name.",
        field="name",
        code="unique",
    )


@transaction.atomic
def deployment_create(*, tenant: Tenant, user, data: dict) -> ModelDeployment:
    """A member requests a deployment. Approved at once when the tenant policy covers it."""
    if actor_of(tenant, user) not in PERMISSIONS[Action.UPDATE].actors:
        raise Forbidden("Only members of the tenant may request deployments.")
    check = check_draft(data, tenant=tenant)
    if check.errors:
        raise DraftInvalid(check.errors)
    if ModelDeployment.objects.filter(tenant=tenant, name=data["name"]).live().exists():
        raise _name_taken(tenant, data["name"])
    fields = {k: data[k] for k in SPEC_FIELDS if k in data and data[k] is not None}
    # An empty served name (the form's blank field) is the deployment's name, as when it is left out.
    fields["served_model_name"] = data.get("served_model_name") or data["name"]
    try:
        with transaction.atomic():  # a concurrent request for the same name loses here, cleanly
            dep = ModelDeployment.objects.create(tenant=tenant, name=data["name"], created_by=user, **fields)
    except IntegrityError:
        raise _name_taken(tenant, data["name"]) from None
    if len(dep.resource_name) > 47:
        raise DomainError("The name is too long for the cluster object.", field="name")
    note = profile_note({k: getattr(dep, k) for k in SPEC_FIELDS}, tenant=tenant)
    _event(
        dep,
        reason="Requested",
        actor=user,
        to_state=State.PENDING_APPROVAL,
        message=" ".join(m for m in (check.quota.message if check.quota else "", note) if m),
    )
    audit(
        actor=user,
        action="deployment.request",
        obj=dep,
        tenant=tenant,
        changes={"gpus": dep.gpus_needed, "flavor": dep.flavor.name},
    )
    if _policy_covers(dep, check.quota.fit if check.quota else None):
        _approve_locked(dep, approver=Actor.POLICY, reason=_policy_reason(tenant))
    return dep


def _approve_locked(dep: ModelDeployment, *, approver, reason: str) -> None:
    _budget_allows(dep)
    transition(dep, State.APPROVED, actor=approver, reason="Approved", message=reason)
    _reserve(dep)  # raises QuotaExceeded; the whole transaction rolls back
    dep.approved_by = approver if getattr(approver, "pk", None) else None
    dep.decision_reason = reason
    dep.save()
    audit(
        actor=approver,
        action="deployment.approve",
        obj=dep,
        tenant=dep.tenant,
        reason=reason,
        changes={"reserved_gpus": dep.reserved_gpus, "generation": dep.generation},
    )
    _enqueue_reconcile(dep)


@transaction.atomic
def deployment_approve(*, deployment_id: int, approver, generation: int, reason: str = "") -> ModelDeployment:
    """A platform admin approves the generation they reviewed: reserve GPUs, then reconcile."""
    dep = _lock(deployment_id)
    _authorized(dep, approver, Action.APPROVE)
    if dep.generation != generation:
        raise ConflictError(
            f"The request changed since you reviewed it (you saw generation {generation}, it is "
            f"now {dep.generation}). Review it again.",
            field="generation",
            code="stale_generation",
        )
    _approve_locked(dep, approver=approver, reason=reason or "Approved by a platform admin.")
    return dep


@transaction.atomic
def deployment_reject(*, deployment_id: int, approver, reason: str) -> ModelDeployment:
    """A platform admin rejects with a reason the requester sees. Final: a new request is a new
    deployment. A rejected change to a running deployment stops it and releases its GPUs."""
    dep = _lock(deployment_id)
    _authorized(dep, approver, Action.REJECT)
    if not reason or not reason.strip():
        raise DomainError("Give a reason for the rejection.", field="reason")
    transition(dep, State.REJECTED, actor=approver, reason="Rejected", message=reason.strip(), type_=EventType.WARNING)
    dep.decision_reason = reason.strip()
    dep.save()
    _release(dep)
    audit(actor=approver, action="deployment.reject", obj=dep, tenant=dep.tenant, reason=reason.strip())
    return dep


@transaction.atomic
def deployment_cancel(*, deployment_id: int, user) -> ModelDeployment:
    """A member withdraws a request still pending approval."""
    dep = _lock(deployment_id)
    _authorized(dep, user, Action.CANCEL)
    transition(dep, State.CANCELLED, actor=user, reason="Cancelled")
    dep.save()
    _release(dep)
    audit(actor=user, action="deployment.cancel", obj=dep, tenant=dep.tenant)
    return dep


@transaction.atomic
def deployment_stop(*, deployment_id: int, user) -> ModelDeployment:
    """Stop serving; the reconciler removes the workload and then releases the GPUs."""
    dep = _lock(deployment_id)
    _authorized(dep, user, Action.STOP)
    transition(dep, State.STOPPED, actor=user, reason="Stopped", message="Stop requested.")
    dep.save()
    audit(actor=user, action="deployment.stop", obj=dep, tenant=dep.tenant)
    _enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_start(*, deployment_id: int, user) -> ModelDeployment:
    """Start a stopped deployment again: re-reserve its GPUs. No approval is needed: every change
    to what runs sends a stopped deployment back to approval, so its spec is the approved one."""
    dep = _lock(deployment_id)
    _authorized(dep, user, Action.START)
    _budget_allows(dep)
    transition(dep, State.APPROVED, actor=user, reason="Started", message="Start requested.")
    _reserve(dep)
    dep.save()
    audit(
        actor=user, action="deployment.start", obj=dep, tenant=dep.tenant, changes={"reserved_gpus": dep.reserved_gpus}
    )
    _enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_scale(*, deployment_id: int, user, min_replicas: int, max_replicas: int) -> ModelDeployment:
    """Change the replica range. More GPUs than approved go back to approval (unless the policy
    covers them); fewer shrink the reservation at once."""
    dep = _lock(deployment_id)
    _authorized(dep, user, Action.SCALE)
    low, high = LIMITS["min_replicas"], LIMITS["max_replicas"]
    if min_replicas not in low or max_replicas not in high or min_replicas > max_replicas:
        raise DomainError(
            f"Replicas must satisfy {low.low} ≤ min ≤ max, {high.low} ≤ max ≤ {high.high}.", field="max_replicas"
        )
    return _change_spec(
        dep, user, {"min_replicas": min_replicas, "max_replicas": max_replicas}, action="deployment.scale"
    )


@transaction.atomic
def deployment_update(*, deployment_id: int, user, data: dict) -> ModelDeployment:
    """Change the spec (bumps generation). A change to what runs goes back to approval unless the
    policy covers it, while the current version keeps serving on its current reservation."""
    dep = _lock(deployment_id)
    _authorized(dep, user, Action.UPDATE)
    if "backend" in data and data["backend"] != dep.backend:
        raise DomainError(
            "The backend is fixed when the deployment is created; request a new deployment to use another backend.",
            field="backend",
            code="immutable",
        )
    return _change_spec(dep, user, data, action="deployment.update")


def _change_spec(dep: ModelDeployment, user, data: dict, *, action: str) -> ModelDeployment:
    merged = {k: getattr(dep, k) for k in SPEC_FIELDS} | {k: v for k, v in data.items() if k in SPEC_FIELDS}
    check = check_draft(merged, tenant=dep.tenant, credit_gpus=dep.reserved_gpus)
    if check.errors:
        raise DraftInvalid(check.errors)
    changed = {k: v for k, v in merged.items() if getattr(dep, k) != v}
    if not changed:
        return dep
    old_gpus = dep.gpus_needed
    before = {k: str(getattr(dep, k)) for k in changed}
    for key, value in changed.items():
        setattr(dep, key, value)
    dep.generation += 1
    _event(
        dep,
        reason="SpecUpdated",
        actor=user,
        message=(
            f"Changed {', '.join(sorted(changed))} (generation {dep.generation}). "
            + profile_note({k: getattr(dep, k) for k in SPEC_FIELDS}, tenant=dep.tenant, credit_gpus=dep.reserved_gpus)
        ).strip(),
    )
    needs = needs_approval(changed, old_gpus=old_gpus, new_gpus=dep.gpus_needed)
    covered = _policy_covers(dep, check.quota.fit if check.quota else None)
    audit(
        actor=user,
        action=action,
        obj=dep,
        tenant=dep.tenant,
        changes={
            "before": before,
            "after": {k: str(v) for k, v in changed.items()},
            "generation": dep.generation,
            "approval": "required" if needs and not covered else "not required",
        },
    )
    if dep.state == State.PENDING_APPROVAL:
        if covered:
            _approve_locked(dep, approver=Actor.POLICY, reason=_policy_reason(dep.tenant))
            return dep
    elif needs and not covered:
        serving = "; the current version keeps serving" if dep.state in RUNNING else ""
        transition(
            dep,
            State.PENDING_APPROVAL,
            actor=user,
            reason="ApprovalRequired",
            message=f"A change to what runs needs a platform admin's approval{serving}.",
        )
    else:
        if dep.state in RUNNING:
            _reserve(dep)  # resizes the reservation (grows only when the policy covers it)
        if needs:  # covered: the policy approves the change, stopped or running
            audit(
                actor=Actor.POLICY,
                action="deployment.approve",
                obj=dep,
                tenant=dep.tenant,
                reason=_policy_reason(dep.tenant),
                changes={"reserved_gpus": dep.reserved_gpus, "generation": dep.generation},
            )
    dep.save()
    _enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_delete(*, deployment_id: int, user) -> ModelDeployment:
    """Delete: requests that never ran go straight to deleted; others are torn down first."""
    dep = _lock(deployment_id)
    _authorized(dep, user, Action.DELETE)
    if dep.state in (State.PENDING_APPROVAL, State.REJECTED, State.CANCELLED) and dep.observed_generation == 0:
        transition(dep, State.DELETED, actor=user, reason="Deleted")
        _give_back(dep)
    else:
        transition(
            dep,
            State.DELETING,
            actor=user,
            reason="Deleting",
            message="Removing the workload from the cluster; GPUs are released once it is gone.",
        )
        _enqueue_reconcile(dep)
    dep.save()
    audit(actor=user, action="deployment.delete", obj=dep, tenant=dep.tenant)
    return dep


@transaction.atomic
def deployment_release_quota(*, deployment_id: int, reason: str) -> bool:
    """Release the GPUs once the workload is gone (exactly once; later calls do nothing)."""
    dep = _lock(deployment_id)
    if dep.state in HOLDS_QUOTA or (dep.state == State.PENDING_APPROVAL and dep.reserved_gpus):
        # Started again since the caller (the reconciler) read it stopped: what it holds now is the
        # new start's reservation, not the stopped run's.
        return False
    released = _give_back(dep)
    if released:
        dep.save(update_fields=["reserved_gpus", "updated"])
        _event(dep, reason="QuotaReleased", message=reason)
    return released


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
    the reconcile read it, or when the state is no longer one the cluster may drive."""
    dep = _lock(deployment_id)
    if dep.generation != generation:
        return False  # stale observation: a newer reconcile is already enqueued
    changed = False
    moves = bool(state) and state != dep.state
    if moves and (dep.state not in HOLDS_QUOTA or dep.state == State.DELETING):
        return False  # people moved it (stopped, deleting…): the cluster does not decide
    for type_, ev_reason, ev_message in events:  # what the runtime did comes before what it saw
        _event(dep, reason=ev_reason, message=ev_message, type_=type_)
    if moves:
        type_ = EventType.WARNING if state in (State.FAILED, State.DEGRADED) else EventType.NORMAL
        transition(dep, state, reason=reason or "Observed", message=message, type_=type_)
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


@transaction.atomic
def deployment_mark_deleted(*, deployment_id: int) -> bool:
    """The workload is gone: release GPUs exactly once and finish the deletion."""
    dep = _lock(deployment_id)
    if dep.state != State.DELETING:
        return False
    _give_back(dep)
    transition(dep, State.DELETED, reason="Deleted", message="The workload is gone; GPUs released.")
    dep.save()
    return True
