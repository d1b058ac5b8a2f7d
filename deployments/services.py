"""Deployment state changes. UI views, API actions, the admin and tasks all call these.

Each service locks the deployment row (select_for_update), checks the transition, adjusts
the quota reservation in the same transaction, writes an event and an audit entry, and only
then — on commit — enqueues the reconcile. Nothing here talks to a cluster.
"""

from __future__ import annotations

from django.db import transaction

from deployments.choices import EventType, State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.states import HOLDS_QUOTA, RUNNING, check_transition
from deployments.validation import check_draft
from portal.exceptions import DomainError, Forbidden
from portal.models import audit
from quotas.choices import Fit, Role
from quotas.models import Tenant, is_platform_admin
from quotas.services import quota_release, quota_reserve

OWNER = "deployment"
SPEC_FIELDS = (
    "model_source", "served_model_name", "hf_token_secret", "flavor", "backend",
    "tensor_parallel_size", "pipeline_parallel_size", "min_replicas", "max_replicas",
    "target_ongoing_requests", "max_model_len", "gpu_memory_utilization", "enable_chunked_prefill",
    "max_num_batched_tokens", "quantization", "dtype", "parameter_count_b",
)


class DraftInvalid(DomainError):
    """A draft failed validation; `errors` maps fields to messages."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors

    def as_dict(self) -> dict:
        return {field: [message] for field, message in self.errors.items()}


def _require(tenant: Tenant, user, role: str) -> None:
    if not tenant.has_role(user, role):
        raise Forbidden("Your role in this tenant does not allow this.")


def _enqueue_reconcile(dep: ModelDeployment) -> None:
    from runtime.tasks import reconcile_deployment_task

    # robust: the decision is committed by then. If the broker is down the publish fails, and the
    # beat sweep re-enqueues the deployment later; the caller must not get a 500 for a done change.
    transaction.on_commit(lambda: reconcile_deployment_task.delay(dep.pk), robust=True)


def _event(dep: ModelDeployment, *, reason: str, message: str = "", actor=None,
           from_state: str = "", to_state: str = "", type_: str = EventType.NORMAL) -> DeploymentEvent:
    return DeploymentEvent.objects.create(deployment=dep, actor=actor if getattr(actor, "pk", None) else None,
                                          reason=reason, message=message, type=type_,
                                          from_state=from_state, to_state=to_state)


def transition(dep: ModelDeployment, target: str, *, actor=None, reason: str, message: str = "",
               type_: str = EventType.NORMAL) -> None:
    """Move a locked deployment to `target` and record the event (caller saves the row)."""
    check_transition(dep.state, target)
    _event(dep, reason=reason, message=message, actor=actor, from_state=dep.state, to_state=target,
           type_=type_)
    dep.state = target


def _lock(deployment_id: int) -> ModelDeployment:
    return (ModelDeployment.objects.select_for_update(of=("self",))
            .select_related("tenant", "flavor").get(pk=deployment_id))


def _reserve(dep: ModelDeployment) -> None:
    reservation = quota_reserve(tenant=dep.tenant, flavor=dep.flavor, gpus=dep.gpus_needed,
                                owner_type=OWNER, owner_id=dep.pk)
    dep.reserved_gpus = reservation.gpus


def _auto_approvable(dep: ModelDeployment, fit: str | None) -> bool:
    limit = dep.tenant.auto_approve_max_gpus
    return bool(limit) and fit == Fit.NOMINAL and dep.gpus_needed <= limit


@transaction.atomic
def deployment_create(*, tenant: Tenant, user, data: dict) -> ModelDeployment:
    """A member requests a deployment. Auto-approved when the tenant policy allows it."""
    _require(tenant, user, Role.MEMBER)
    check = check_draft(data, tenant=tenant)
    if check.errors:
        raise DraftInvalid(check.errors)
    fields = {k: data[k] for k in SPEC_FIELDS if k in data and data[k] is not None}
    fields.setdefault("served_model_name", data.get("served_model_name") or data["name"])
    dep = ModelDeployment.objects.create(tenant=tenant, name=data["name"], created_by=user, **fields)
    if len(dep.resource_name) > 47:
        raise DomainError("The name is too long for the cluster object.", field="name")
    _event(dep, reason="Requested", actor=user, to_state=State.PENDING_APPROVAL,
           message=check.quota.message if check.quota else "")
    audit(actor=user, action="deployment.request", obj=dep, tenant=tenant,
          changes={"gpus": dep.gpus_needed, "flavor": dep.flavor.name})
    if _auto_approvable(dep, check.quota.fit if check.quota else None):
        _approve_locked(dep, approver=None, reason="Auto-approved by tenant policy "
                        f"(within nominal quota and ≤ {tenant.auto_approve_max_gpus} GPUs).")
    return dep


def _approve_locked(dep: ModelDeployment, *, approver, reason: str) -> None:
    transition(dep, State.APPROVED, actor=approver, reason="Approved", message=reason)
    _reserve(dep)  # raises QuotaExceeded; the whole transaction rolls back
    dep.approved_by = approver if getattr(approver, "pk", None) else None
    dep.decision_reason = reason
    dep.save()
    audit(actor=approver, action="deployment.approve", obj=dep, tenant=dep.tenant, reason=reason,
          changes={"reserved_gpus": dep.reserved_gpus})
    _enqueue_reconcile(dep)


@transaction.atomic
def deployment_approve(*, deployment_id: int, approver, reason: str = "") -> ModelDeployment:
    """Platform admin approves: reserve GPUs, then schedule the reconcile."""
    if not is_platform_admin(approver):
        raise Forbidden("Only platform admins approve deployments.")
    dep = _lock(deployment_id)
    _approve_locked(dep, approver=approver, reason=reason or "Approved by a platform admin.")
    return dep


@transaction.atomic
def deployment_reject(*, deployment_id: int, approver, reason: str) -> ModelDeployment:
    """Platform admin rejects with a reason the requester sees."""
    if not is_platform_admin(approver):
        raise Forbidden("Only platform admins reject deployments.")
    if not reason or not reason.strip():
        raise DomainError("Give a reason for the rejection.", field="reason")
    dep = _lock(deployment_id)
    transition(dep, State.REJECTED, actor=approver, reason="Rejected", message=reason.strip(),
               type_=EventType.WARNING)
    dep.decision_reason = reason.strip()
    dep.save()
    # A re-approval request after a spec update may still hold the previous reservation.
    if quota_release(owner_type=OWNER, owner_id=dep.pk):
        dep.reserved_gpus = 0
        dep.save(update_fields=["reserved_gpus"])
        _enqueue_reconcile(dep)
    audit(actor=approver, action="deployment.reject", obj=dep, tenant=dep.tenant, reason=reason.strip())
    return dep


@transaction.atomic
def deployment_cancel(*, deployment_id: int, user) -> ModelDeployment:
    """The requester (or any member) withdraws a request still pending approval."""
    dep = _lock(deployment_id)
    _require(dep.tenant, user, Role.MEMBER)
    transition(dep, State.CANCELLED, actor=user, reason="Cancelled")
    dep.save()
    if quota_release(owner_type=OWNER, owner_id=dep.pk):
        dep.reserved_gpus = 0
        dep.save(update_fields=["reserved_gpus"])
        _enqueue_reconcile(dep)
    audit(actor=user, action="deployment.cancel", obj=dep, tenant=dep.tenant)
    return dep


@transaction.atomic
def deployment_stop(*, deployment_id: int, user) -> ModelDeployment:
    """Stop serving; the reconciler removes the workload and then releases the GPUs."""
    dep = _lock(deployment_id)
    _require(dep.tenant, user, Role.MEMBER)
    transition(dep, State.STOPPED, actor=user, reason="Stopped", message="Stop requested.")
    dep.save()
    audit(actor=user, action="deployment.stop", obj=dep, tenant=dep.tenant)
    _enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_start(*, deployment_id: int, user) -> ModelDeployment:
    """Start a stopped or failed deployment again: re-reserve its GPUs (it was approved)."""
    dep = _lock(deployment_id)
    _require(dep.tenant, user, Role.MEMBER)
    transition(dep, State.APPROVED, actor=user, reason="Started", message="Start requested.")
    _reserve(dep)
    dep.save()
    audit(actor=user, action="deployment.start", obj=dep, tenant=dep.tenant)
    _enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_scale(*, deployment_id: int, user, min_replicas: int, max_replicas: int) -> ModelDeployment:
    """Change the replica range; the reservation follows max replicas, re-checked against quota."""
    dep = _lock(deployment_id)
    _require(dep.tenant, user, Role.MEMBER)
    if dep.state in (State.DELETING, State.DELETED, State.REJECTED, State.CANCELLED):
        raise DomainError(f"Cannot scale a deployment that is {dep.get_state_display().lower()}.",
                          code="invalid_transition")
    if min_replicas < 0 or max_replicas < 1 or max_replicas > 100 or min_replicas > max_replicas:
        raise DomainError("Replicas must satisfy 0 ≤ min ≤ max, 1 ≤ max ≤ 100.", field="max_replicas")
    before = (dep.min_replicas, dep.max_replicas)
    dep.min_replicas, dep.max_replicas = min_replicas, max_replicas
    if dep.state in RUNNING:
        _reserve(dep)  # resizes the reservation or raises QuotaExceeded
    dep.generation += 1
    dep.save()
    _event(dep, reason="Scaled", actor=user,
           message=f"Replicas {before[0]}–{before[1]} → {min_replicas}–{max_replicas}.")
    audit(actor=user, action="deployment.scale", obj=dep, tenant=dep.tenant,
          changes={"from": list(before), "to": [min_replicas, max_replicas]})
    if dep.state in RUNNING:
        _enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_update(*, deployment_id: int, user, data: dict) -> ModelDeployment:
    """Change the spec (bumps generation). A bigger GPU footprint goes back to approval while
    the current version keeps serving on its current reservation."""
    dep = _lock(deployment_id)
    _require(dep.tenant, user, Role.MEMBER)
    if dep.state in (State.DELETING, State.DELETED, State.CANCELLED):
        raise DomainError(f"Cannot update a deployment that is {dep.get_state_display().lower()}.",
                          code="invalid_transition")
    merged = {k: getattr(dep, k) for k in SPEC_FIELDS} | {k: v for k, v in data.items() if k in SPEC_FIELDS}
    check = check_draft(merged, tenant=dep.tenant, credit_gpus=dep.reserved_gpus)
    if check.errors:
        raise DraftInvalid(check.errors)
    old_gpus, old_flavor = dep.gpus_needed, dep.flavor_id
    changed = {k: v for k, v in merged.items() if getattr(dep, k) != v}
    if not changed:
        return dep
    for key, value in merged.items():
        setattr(dep, key, value)
    dep.generation += 1
    grows = dep.gpus_needed > old_gpus or dep.flavor_id != old_flavor
    _event(dep, reason="SpecUpdated", actor=user,
           message=f"Changed {', '.join(sorted(changed))} (generation {dep.generation}).")
    if dep.state in RUNNING | {State.FAILED, State.STOPPED, State.REJECTED} and grows:
        if dep.state in RUNNING and _auto_approvable(dep, check.quota.fit if check.quota else None):
            _reserve(dep)
        else:
            transition(dep, State.PENDING_APPROVAL, actor=user, reason="ApprovalRequired",
                       message="A larger GPU footprint needs approval; the current version keeps serving.")
    elif dep.state in RUNNING:
        _reserve(dep)  # same or smaller footprint: shrink the reservation now
    dep.save()
    audit(actor=user, action="deployment.update", obj=dep, tenant=dep.tenant,
          changes={k: str(v) for k, v in changed.items()})
    _enqueue_reconcile(dep)
    return dep


@transaction.atomic
def deployment_delete(*, deployment_id: int, user) -> ModelDeployment:
    """Delete: requests that never ran go straight to deleted; others are torn down first."""
    dep = _lock(deployment_id)
    _require(dep.tenant, user, Role.MEMBER)
    if dep.state in (State.PENDING_APPROVAL, State.REJECTED, State.CANCELLED) and dep.observed_generation == 0:
        transition(dep, State.DELETED, actor=user, reason="Deleted")
        quota_release(owner_type=OWNER, owner_id=dep.pk)
        dep.reserved_gpus = 0
    else:
        transition(dep, State.DELETING, actor=user, reason="Deleting",
                   message="Removing the workload from the cluster; GPUs are released once it is gone.")
        _enqueue_reconcile(dep)
    dep.save()
    audit(actor=user, action="deployment.delete", obj=dep, tenant=dep.tenant)
    return dep


@transaction.atomic
def deployment_release_quota(*, deployment_id: int, reason: str) -> bool:
    """Release the GPUs once the workload is gone (exactly once; later calls do nothing)."""
    dep = _lock(deployment_id)
    released = quota_release(owner_type=OWNER, owner_id=dep.pk)
    if released:
        dep.reserved_gpus = 0
        dep.save(update_fields=["reserved_gpus", "updated"])
        _event(dep, reason="QuotaReleased", message=reason)
    return released


@transaction.atomic
def deployment_observe(*, deployment_id: int, generation: int, state: str | None,
                       conditions: list[dict], observed_generation: int | None = None,
                       message: str = "", endpoint_url: str | None = None,
                       metrics_url: str | None = None, cluster_uid: str | None = None,
                       reason: str = "", events: list[tuple[str, str, str]] = ()) -> bool:
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
    updates = {"conditions": conditions, "status_message": message,
               "observed_generation": observed_generation if observed_generation is not None else dep.observed_generation}
    for key, value in (("endpoint_url", endpoint_url), ("metrics_url", metrics_url),
                       ("cluster_uid", cluster_uid)):
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
    quota_release(owner_type=OWNER, owner_id=dep.pk)
    dep.reserved_gpus = 0
    transition(dep, State.DELETED, reason="Deleted", message="The workload is gone; GPUs released.")
    dep.save()
    return True
