"""Temporary quota: a quota-change request may carry an end date (`ends_at`); once it is due, beat
reverts the quota to the values the change replaced and mirrors Kueue on commit.

* The end date is checked here, once: in the future when requested and still in the future when
  approved, at most MAX_AHEAD away.
* At approval the request's `previous` becomes the baseline it returns to: the quota's values
  just before it took effect. A new approved change for the same tenant and flavor ends an
  active temporary one (audited as superseded); a new temporary one keeps the older baseline, so
  stacking extensions returns to the values before the first.
* A revert never takes GPUs from running deployments: when the tenant's reservations exceed the
  baseline's ceiling (nominal + borrowing), it waits (`revert_waiting_since`), the tenant admins
  are told once, and every beat tries again until it fits. Nothing is stopped for it.
* If someone set the quota to other values meanwhile (quotas.services.quota_set), those stand:
  the temporary change is closed as superseded and nothing is reverted.

The actor of a revert is "policy" in the audit log.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from core.exceptions import ConflictError, DomainError
from core.models import audit
from quotas.ceiling import check_quota_values
from quotas.choices import QuotaChangeStatus
from quotas.models import QuotaChangeRequest, TenantQuota
from quotas.notify import notify_tenant_admins

POLICY = "policy"
MAX_AHEAD = timedelta(days=366)
FIELDS = ("nominal_gpus", "borrowing_limit_gpus", "lending_limit_gpus")


def check_ends_at(ends_at: datetime | None, *, now: datetime | None = None) -> None:
    """Refuse an end date in the past or more than a year ahead (field "ends_at")."""
    if ends_at is None:
        return
    now = now or timezone.now()
    if ends_at <= now:
        raise DomainError("The end date must be in the future.", field="ends_at")
    if ends_at > now + MAX_AHEAD:
        raise DomainError("The end date can be at most a year ahead.", field="ends_at")


def active_temporary(*, tenant_id: int, flavor_id: int | None = None):
    """Approved temporary changes of a tenant (one flavor's, if given) not reverted yet."""
    rows = QuotaChangeRequest.objects.filter(
        tenant_id=tenant_id, status=QuotaChangeStatus.APPROVED, ends_at__isnull=False, reverted_at__isnull=True
    )
    return rows if flavor_id is None else rows.filter(flavor_id=flavor_id)


def prepare_approval(request: QuotaChangeRequest, quota: TenantQuota, *, approver) -> None:
    """Called by quotas.services.quota_change_approve with the request and the quota row locked,
    before the new values are applied (the caller saves `request`)."""
    if request.ends_at is not None:
        try:
            check_ends_at(request.ends_at)
        except DomainError as error:
            raise DomainError(f"{error.message} Reject it; the team can ask again.", field="ends_at") from None
    now = timezone.now()
    baseline = {field: getattr(quota, field) for field in FIELDS}
    for older in (
        active_temporary(tenant_id=request.tenant_id, flavor_id=request.flavor_id)
        .select_for_update()
        .exclude(pk=request.pk)
    ):
        baseline = {field: older.previous.get(field, baseline[field]) for field in FIELDS}
        older.reverted_at = now
        older.save(update_fields=["reverted_at"])
        audit(
            actor=approver,
            action="quota_change.superseded",
            obj=older,
            tenant=request.tenant,
            reason=f"Quota change #{request.pk} was approved for the same flavor; this temporary change ends now.",
        )
    if request.ends_at is not None:
        request.previous = {**baseline, "reserved_gpus": quota.reserved_gpus}


def _values(request: QuotaChangeRequest) -> dict:
    return {field: getattr(request, field) for field in FIELDS}


def _baseline(request: QuotaChangeRequest) -> dict:
    return {
        "nominal_gpus": int(request.previous.get("nominal_gpus") or 0),
        "borrowing_limit_gpus": int(request.previous.get("borrowing_limit_gpus") or 0),
        "lending_limit_gpus": request.previous.get("lending_limit_gpus"),
    }


def _tell(request: QuotaChangeRequest, subject: str, body: str) -> None:
    tenant = request.tenant
    transaction.on_commit(lambda: notify_tenant_admins(tenant, subject=subject, body=body))


@transaction.atomic
def quota_change_revert(*, request_id: int, now: datetime | None = None) -> str:
    """Revert one due temporary change: "reverted", "waiting", "superseded" or "none" (not due,
    or already done: safe to call any number of times, concurrently too)."""
    now = now or timezone.now()
    found = QuotaChangeRequest.objects.filter(pk=request_id).values("tenant_id", "flavor_id").first()
    if found is None:
        return "none"
    # The quota row first, then the request: the order an approval takes them in (it locks the
    # quota before ending an older temporary change), so the two never deadlock.
    quota = TenantQuota.objects.select_for_update().filter(**found).first()
    request = (
        QuotaChangeRequest.objects.select_for_update(of=("self",)).select_related("tenant", "flavor").get(pk=request_id)
    )
    if quota is None or request.status != QuotaChangeStatus.APPROVED or request.reverted_at is not None:
        return "none"
    if request.ends_at is None or request.ends_at > now:
        return "none"
    current, baseline = {field: getattr(quota, field) for field in FIELDS}, _baseline(request)
    if current != _values(request) or request.tenant.archived:
        request.reverted_at, request.revert_waiting_since = now, None
        request.save(update_fields=["reverted_at", "revert_waiting_since"])
        audit(
            actor=POLICY,
            action="quota_change.superseded",
            obj=request,
            tenant=request.tenant,
            reason="The tenant was archived: it holds no quota."
            if request.tenant.archived
            else "The quota was set to other values while this temporary change ran; they stand.",
        )
        return "superseded"
    try:  # the one rule for new quota values (quotas.ceiling): never below what is held now
        check_quota_values(
            tenant=request.tenant,
            quota=quota,
            nominal=baseline["nominal_gpus"],
            borrowing=baseline["borrowing_limit_gpus"],
        )
    except ConflictError:
        return _wait(request, quota, baseline["nominal_gpus"] + baseline["borrowing_limit_gpus"], now)
    for field, value in baseline.items():
        setattr(quota, field, value)
    quota.save()
    waited = request.revert_waiting_since
    request.reverted_at, request.revert_waiting_since = now, None
    request.save(update_fields=["reverted_at", "revert_waiting_since"])
    audit(
        actor=POLICY,
        action="quota_change.revert",
        obj=request,
        tenant=request.tenant,
        reason=f"Temporary quota ended {request.ends_at:%Y-%m-%d %H:%M} UTC.",
        changes={"from": current, "to": baseline},
    )
    from quotas.services import schedule_kueue_sync

    schedule_kueue_sync(request.tenant_id)
    if waited is not None:
        _tell(
            request,
            f"temporary {request.flavor.name} quota reverted",
            f"The {request.flavor.name} quota is back to nominal {baseline['nominal_gpus']}, borrowing "
            f"{baseline['borrowing_limit_gpus']} now that the reservations fit.",
        )
    return "reverted"


def _wait(request: QuotaChangeRequest, quota: TenantQuota, ceiling: int, now: datetime) -> str:
    if request.revert_waiting_since is not None:
        return "waiting"  # told once already; the next beat tries again
    request.revert_waiting_since = now
    request.save(update_fields=["revert_waiting_since"])
    message = (
        f"The temporary {request.flavor.name} quota (nominal {request.nominal_gpus}, borrowing "
        f"{request.borrowing_limit_gpus}) ended {request.ends_at:%Y-%m-%d %H:%M} UTC, but the tenant's deployments "
        f"hold {quota.reserved_gpus} GPUs, more than the previous ceiling of {ceiling}. The revert waits until "
        "enough GPUs are released (stop or scale down deployments); no deployment is stopped for it."
    )
    audit(actor=POLICY, action="quota_change.revert_waiting", obj=request, tenant=request.tenant, reason=message)
    _tell(request, f"temporary {request.flavor.name} quota cannot end yet", message)
    return "waiting"


def revert_due(*, now: datetime | None = None) -> dict[str, int]:
    """Revert every due temporary change (the beat task); returns how each went."""
    now = now or timezone.now()
    due = QuotaChangeRequest.objects.filter(
        status=QuotaChangeStatus.APPROVED, ends_at__lte=now, reverted_at__isnull=True
    ).order_by("ends_at", "pk")
    counts = {"reverted": 0, "waiting": 0, "superseded": 0, "none": 0}
    for pk in due.values_list("pk", flat=True):
        counts[quota_change_revert(request_id=pk, now=now)] += 1
    return counts
