"""Quota accounting and quota-change decisions. Every write with an invariant lives here.

Invariant: for every TenantQuota, reserved_gpus == sum of its active reservations and
reserved_gpus <= nominal_gpus + borrowing_limit_gpus. What new reservations and new quota values
are measured against is quotas.ceiling (the one ceiling rule). Reservations take row locks on the
quota rows of the whole cohort for that flavor, always in primary-key order, so concurrent
reservations serialize without deadlocks (also enforced by a CHECK constraint).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.exceptions import ConflictError, DomainError, Forbidden, QuotaExceeded
from core.models import audit
from quotas.ceiling import Ceiling, check_quota_values, quota_ceilings
from quotas.choices import Fit, QuotaChangeStatus, Role
from quotas.models import (
    GpuFlavor,
    QuotaChangeRequest,
    QuotaReservation,
    Tenant,
    TenantQuota,
    is_platform_admin,
)
from quotas.temporary import check_ends_at, prepare_approval


@dataclass(frozen=True)
class QuotaPreview:
    """Whether a draft need fits, with the numbers behind the answer."""

    fit: str  # Fit value
    gpus: int
    nominal: int
    borrowing_limit: int
    reserved: int
    free_nominal: int
    borrowable: int  # what could be borrowed now (limit and cohort capacity both apply)
    message: str
    has_quota: bool = True  # False: no quota at all for the flavor (no row, or a ceiling of 0)

    def as_dict(self) -> dict:
        return asdict(self)


def _cohort_lendable(quota: TenantQuota, peers: list[TenantQuota], ceilings: dict[int, Ceiling]) -> int:
    """GPUs the cohort's other queues leave unused and may lend (Kueue lendingLimit applies)."""
    total = 0
    for peer in peers:
        if peer.pk == quota.pk:
            continue
        unused = max(0, ceilings[peer.pk].nominal - peer.reserved_gpus)
        if peer.lending_limit_gpus is not None:
            unused = min(unused, peer.lending_limit_gpus)
        total += unused
    return total


def _peers(quota: TenantQuota, *, lock: bool) -> list[TenantQuota]:
    qs = TenantQuota.objects.filter(flavor_id=quota.flavor_id).select_related("tenant").order_by("pk")
    if lock:
        qs = qs.select_for_update(of=("self",))
    cohort = quota.tenant.effective_cohort
    return [q for q in qs if q.tenant.effective_cohort == cohort]


def no_quota_message(tenant: Tenant, flavor: GpuFlavor, why: str = "") -> str:
    """What the preview, the request form and the approvals page say about a flavor without quota."""
    because = f" ({why[0].upper()}{why[1:]}.)" if why else ""
    return f"{tenant.display_name} has no quota for {flavor}.{because} A tenant admin can request quota for it."


def flavors_with_quota(tenant: Tenant) -> set[int]:
    """The flavors (ids) on which `tenant` may reserve GPUs at all: a quota row whose ceiling
    (quotas.ceiling) is above 0. The one lookup behind the request form's "no quota" marks; the
    preview below answers the same for one flavor (`has_quota`)."""
    quotas = list(TenantQuota.objects.filter(tenant=tenant).select_related("tenant"))
    ceilings = quota_ceilings(quotas)
    return {q.flavor_id for q in quotas if not ceilings[q.pk].empty}


def _evaluate(
    quota: TenantQuota | None, peers: list[TenantQuota], gpus: int, *, tenant: Tenant, flavor: GpuFlavor
) -> QuotaPreview:
    """Whether `gpus` more fit under the quota's ceiling (quotas.ceiling) and the cohort's lending."""
    if quota is None:
        return QuotaPreview(Fit.NO_FIT, gpus, 0, 0, 0, 0, 0, no_quota_message(tenant, flavor), has_quota=False)
    ceilings = quota_ceilings(peers if quota in peers else [quota, *peers])
    ceiling = ceilings[quota.pk]
    if ceiling.empty and gpus > 0:  # (asking about 0 GPUs, e.g. for the free count, fits anywhere)
        message = no_quota_message(tenant, flavor, ceiling.why)
        return QuotaPreview(Fit.NO_FIT, gpus, 0, 0, quota.reserved_gpus, 0, 0, message, has_quota=False)
    free_nominal = max(0, ceiling.nominal - quota.reserved_gpus)
    used_borrow = max(0, quota.reserved_gpus - ceiling.nominal)
    borrowable = min(max(0, ceiling.borrowing - used_borrow), _cohort_lendable(quota, peers, ceilings))
    numbers = dict(
        gpus=gpus,
        nominal=ceiling.nominal,
        borrowing_limit=ceiling.borrowing,
        reserved=quota.reserved_gpus,
        free_nominal=free_nominal,
        borrowable=borrowable,
    )
    if gpus <= free_nominal:
        return QuotaPreview(
            Fit.NOMINAL,
            message=(
                f"Fits within nominal quota: {gpus} of {free_nominal} free GPUs "
                f"({quota.reserved_gpus}/{ceiling.nominal} reserved)."
            ),
            **numbers,
        )
    if gpus <= free_nominal + borrowable:
        borrowed = gpus - free_nominal
        return QuotaPreview(
            Fit.BORROWING,
            message=(
                f"Fits by borrowing {borrowed} GPU(s) from the cohort; borrowed capacity can be "
                f"reclaimed (preempted) when its owner needs it."
            ),
            **numbers,
        )
    why = f" ({ceiling.why[0].upper()}{ceiling.why[1:]}.)" if ceiling.why else ""
    return QuotaPreview(
        Fit.NO_FIT,
        message=(
            f"Does not fit: needs {gpus} GPUs, {free_nominal} free within nominal quota and "
            f"{borrowable} borrowable ({quota.reserved_gpus}/{ceiling.nominal} reserved, "
            f"borrowing limit {ceiling.borrowing}).{why}"
        ),
        **numbers,
    )


