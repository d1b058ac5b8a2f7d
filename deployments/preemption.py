"""Preemption inside one tenant's queue (issue 35): which lower-tier deployments Kueue evicts so a
higher-tier one is admitted, counted by the portal before Kueue acts.

Every tenant ClusterQueue sets `withinClusterQueue` (runtime.preemption, a platform setting). With
LowerPriority (the default) or LowerOrNewerEqualPriority, Kueue admits a pending workload that fits
its ClusterQueue's *nominal* quota once admitted workloads of a strictly lower priority in the same
queue are evicted, taking the lowest priority first and, among equals, the most recently admitted
(kubernetes-sigs/kueue v0.19.2: pkg/scheduler/preemption/classical/hierarchical_preemption.go,
`collectSameQueueCandidates`; pkg/scheduler/preemption/preemption.go, `candidatesOrdering`). The
portal reserves GPUs before Kueue sees a workload (deployments.services.common.settle_gpus), so
without this the reservation check would refuse what Kueue would admit.

The rule, in one place:
* `victims(...)` are the fewest running deployments of the same tenant and flavor, in Kueue's
  order, whose GPUs make the request fit within the nominal quota (borrowing never counts: Kueue
  preempts only for a workload within nominal); none when the setting is Never, when the request
  has no tier above theirs, or when even all of them would not make room (equal priorities are
  never counted, so the portal never promises the newer-equal case it cannot order reliably).
* `displace(...)` gives a victim's GPUs to the request in the same transaction: the victim is
  marked `displaced` and holds nothing (`gpus_due` is 0), so the tenant never reserves more than
  its quota, not even for a moment. Its workload runs on until Kueue evicts it; the reconciler
  then sees it queued ("Preempted by a higher-priority workload in the same queue"), and when Kueue
  admits it again it takes a reservation again (`readmitted`), or says why it cannot.
"""

from __future__ import annotations

from django.conf import settings

from deployments.choices import EventType
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.states import HOLDS_GPUS
from quotas.choices import Fit
from quotas.models import GpuFlavor, Tenant
from quotas.services import quota_preview
from quotas.tier_models import PriorityTier

PREEMPTING = "Preempting"  # the victim's event: its GPUs went to a higher tier
PREEMPTS = "Preempts"  # the request's event: whose GPUs it takes
READMITTED_OVER = "ReadmittedOverQuota"  # Kueue admitted a displaced one the portal has no room for
NO_PREEMPTION = "Never"


def _values() -> dict[str, int]:
    return dict(PriorityTier.objects.values_list("name", "value"))


def priority(tier: str, values: dict[str, int] | None = None) -> int:
    """The Kueue priority of a deployment's tier: its class's value, 0 without one (Kueue's default
    for a workload without a priority class)."""
    return (values if values is not None else _values()).get(tier, 0) if tier else 0


def victims(
    *, tenant: Tenant, flavor: GpuFlavor, gpus: int, tier: str, exclude: int | None = None, credit_gpus: int = 0
) -> list[ModelDeployment]:
    """The deployments Kueue would evict to admit `gpus` of tier `tier` (see the module docstring);
    [] when none would or none need be. `credit_gpus`: what the requester holds already."""
    if settings.KUEUE_WITHIN_CLUSTER_QUEUE == NO_PREEMPTION or not tier or gpus <= 0:
        return []
    if quota_preview(tenant=tenant, flavor=flavor, gpus=gpus, credit_gpus=credit_gpus).fit != Fit.NO_FIT:
        return []  # it fits, within nominal or by borrowing: Kueue admits it without evicting anyone
    values = _values()
    mine = priority(tier, values)
    preview = quota_preview(tenant=tenant, flavor=flavor, gpus=0, credit_gpus=credit_gpus)
    free = preview.nominal - preview.reserved
    running = ModelDeployment.objects.filter(
        tenant=tenant, flavor=flavor, state__in=HOLDS_GPUS, reserved_gpus__gt=0, displaced=False
    ).exclude(pk=exclude)
    lower = [d for d in running if priority(d.priority_tier, values) < mine]
    lower.sort(key=lambda d: (priority(d.priority_tier, values), -d.pk))  # lowest first, newest first
    taken: list[ModelDeployment] = []
    for dep in lower:
        if free >= gpus:
            break
        taken.append(dep)
        free += dep.reserved_gpus
    return taken if free >= gpus else []


def words(taken: list[ModelDeployment]) -> str:
    names = ", ".join(f"{d.name} ({d.priority_tier or 'no tier'}, {d.reserved_gpus} GPUs)" for d in taken)
    return (
        f"Fits by preempting {names}: Kueue evicts the lower priority tier in the tenant's queue, which "
        "waits there until GPUs are free again."
    )


def displace(victim: ModelDeployment, *, by: ModelDeployment) -> int:
    """Give the locked `victim`'s GPUs to `by` (the caller reserves for `by` next, in the same
    transaction); returns the GPUs released."""
    from deployments.services.common import settle_gpus  # the one rule, which imports this module

    released = victim.reserved_gpus
    victim.displaced = True
    settle_gpus(victim, preempt=False)
    victim.save(update_fields=["displaced", "reserved_gpus", "updated"])
    DeploymentEvent.objects.create(
        deployment=victim,
        type=EventType.WARNING,
        reason=PREEMPTING,
        message=(
            f"{by.name} (tier {by.priority_tier}) needs GPUs of {by.tenant.slug}'s quota: its {released} GPU(s) "
            "went to it. Kueue evicts this workload (a lower priority tier in the same queue) and it waits "
            "in the queue until GPUs are free again; it keeps serving until then."
        ),
    )
    DeploymentEvent.objects.create(
        deployment=by,
        reason=PREEMPTS,
        message=f"Takes {released} GPU(s) of {victim.name} (tier {victim.priority_tier or 'none'}): Kueue evicts it.",
    )
    return released


def readmitted_without_room(dep: ModelDeployment, message: str) -> None:
    """Kueue admitted a displaced deployment again, but the portal's books have no room for it
    (a quota lowered meanwhile): say so once; it stays marked and holds nothing."""
    if not dep.events.filter(reason=READMITTED_OVER).exists():
        DeploymentEvent.objects.create(
            deployment=dep,
            type=EventType.WARNING,
            reason=READMITTED_OVER,
            message=f"Kueue admitted it again, but the tenant's quota has no room for it in the portal: {message}",
        )
