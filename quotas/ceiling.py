"""The one ceiling rule for quota: how many GPUs of a flavor a tenant may hold, and which new quota
values may be set.

Every path that compares a reservation or a quota value with a ceiling asks here: the preview
and the reservation (quotas.services, so deployment requests, their validation, approvals,
starts, scale-ups and the tenant policy's auto-approval, which reads the preview's fit), quota-
change requests and their approval, and `quota_set` (the API, the platform pages and the admin).

* The ceiling is nominal + borrowing. Kueue enforces the same numbers on the cluster.
* An archived tenant's ceiling is 0, and it takes no new quota values.
* A temporary change whose end date has passed no longer counts for new reservations, even while
  its revert waits for reservations to drain (quotas.temporary): new reservations count against
  the values it replaced. What is already held is left alone, and shrinking always succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from core.exceptions import ConflictError, DomainError
from quotas.choices import QuotaChangeStatus
from quotas.models import QuotaChangeRequest, Tenant, TenantQuota

ARCHIVED = "archived"
BELOW_RESERVED = "below_reserved"


@dataclass(frozen=True)
class Ceiling:
    """What new reservations on one quota row may reach, and why it is below the stored values."""

    nominal: int
    borrowing: int
    why: str = ""  # empty: the quota row's own values

    @property
    def gpus(self) -> int:
        return self.nominal + self.borrowing

    @property
    def empty(self) -> bool:
        """Not one GPU may be reserved: what the pages and the API call "no quota" for a flavor."""
        return self.gpus == 0


def archived_error(tenant: Tenant) -> DomainError:
    """The one answer (400 on `tenant`, code "archived") to anything that would give an archived
    tenant quota or GPUs."""
    return DomainError(
        f"Tenant {tenant.slug} is archived and takes no new requests or changes.", field="tenant", code=ARCHIVED
    )


def quota_ceiling(quota: TenantQuota, *, now: datetime | None = None) -> Ceiling:
    """The ceiling new reservations on `quota` count against (see the module docstring)."""
    return quota_ceilings([quota], now=now)[quota.pk]


def quota_ceilings(quotas: list[TenantQuota], *, now: datetime | None = None) -> dict[int, Ceiling]:
    """`quota_ceiling` for several quota rows of one flavor (a cohort), in one query."""
    ended = {}
    for request in (
        QuotaChangeRequest.objects.filter(
            flavor_id__in={q.flavor_id for q in quotas},
            tenant_id__in={q.tenant_id for q in quotas},
            status=QuotaChangeStatus.APPROVED,
            ends_at__lte=now or timezone.now(),
            reverted_at__isnull=True,
        )
        .order_by("ends_at", "pk")
        .only("tenant_id", "flavor_id", "nominal_gpus", "borrowing_limit_gpus", "previous", "ends_at")
    ):
        ended[(request.tenant_id, request.flavor_id)] = request  # the latest to end wins
    return {q.pk: _ceiling(q, ended.get((q.tenant_id, q.flavor_id))) for q in quotas}


def _ceiling(quota: TenantQuota, ended: QuotaChangeRequest | None) -> Ceiling:
    if quota.tenant.archived:
        return Ceiling(0, 0, why=f"tenant {quota.tenant.slug} is archived")
    # A quota_set since the change replaced its values: those stand (the revert closes the
    # temporary change as superseded).
    if ended is not None and (quota.nominal_gpus, quota.borrowing_limit_gpus) == (
        ended.nominal_gpus,
        ended.borrowing_limit_gpus,
    ):
        # The values it replaced, never above what the quota row (and Kueue) holds until the revert.
        base_nominal = int(ended.previous.get("nominal_gpus") or 0)
        base_total = base_nominal + int(ended.previous.get("borrowing_limit_gpus") or 0)
        nominal = min(quota.nominal_gpus, base_nominal)
        borrowing = min(quota.ceiling_gpus, base_total) - nominal
        if (nominal, borrowing) != (quota.nominal_gpus, quota.borrowing_limit_gpus):
            why = (
                f"the temporary quota ended {ended.ends_at:%Y-%m-%d %H:%M} UTC, so new reservations count "
                f"against nominal {nominal}, borrowing {borrowing}"
            )
            return Ceiling(nominal, borrowing, why=why)
    return Ceiling(quota.nominal_gpus, quota.borrowing_limit_gpus)


def check_quota_values(*, tenant: Tenant, quota: TenantQuota | None, nominal: int, borrowing: int) -> None:
    """Refuse new quota values: any for an archived tenant (400, "archived"), and a ceiling below
    what `quota` (locked by the caller) holds now (409, "below_reserved"). `quota` None: a request
    only asks, so only the tenant is checked."""
    if tenant.archived:
        raise archived_error(tenant)
    if quota is not None and quota.reserved_gpus > nominal + borrowing:
        raise ConflictError(
            f"{quota.reserved_gpus} GPUs are reserved by running deployments, more than the new nominal + "
            f"borrowing ({nominal + borrowing}). Stop or scale down deployments first.",
            field="nominal_gpus",
            code=BELOW_RESERVED,
        )