def quota_preview(*, tenant: Tenant, flavor: GpuFlavor, gpus: int, credit_gpus: int = 0) -> QuotaPreview:
    """Answer, without locking, whether `gpus` more fit: nominal / borrowing / no fit.

    `credit_gpus` are GPUs the caller already holds and would give back (a resize).
    """
    quota = TenantQuota.objects.select_related("tenant").filter(tenant=tenant, flavor=flavor).first()
    if quota is None:
        return _evaluate(None, [], gpus, tenant=tenant, flavor=flavor)
    quota.reserved_gpus = max(0, quota.reserved_gpus - credit_gpus)
    return _evaluate(quota, _peers(quota, lock=False), gpus, tenant=tenant, flavor=flavor)


@transaction.atomic
def quota_reserve(*, tenant: Tenant, flavor: GpuFlavor, gpus: int, owner_type: str, owner_id: int) -> QuotaReservation:
    """Reserve GPUs for an owner, or raise QuotaExceeded. Idempotent per owner.

    An owner that already holds a reservation has it resized (released and re-taken in the same
    transaction), so a spec update never holds old and new GPUs at once.
    """
    if gpus < 0:
        raise DomainError("GPUs must not be negative.", field="gpus")
    anchor = TenantQuota.objects.select_related("tenant").filter(tenant=tenant, flavor=flavor).first()
    if anchor is None:
        raise QuotaExceeded(no_quota_message(tenant, flavor), field="flavor")
    peers = _peers(anchor, lock=True)  # locks every quota row this decision reads, in pk order
    quota = next(q for q in peers if q.pk == anchor.pk)
    current = (
        QuotaReservation.objects.select_for_update()
        .filter(owner_type=owner_type, owner_id=owner_id, released__isnull=True)
        .first()
    )
    if current is not None and current.quota_id == quota.pk and current.gpus == gpus:
        return current
    # Shrinking on the same quota always succeeds, even above a lowered ceiling (quotas.ceiling).
    shrinking = current is not None and current.quota_id == quota.pk and gpus <= current.gpus
    if current is not None:
        _release_locked(current, quota if current.quota_id == quota.pk else None)
    preview = _evaluate(quota, peers, gpus, tenant=tenant, flavor=flavor)
    if preview.fit == Fit.NO_FIT and not shrinking:
        raise QuotaExceeded(preview.message, field="max_replicas" if preview.has_quota else "flavor")
    borrowed = max(0, quota.reserved_gpus + gpus - preview.nominal) - max(0, quota.reserved_gpus - preview.nominal)
    quota.reserved_gpus += gpus
    quota.save(update_fields=["reserved_gpus", "updated"])
    return QuotaReservation.objects.create(
        quota=quota, owner_type=owner_type, owner_id=owner_id, gpus=gpus, borrowed_gpus=borrowed
    )


def _release_locked(reservation: QuotaReservation, quota: TenantQuota | None) -> None:
    if quota is None:
        quota = TenantQuota.objects.select_for_update().get(pk=reservation.quota_id)
    quota.reserved_gpus = max(0, quota.reserved_gpus - reservation.gpus)
    quota.save(update_fields=["reserved_gpus", "updated"])
    reservation.released = timezone.now()
    reservation.save(update_fields=["released"])


@transaction.atomic
def quota_release(*, owner_type: str, owner_id: int) -> bool:
    """Release the owner's active reservation. True if released now, False if nothing was held."""
    reservation = (
        QuotaReservation.objects.select_for_update()
        .filter(owner_type=owner_type, owner_id=owner_id, released__isnull=True)
        .first()
    )
    if reservation is None:
        return False
    _release_locked(reservation, None)
    return True


