"""Spec revisions: request, change, scale, roll back, and decide.

A deployment is a series of immutable revisions. The *serving* revision is the last approved
one: its spec is on the deployment row and it keeps running, with its GPUs, whatever happens to
a proposal. At most one revision is *proposed* at a time; a newer proposal supersedes it.
Approving a revision applies its spec to the row (and the reservation follows, `settle_gpus`);
rejecting or withdrawing one touches nothing that runs. Before the first approval the row holds
the latest proposal (what would run), and the deployment's state is `pending_approval`.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from core.exceptions import ConflictError, DomainError, Forbidden
from core.limits import check_room
from core.models import audit
from deployments.choices import EventType, RevisionStatus, State
from deployments.limits import LIMITS
from deployments.models import SPEC_FIELDS, SPEC_LABELS, DeploymentRevision, ModelDeployment
from deployments.profiles import profile_note
from deployments.services.common import (
    DraftInvalid,
    apply_spec,
    authorized,
    enqueue_reconcile,
    event,
    lock,
    name_taken,
    policy_covers,
    policy_reason,
    served_name_holder,
    served_name_taken,
    settle_gpus,
    spec_draft,
    spec_from_draft,
    spec_gpus,
    spec_of,
    transition,
)
from deployments.states import PERMISSIONS, REQUESTED, Action, Actor, actor_of, authorize
from deployments.validation import check_draft
from quotas.models import Tenant

# A change to any of these changes what runs on the GPUs (the model, where, how its memory is laid
# out), so it needs approval unless the tenant's policy covers it. More GPUs do as well; fewer do
# not. Names, autoscaling targets and the token secret's name change nothing the approver weighed.
APPROVAL_FIELDS = frozenset(
    {
        "model_source",
        "model_revision",  # other weights (and code) at another revision of the same model
        "task",
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
        "kv_cache_dtype",
        "priority_tier",  # who may be preempted for whom in the tenant's queue
    }
)
REPLICA_FIELDS = ("min_replicas", "max_replicas")
P = RevisionStatus


def needs_approval(changed, *, old_gpus: int, new_gpus: int) -> bool:
    """Whether a spec change (field names) must be approved by a platform admin or the policy."""
    return bool(APPROVAL_FIELDS & set(changed)) or new_gpus > old_gpus


def _pending(dep: ModelDeployment) -> DeploymentRevision | None:
    return dep.revisions.select_for_update().filter(status=P.PROPOSED).first()


def _close(rev: DeploymentRevision, status: str, *, by=None, reason: str = "") -> None:
    """Give a proposed revision its final status (the caller holds the deployment's row lock)."""
    rev.status = status
    rev.decided_at = timezone.now()
    rev.decided_by = by if getattr(by, "pk", None) else None
    rev.decided_by_policy = by == Actor.POLICY
    rev.decision_reason = reason
    rev.save(update_fields=["status", "decided_at", "decided_by", "decided_by_policy", "decision_reason"])


def _check(dep: ModelDeployment, spec: dict) -> object:
    check = check_draft(spec_draft(spec), tenant=dep.tenant, credit_gpus=dep.reserved_gpus, exclude=dep.pk)
    if check.errors:
        raise DraftInvalid(check.errors)
    _served_name_free(dep.tenant, spec.get("served_model_name") or dep.name, exclude=dep.pk)
    return check


def _served_name_free(tenant: Tenant, served: str, *, exclude: int | None = None) -> None:
    if holder := served_name_holder(tenant, served, exclude=exclude):
        raise served_name_taken(tenant, served, holder)


def _new_revision(
    dep: ModelDeployment, spec: dict, *, user, message: str, rollback_of=None, status: str = P.PROPOSED
) -> DeploymentRevision:
    number = (dep.revisions.aggregate(n=Max("number"))["n"] or 0) + 1
    return DeploymentRevision.objects.create(
        deployment=dep,
        number=number,
        spec=spec,
        gpus=spec_gpus(spec),
        status=status,
        message=message,
        rollback_of=rollback_of,
        proposed_by=user if getattr(user, "pk", None) else None,
    )


def _changed(old: dict | None, new: dict) -> list[str]:
    return sorted(k for k in SPEC_FIELDS if old is None or old.get(k) != new.get(k))


def approve_locked(dep: ModelDeployment, rev: DeploymentRevision, *, approver, reason: str) -> None:
    """Make `rev` the serving revision: apply its spec to the row, settle the GPUs, reconcile."""
    authorize(Actor.POLICY if approver == Actor.POLICY else actor_of(dep.tenant, approver), dep.state, Action.APPROVE)
    first = dep.state in REQUESTED
    if first:
        transition(dep, State.APPROVED, actor=approver, reason="Approved", message=f"Revision {rev.number}: {reason}")
    else:
        event(dep, reason="RevisionApproved", actor=approver, message=f"Revision {rev.number}: {reason}")
    # Another deployment may have taken the served name since this revision was proposed.
    _served_name_free(dep.tenant, rev.spec.get("served_model_name") or dep.name, exclude=dep.pk)
    if apply_spec(dep, rev.spec) and not first:  # before the first approval the row holds it already
        dep.generation += 1
    settle_gpus(dep)  # raises QuotaExceeded / budget_stopped: the whole decision rolls back
    _close(rev, P.APPROVED, by=approver, reason=reason)
    dep.serving_revision = rev
    dep.approved_by = approver if getattr(approver, "pk", None) else None
    dep.decision_reason = reason
    dep.save()
    audit(
        actor=approver,
        action="deployment.approve",
        obj=dep,
        tenant=dep.tenant,
        reason=reason,
        changes={"revision": rev.number, "reserved_gpus": dep.reserved_gpus, "generation": dep.generation},
    )
    enqueue_reconcile(dep)


def _rebase(pending: DeploymentRevision, old_serving: dict, new_serving: dict, *, user) -> None:
    """A change applied to the serving revision while a proposal waits: carry it into the
    proposal where the proposal left those fields as they were (a new revision supersedes it)."""
    spec = dict(pending.spec)
    for key in SPEC_FIELDS:
        if pending.spec.get(key) == old_serving.get(key):
            spec[key] = new_serving.get(key)
    if spec == pending.spec:
        return
    dep = pending.deployment
    if spec == new_serving:
        _close(pending, P.WITHDRAWN, by=user, reason="The serving revision now matches it.")
        return
    _close(pending, P.SUPERSEDED, by=user, reason="Rebased on the new serving revision.")
    _new_revision(dep, spec, user=pending.proposed_by, message=f"{pending.message} (rebased)".strip())


def submit(dep: ModelDeployment, spec: dict, *, user, action: str, message: str, rollback_of=None, scale=False):
    """Propose `spec` for a locked deployment and decide what the rules decide on their own.

    Before the first approval the proposal replaces the last one and is what would run. After
    it, a spec equal to the serving one withdraws the waiting proposal; a change that needs no
    approval (or that the policy covers) becomes the serving revision at once; anything else
    waits for a platform admin, while the serving revision runs on untouched. `scale` applies a
    replica change to the serving revision and keeps a waiting proposal (rebased) beside it.
    """
    check = _check(dep, spec)
    serving = spec_of(dep) if dep.serving_revision_id else None
    pending = _pending(dep)
    if pending is not None and pending.spec == spec:
        return dep
    if serving is not None and spec == serving:
        if pending is not None and not scale:
            _close(pending, P.WITHDRAWN, by=user, reason="Edited back to the serving revision.")
            event(dep, reason="ChangeWithdrawn", actor=user, message=f"Revision {pending.number} matched what serves.")
        return dep
    changed = _changed(serving, spec)
    needs = serving is None or needs_approval(changed, old_gpus=dep.gpus_needed, new_gpus=spec_gpus(spec))
    fit = check.quota.fit if check.quota else None
    covered = policy_covers(dep.tenant, spec_gpus(spec), fit, spec.get("priority_tier") or "")
    keep = scale and pending is not None
    if keep and needs and not covered:
        raise ConflictError(
            f"Revision {pending.number} is waiting for approval: change the replicas beyond what is approved "
            "by editing that change, or withdraw it first.",
            field="max_replicas",
            code="change_pending",
        )
    if pending is not None and not keep:
        _close(pending, P.SUPERSEDED, by=user, reason="Replaced by a newer change.")
    # Beside a waiting proposal (a scale within approval) the new revision is decided at once below,
    # so it never counts as a second proposed one.
    status = P.APPROVED if keep else P.PROPOSED
    rev = _new_revision(dep, spec, user=user, message=message, rollback_of=rollback_of, status=status)
    note = profile_note(spec_draft(spec), tenant=dep.tenant, credit_gpus=dep.reserved_gpus)
    event(dep, reason="RevisionProposed", actor=user, message=f"Revision {rev.number}: {message} {note}".strip())
    approval = "not required" if not needs else "policy" if covered else "required"
    audit(
        actor=user,
        action=action,
        obj=dep,
        tenant=dep.tenant,
        changes={
            "revision": rev.number,
            "before": {k: serving.get(k) for k in changed} if serving else {},
            "after": {k: spec.get(k) for k in changed},
            "approval": approval,
        },
    )
    if serving is None:  # nothing approved yet: the row shows the request as it now stands
        if apply_spec(dep, spec):
            dep.generation += 1
        dep.save()
    if not needs or covered:
        reason = (
            policy_reason(dep.tenant)
            if needs
            else f"Needs no approval: within revision {dep.serving_revision.number}'s."
        )
        approve_locked(dep, rev, approver=Actor.POLICY, reason=reason)
        if keep:
            _rebase(pending, serving, spec, user=user)
    elif serving is not None:
        event(
            dep,
            reason="ApprovalRequired",
            actor=user,
            message=f"Revision {rev.number} needs a platform admin's approval; revision "
            f"{dep.serving_revision.number} keeps running meanwhile.",
        )
    return dep


@transaction.atomic
def deployment_create(*, tenant: Tenant, user, data: dict) -> ModelDeployment:
    """A member requests a deployment: revision 1, approved at once when the tenant policy covers it."""
    if actor_of(tenant, user) not in PERMISSIONS[Action.UPDATE].actors:
        raise Forbidden("Only members of the tenant may request deployments.")
    # Counted under the tenant's row lock: concurrent requests cannot both see room for one more.
    # NO KEY: rows that reference the tenant (audit, events) stay insertable meanwhile (no deadlock
    # with an approval that holds the quota rows).
    tenant = Tenant.objects.select_for_update(no_key=True).get(pk=tenant.pk)
    live = ModelDeployment.objects.filter(tenant=tenant).live().count()
    check_room(held=live, setting="MAX_DEPLOYMENTS_PER_TENANT", what=f"deployments in {tenant.slug}", field="tenant")
    check = check_draft(data, tenant=tenant)
    if check.errors:
        raise DraftInvalid(check.errors)
    if ModelDeployment.objects.filter(tenant=tenant, name=data["name"]).live().exists():
        raise name_taken(tenant, data["name"])
    fields = {k: data[k] for k in SPEC_FIELDS if k in data and data[k] is not None}
    # An empty served name (the form's blank field) is the deployment's name, as when it is left out.
    fields["served_model_name"] = data.get("served_model_name") or data["name"]
    _served_name_free(tenant, fields["served_model_name"])
    try:
        with transaction.atomic():  # a concurrent request for the same name loses here, cleanly
            dep = ModelDeployment.objects.create(tenant=tenant, name=data["name"], created_by=user, **fields)
    except IntegrityError:
        _served_name_free(tenant, fields["served_model_name"])  # the served name's constraint, or the name's
        raise name_taken(tenant, data["name"]) from None
    if len(dep.resource_name) > 47:
        raise DomainError("The name is too long for the cluster object.", field="name")
    dep.refresh_from_db()  # choice fields as stored (plain str), for the revision's spec
    spec = spec_of(dep)
    rev = _new_revision(dep, spec, user=user, message="Requested.")
    note = profile_note(spec_draft(spec), tenant=tenant)
    message = " ".join(m for m in (check.quota.message if check.quota else "", note) if m)
    event(dep, reason="Requested", actor=user, to_state=State.PENDING_APPROVAL, message=message)
    audit(
        actor=user,
        action="deployment.request",
        obj=dep,
        tenant=tenant,
        changes={"gpus": dep.gpus_needed, "flavor": dep.flavor.name, "revision": rev.number},
    )
    if policy_covers(tenant, dep.gpus_needed, check.quota.fit if check.quota else None, dep.priority_tier):
        approve_locked(dep, rev, approver=Actor.POLICY, reason=policy_reason(tenant))
    return dep


def _bound(dep: ModelDeployment, revision: int) -> DeploymentRevision:
    """The revision a decision names, which must still be the proposed one (409 otherwise)."""
    rev = dep.revisions.select_for_update().filter(number=revision).first()
    if rev is None:
        raise DomainError(f"Deployment {dep.name} has no revision {revision}.", field="revision", code="not_found")
    if rev.status != P.PROPOSED:
        pending = dep.revisions.filter(status=P.PROPOSED).values_list("number", flat=True).first()
        now = f" Revision {pending} is waiting now; review it." if pending else " Nothing is waiting."
        raise ConflictError(
            f"Revision {revision} is {rev.get_status_display().lower()}: it is no longer the change waiting for "
            f"a decision.{now}",
            field="revision",
            code="stale_revision",
        )
    return rev


@transaction.atomic
def deployment_approve(*, deployment_id: int, approver, revision: int, reason: str = "") -> ModelDeployment:
    """A platform admin approves the revision they reviewed: it becomes the serving revision."""
    dep = lock(deployment_id)
    authorized(dep, approver, Action.APPROVE)
    rev = _bound(dep, revision)
    approve_locked(dep, rev, approver=approver, reason=reason or "Approved by a platform admin.")
    return dep


@transaction.atomic
def deployment_reject(*, deployment_id: int, approver, revision: int, reason: str) -> ModelDeployment:
    """A platform admin rejects the revision they reviewed, with a reason the requester sees.
    A rejected first request is final; a rejected change leaves the serving revision running."""
    dep = lock(deployment_id)
    authorized(dep, approver, Action.REJECT)
    if not reason or not reason.strip():
        raise DomainError("Give a reason for the rejection.", field="reason")
    rev = _bound(dep, revision)
    _close(rev, P.REJECTED, by=approver, reason=reason.strip())
    if dep.state in REQUESTED:
        transition(
            dep, State.REJECTED, actor=approver, reason="Rejected", message=reason.strip(), type_=EventType.WARNING
        )
        dep.decision_reason = reason.strip()
        settle_gpus(dep)
        dep.save()
    else:
        event(
            dep,
            reason="ChangeRejected",
            actor=approver,
            type_=EventType.WARNING,
            message=f"Revision {rev.number}: {reason.strip()} Revision {dep.serving_revision.number} keeps running.",
        )
    audit(
        actor=approver,
        action="deployment.reject",
        obj=dep,
        tenant=dep.tenant,
        reason=reason.strip(),
        changes={"revision": rev.number},
    )
    return dep


@transaction.atomic
def deployment_cancel(*, deployment_id: int, user) -> ModelDeployment:
    """A member withdraws a request nothing of which was ever approved (the deployment ends)."""
    dep = lock(deployment_id)
    authorized(dep, user, Action.CANCEL)
    if (pending := _pending(dep)) is not None:
        _close(pending, P.WITHDRAWN, by=user, reason="Request cancelled.")
    transition(dep, State.CANCELLED, actor=user, reason="Cancelled")
    settle_gpus(dep)
    dep.save()
    enqueue_reconcile(dep)
    audit(actor=user, action="deployment.cancel", obj=dep, tenant=dep.tenant)
    return dep


@transaction.atomic
def deployment_withdraw(*, deployment_id: int, user, revision: int) -> ModelDeployment:
    """A member withdraws a proposed change; the serving revision runs on, untouched."""
    dep = lock(deployment_id)
    authorized(dep, user, Action.WITHDRAW)
    rev = _bound(dep, revision)
    authorized(dep, user, Action.WITHDRAW, rev.status)
    _close(rev, P.WITHDRAWN, by=user, reason="Withdrawn.")
    event(
        dep,
        reason="ChangeWithdrawn",
        actor=user,
        message=f"Revision {rev.number} withdrawn; revision {dep.serving_revision.number} keeps running.",
    )
    audit(actor=user, action="deployment.withdraw", obj=dep, tenant=dep.tenant, changes={"revision": rev.number})
    return dep


@transaction.atomic
def deployment_update(*, deployment_id: int, user, data: dict) -> ModelDeployment:
    """Propose a change: the fields in `data` over the waiting proposal (or the serving spec)."""
    dep = lock(deployment_id)
    authorized(dep, user, Action.UPDATE)
    if "backend" in data and data["backend"] != dep.backend:
        raise DomainError(
            "The backend is fixed when the deployment is created; request a new deployment to use another backend.",
            field="backend",
            code="immutable",
        )
    pending = _pending(dep)
    base = dict(pending.spec) if pending is not None else spec_of(dep)
    merged = base | spec_from_draft({k: v for k, v in data.items() if k in SPEC_FIELDS})
    changed = ", ".join(SPEC_LABELS[k] for k in _changed(base, merged)) or "nothing"
    return submit(dep, merged, user=user, action="deployment.update", message=f"Changed {changed}.")


@transaction.atomic
def deployment_scale(*, deployment_id: int, user, min_replicas: int, max_replicas: int) -> ModelDeployment:
    """Change the replica range of what serves. Within its approval it applies at once (a
    waiting proposal stays, rebased); more GPUs than approved need approval like any change."""
    dep = lock(deployment_id)
    authorized(dep, user, Action.SCALE)
    low, high = LIMITS["min_replicas"], LIMITS["max_replicas"]
    if min_replicas not in low or max_replicas not in high or min_replicas > max_replicas:
        raise DomainError(
            f"Replicas must satisfy {low.low} ≤ min ≤ max, {high.low} ≤ max ≤ {high.high}.", field="max_replicas"
        )
    if dep.state in REQUESTED and (pending := _pending(dep)) is not None:
        base = dict(pending.spec)
    else:
        base = spec_of(dep)
    spec = base | {"min_replicas": min_replicas, "max_replicas": max_replicas}
    message = f"Replicas {min_replicas}–{max_replicas}."
    return submit(dep, spec, user=user, action="deployment.scale", message=message, scale=dep.state not in REQUESTED)


@transaction.atomic
def deployment_rollback(*, deployment_id: int, user, revision: int) -> ModelDeployment:
    """Propose an earlier approved revision again, through the same approval and policy rules."""
    dep = lock(deployment_id)
    target = dep.revisions.filter(number=revision).first()
    if target is None:
        raise DomainError(f"Deployment {dep.name} has no revision {revision}.", field="revision", code="not_found")
    authorized(dep, user, Action.ROLLBACK, target.status)
    if target.pk == dep.serving_revision_id:
        raise ConflictError(f"Revision {revision} is the one serving.", field="revision", code="serving")
    return submit(
        dep,
        dict(target.spec),
        user=user,
        action="deployment.rollback",
        message=f"Roll back to revision {revision}.",
        rollback_of=revision,
    )
