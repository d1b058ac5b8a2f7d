"""What every deployment service shares: the row lock, events, transitions, the revision spec
helpers and the one GPU rule (`settle_gpus`). Nothing here talks to a cluster."""

from __future__ import annotations

from django.db import transaction

from core.exceptions import ConflictError, DomainError
from deployments.choices import EventType, State
from deployments.models import SPEC_FIELDS, DeploymentEvent, ModelDeployment
from deployments.states import HOLDS_GPUS, Action, Actor, actor_of, authorize, check_transition
from quotas.models import GpuFlavor, Tenant
from quotas.policy import auto_approves, budget_block_reason
from quotas.services import quota_release, quota_reserve

OWNER = "deployment"
POLICY = "policy"  # the audit log's actor for what the tenant's policy does


class DraftInvalid(DomainError):
    """A draft failed validation; `errors` maps fields to their messages (deployments.validation)."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors

    def as_dict(self) -> dict:
        return {field: list(messages) for field, messages in self.errors.items()}


def lock(deployment_id: int) -> ModelDeployment:
    return (
        ModelDeployment.objects.select_for_update(of=("self",)).select_related("tenant", "flavor").get(pk=deployment_id)
    )


def authorized(dep: ModelDeployment, user, action: Action, revision: str | None = None) -> None:
    """Check the (role, state, action) table for this user on this locked deployment."""
    actor = Actor.POLICY if user == Actor.POLICY else actor_of(dep.tenant, user)
    authorize(actor, dep.state, action, revision)


def enqueue_reconcile(dep: ModelDeployment) -> None:
    from deployments.tasks import reconcile_deployment_task

    # robust: the decision is committed by then. If the broker is down the publish fails, and the
    # beat sweep re-enqueues the deployment later; the caller must not get a 500 for a done change.
    transaction.on_commit(lambda: reconcile_deployment_task.delay(dep.pk), robust=True)


def event(
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
    event(dep, reason=reason, message=message, actor=actor, from_state=dep.state, to_state=target, type_=type_)
    dep.state = target


# --- the one GPU rule -----------------------------------------------------------------------------


def gpus_due(dep: ModelDeployment) -> int:
    """GPUs the deployment must hold now: the running revision's (max replicas × TP × PP) while
    its state is one that holds GPUs (states.HOLDS_GPUS, the running ones) and no higher tier took
    them (`displaced`, deployments.preemption), none otherwise."""
    return dep.gpus_needed if dep.state in HOLDS_GPUS and not dep.displaced else 0


def budget_allows(dep: ModelDeployment) -> None:
    """Refuse (409) to reserve GPUs for a tenant its budget's hard stop has stopped (quotas.policy)."""
    if reason := budget_block_reason(dep.tenant):
        raise ConflictError(reason, field="tenant", code="budget_stopped")


def settle_gpus(dep: ModelDeployment, *, preempt: bool = True) -> int:
    """Make the reservation equal `gpus_due(dep)`, in the caller's transaction; the caller saves.

    The one place GPUs are reserved and released, for every caller (a person, the policy, an
    approval, the reconciler observing a failure, a deletion, an archive): the reservation
    follows the state and the running revision in the same transaction that changes them. A
    workload being removed may still run for a few seconds; Kueue enforces the same numbers on
    the cluster, so whatever is admitted against the freed GPUs waits in its queue until the old
    Workload is gone. Growing needs the quota (QuotaExceeded rolls the whole change back) and a
    budget that is not stopped; shrinking and releasing always succeed. Returns the GPUs now held.

    Where the quota is short, the GPUs of lower priority tiers of the same tenant and flavor that
    Kueue would evict count as free (`preempt`, deployments.preemption): they are released first,
    in this transaction, so the tenant never holds more than its quota.
    """
    if dep.state not in HOLDS_GPUS:
        dep.displaced = False  # stopped, failed or gone: a start reserves again as any start does
    due = gpus_due(dep)
    if due == 0:
        quota_release(owner_type=OWNER, owner_id=dep.pk)
    else:
        if due > dep.reserved_gpus:
            budget_allows(dep)
            if preempt:
                _preempt_for(dep, due)
        quota_reserve(tenant=dep.tenant, flavor=dep.flavor, gpus=due, owner_type=OWNER, owner_id=dep.pk)
    dep.reserved_gpus = due
    return due