def schedule_kueue_sync(tenant_id: int | None) -> None:
    """Mirror one tenant (None: every tenant, e.g. after a flavor change) to Kueue on commit."""
    from quotas.tasks import sync_kueue_task

    # robust: the quota change is committed; the periodic Kueue sync repairs a lost enqueue.
    transaction.on_commit(lambda: sync_kueue_task.delay(tenant_id), robust=True)


class _Keep:
    """A quota value the caller left out: the quota keeps the one it has."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()
QUOTA_VALUES = ("nominal_gpus", "borrowing_limit_gpus", "lending_limit_gpus")
NEW_QUOTA = {"borrowing_limit_gpus": 0, "lending_limit_gpus": None}  # a new quota's values left out


@transaction.atomic
def quota_change_request_create(
    *,
    tenant: Tenant,
    flavor: GpuFlavor,
    user,
    nominal_gpus: int,
    borrowing_limit_gpus: int = KEEP,
    lending_limit_gpus: int | None = KEEP,
    justification: str,
    ends_at=None,
) -> QuotaChangeRequest:
    """A tenant admin asks for new quota values for one flavor; with `ends_at`, only until then
    (quotas.temporary reverts it). As in `quota_set`, a limit left out (KEEP, the default for
    callers that omit it) keeps the quota's current value: asking for more nominal GPUs never
    asks for the borrowing limit to go to 0."""
    if not tenant.has_role(user, Role.TENANT_ADMIN):
        raise Forbidden("Only tenant admins can request quota changes.")
    current = TenantQuota.objects.filter(tenant=tenant, flavor=flavor).first()
    kept = {name: getattr(current, name) for name in QUOTA_VALUES} if current else NEW_QUOTA
    if borrowing_limit_gpus is KEEP:
        borrowing_limit_gpus = kept["borrowing_limit_gpus"]
    if lending_limit_gpus is KEEP:
        lending_limit_gpus = kept["lending_limit_gpus"]
    check_quota_values(tenant=tenant, quota=None, nominal=nominal_gpus, borrowing=borrowing_limit_gpus)
    check_ends_at(ends_at)
    if not justification or not justification.strip():
        raise DomainError("Say why the team needs this quota.", field="justification")
    if lending_limit_gpus is not None and lending_limit_gpus > nominal_gpus:
        raise DomainError("Cannot lend more than the nominal quota.", field="lending_limit_gpus")
    if QuotaChangeRequest.objects.filter(tenant=tenant, flavor=flavor, status=QuotaChangeStatus.PENDING).exists():
        raise ConflictError("A request for this flavor is already pending; wait for its decision.", field="flavor")
    previous = {**kept, "reserved_gpus": current.reserved_gpus} if current else {}
    request = QuotaChangeRequest.objects.create(
        tenant=tenant,
        flavor=flavor,
        requested_by=user,
        nominal_gpus=nominal_gpus,
        borrowing_limit_gpus=borrowing_limit_gpus,
        lending_limit_gpus=lending_limit_gpus,
        justification=justification.strip(),
        previous=previous,
        ends_at=ends_at,
    )
    audit(
        actor=user,
        action="quota_change.request",
        obj=request,
        tenant=tenant,
        reason=request.justification,
        changes={
            "from": previous,
            "to": {
                "nominal_gpus": nominal_gpus,
                "borrowing_limit_gpus": borrowing_limit_gpus,
                "lending_limit_gpus": lending_limit_gpus,
                **({"ends_at": ends_at.isoformat()} if ends_at else {}),
            },
        },
    )
    return request


def _lock_tenant(tenant: Tenant) -> Tenant:
    """The tenant row, locked and read afresh: new quota values serialize with archiving (which
    locks the tenant, then its quotas), so none lands on a tenant archived meanwhile.

    FOR NO KEY UPDATE, not FOR UPDATE: a reservation holding the quota rows inserts audit and
    event rows that reference the tenant (FOR KEY SHARE on it), which FOR UPDATE would block while
    this transaction waits for those quota rows: a deadlock."""
    return Tenant.objects.select_for_update(no_key=True).get(pk=tenant.pk)


def _decide(request_id: int, approver) -> QuotaChangeRequest:
    if not is_platform_admin(approver):
        raise Forbidden("Only platform admins decide quota changes.")
    request = (
        QuotaChangeRequest.objects.select_for_update(of=("self",)).select_related("tenant", "flavor").get(pk=request_id)
    )
    if request.status != QuotaChangeStatus.PENDING:
        raise ConflictError(f"This request was already {request.status}.")
    return request


@transaction.atomic
def quota_change_approve(*, request_id: int, approver, comment: str = "") -> QuotaChangeRequest:
    """Apply the requested values, audit, and sync Kueue after commit.

    A decrease below what is reserved right now is refused (the request stays pending) rather
    than queued: the admin sees the numbers and can reject, or approve once deployments stop.
    """
    request = _decide(request_id, approver)
    request.tenant = _lock_tenant(request.tenant)
    quota, _ = TenantQuota.objects.get_or_create(tenant=request.tenant, flavor=request.flavor)
    quota = TenantQuota.objects.select_for_update().get(pk=quota.pk)
    # The request stays pending on a refusal: the admin can reject, or approve once deployments stop.
    check_quota_values(
        tenant=request.tenant, quota=quota, nominal=request.nominal_gpus, borrowing=request.borrowing_limit_gpus
    )
    prepare_approval(request, quota, approver=approver)  # end date still ahead; ends an older temporary change
    before = {
        "nominal_gpus": quota.nominal_gpus,
        "borrowing_limit_gpus": quota.borrowing_limit_gpus,
        "lending_limit_gpus": quota.lending_limit_gpus,
    }
    quota.nominal_gpus = request.nominal_gpus
    quota.borrowing_limit_gpus = request.borrowing_limit_gpus
    quota.lending_limit_gpus = request.lending_limit_gpus
    quota.save()
    request.status = QuotaChangeStatus.APPROVED
    request.decided_by, request.decided_at, request.decision_comment = approver, timezone.now(), comment
    request.save()
    after = {k: getattr(quota, k) for k in before}
    audit(
        actor=approver,
        action="quota_change.approve",
        obj=request,
        tenant=request.tenant,
        reason=comment,
        changes={"from": before, "to": after},
    )
    schedule_kueue_sync(request.tenant_id)
    return request


@transaction.atomic
def quota_change_reject(*, request_id: int, approver, comment: str) -> QuotaChangeRequest:
    """Reject with a required reason the tenant admin will see."""
    if not comment or not comment.strip():
        raise DomainError("Give a reason for the rejection.", field="comment")
    request = _decide(request_id, approver)
    request.status = QuotaChangeStatus.REJECTED
    request.decided_by, request.decided_at = approver, timezone.now()
    request.decision_comment = comment.strip()
    request.save()
    audit(
        actor=approver,
        action="quota_change.reject",
        obj=request,
        tenant=request.tenant,
        reason=request.decision_comment,
    )
    return request


@transaction.atomic
def quota_set(
    *,
    tenant: Tenant,
    flavor: GpuFlavor,
    actor,
    nominal_gpus: int = KEEP,
    borrowing_limit_gpus: int = KEEP,
    lending_limit_gpus: int | None = KEEP,
    reason: str = "",
) -> TenantQuota:
    """Platform admin sets a quota directly (same guard as an approval). A value left out keeps
    the quota's current one, so a new nominal alone never resets the borrowing limit; a new quota
    needs its nominal and starts with no borrowing, lending all unused quota."""
    if not is_platform_admin(actor):
        raise Forbidden("Only platform admins set quotas.")
    tenant = _lock_tenant(tenant)  # serialises quota_set per tenant, so the row below cannot appear meanwhile
    quota = TenantQuota.objects.select_for_update().filter(tenant=tenant, flavor=flavor).first()
    given = dict(zip(QUOTA_VALUES, (nominal_gpus, borrowing_limit_gpus, lending_limit_gpus), strict=True))
    if quota is None and given["nominal_gpus"] is KEEP:
        raise DomainError("A new quota needs its nominal GPUs.", field="nominal_gpus")
    current = {name: getattr(quota, name) for name in QUOTA_VALUES} if quota else NEW_QUOTA
    values = {name: current[name] if value is KEEP else value for name, value in given.items()}
    check_quota_values(
        tenant=tenant, quota=quota, nominal=values["nominal_gpus"], borrowing=values["borrowing_limit_gpus"]
    )
    if values["lending_limit_gpus"] is not None and values["lending_limit_gpus"] > values["nominal_gpus"]:
        raise DomainError("Cannot lend more than the nominal quota.", field="lending_limit_gpus")
    quota = quota or TenantQuota.objects.create(tenant=tenant, flavor=flavor)
    before = {name: getattr(quota, name) for name in QUOTA_VALUES}
    for name, value in values.items():
        setattr(quota, name, value)
    quota.save()
    audit(
        actor=actor,
        action="quota.set",
        obj=quota,
        tenant=tenant,
        reason=reason,
        changes={"from": before, "to": values},
    )
    schedule_kueue_sync(tenant.pk)
    return quota