def _preempt_for(dep: ModelDeployment, due: int) -> None:
    """Where the quota is short, release the GPUs of the lower tiers Kueue would evict for `dep`
    (deployments.preemption), before the reservation: rows are locked deployment first, quota
    rows last, as every stop does, so two transactions never wait on each other. What the locked
    rows say wins: a victim another request displaced meanwhile gives nothing, and the reservation
    that follows refuses (the whole change rolls back) if that leaves too little."""
    from deployments import preemption

    found = preemption.victims(
        tenant=dep.tenant, flavor=dep.flavor, gpus=due, tier=dep.priority_tier, exclude=dep.pk,
        credit_gpus=dep.reserved_gpus,
    )  # fmt: skip
    for victim in sorted(found, key=lambda d: d.pk):  # row locks in pk order
        locked = lock(victim.pk)
        if locked.reserved_gpus and not locked.displaced and locked.state in HOLDS_GPUS:
            preemption.displace(locked, by=dep)


# --- revision specs -------------------------------------------------------------------------------


def spec_of(dep: ModelDeployment) -> dict:
    """The row's spec as a revision stores it (JSON: the flavor as its primary key)."""
    spec = {k: getattr(dep, k) for k in SPEC_FIELDS if k != "flavor"}
    spec = {k: str(v) if hasattr(v, "label") else v for k, v in spec.items()}  # TextChoices → str
    return spec | {"flavor": dep.flavor_id}


def spec_draft(spec: dict) -> dict:
    """A stored spec as the validation reads a draft (the flavor as its row, or None if gone)."""
    return spec | {"flavor": GpuFlavor.objects.filter(pk=spec.get("flavor")).first()}


def spec_from_draft(data: dict) -> dict:
    """A validated draft (the flavor as its row) as a revision stores it: only the fields the
    draft has (a PATCH without a flavor must not clear the flavor it is merged over)."""
    out = {k: data[k] for k in SPEC_FIELDS if k in data and k != "flavor"}
    out = {k: str(v) if hasattr(v, "label") else v for k, v in out.items()}
    if "flavor" in data:
        out["flavor"] = getattr(data["flavor"], "pk", data["flavor"])
    return out


def apply_spec(dep: ModelDeployment, spec: dict) -> list[str]:
    """Write a revision's spec onto the locked row (the caller saves); the changed field names."""
    changed = []
    for key in SPEC_FIELDS:
        if key not in spec:
            continue
        attr = "flavor_id" if key == "flavor" else key
        if getattr(dep, attr) != spec[key]:
            setattr(dep, attr, spec[key])
            changed.append(key)
    if "flavor" in changed:
        dep.flavor = GpuFlavor.objects.get(pk=spec["flavor"])
    return changed


def spec_gpus(spec: dict) -> int:
    """GPUs a spec reserves: max replicas × TP × PP (the same product as ModelDeployment.gpus_needed)."""
    return (
        int(spec.get("max_replicas") or 1)
        * int(spec.get("tensor_parallel_size") or 1)
        * int(spec.get("pipeline_parallel_size") or 1)
    )


def policy_covers(tenant: Tenant, gpus: int, fit: str | None, tier: str = "") -> bool:
    """The tenant's auto-approve policy: within nominal quota, at most its GPU ceiling, and no
    priority tier or one it auto-approves."""
    return auto_approves(tenant=tenant, gpus=gpus, fit=fit, tier=tier)


def policy_reason(tenant: Tenant) -> str:
    return f"Auto-approved by tenant policy (within nominal quota and ≤ {tenant.auto_approve_max_gpus} GPUs)."


def served_name_holder(tenant: Tenant, served: str, *, exclude: int | None = None) -> ModelDeployment | None:
    """The tenant's other deployment (not deleted) that serves `served` as its model name: the
    tenant endpoint routes by that name (issue 34), so it is unique per tenant, as the database's
    `unique_served_name_per_tenant` says."""
    others = ModelDeployment.objects.filter(tenant=tenant, served_model_name=served).exclude(state=State.DELETED)
    return others.exclude(pk=exclude).first() if exclude else others.first()


def served_name_taken(tenant: Tenant, served: str, holder: ModelDeployment) -> DomainError:
    return DomainError(
        f"{holder.name} already serves the model name {served!r} in {tenant.slug}: clients pick a model by this "
        "name on the tenant's endpoint, so choose another.",
        field="served_model_name",
        code="unique",
    )


def name_taken(tenant: Tenant, name: str) -> DomainError:
    return DomainError(
        f"A deployment named {name!r} already exists in {tenant.slug}; delete it or choose another name.",
        field="name",
        code="unique",
    )
