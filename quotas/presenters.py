"""Quota bars for pages: reserved / nominal / borrowable per flavor."""

from __future__ import annotations

from quotas.models import GpuFlavor, Tenant
from quotas.temporary import active_temporary


def quota_rows(tenant: Tenant) -> list[dict]:
    rows = []
    # A temporary change in force per flavor: the bar says until when (and whether its end waits).
    temporary = {r.flavor_id: r for r in active_temporary(tenant_id=tenant.pk).order_by("ends_at")}
    for q in tenant.quotas.select_related("flavor").order_by("flavor__name"):
        ceiling = max(1, q.ceiling_gpus)
        within = min(q.reserved_gpus, q.nominal_gpus)
        borrowed = max(0, q.reserved_gpus - q.nominal_gpus)
        rows.append(
            {
                "quota": q,
                "flavor": q.flavor,
                "reserved": q.reserved_gpus,
                "nominal": q.nominal_gpus,
                "borrowing": q.borrowing_limit_gpus,
                "used_pct": round(100 * within / ceiling, 1),
                "borrow_pct": round(100 * borrowed / ceiling, 1),
                "nominal_pct": round(100 * q.nominal_gpus / ceiling, 1),
                "temporary": temporary.get(q.flavor_id),
            }
        )
    return rows


def current_quota_values(tenant: Tenant) -> dict[str, dict]:
    """The tenant's quota values per active flavor (by id, as the forms' flavor choices send it),
    for the quota forms to open on: a flavor without quota has none yet (nominal empty, no
    borrowing, lending all unused, as quota_set makes a new one)."""
    quotas = {q.flavor_id: q for q in tenant.quotas.all()}
    out = {}
    for flavor in GpuFlavor.objects.filter(active=True).order_by("name"):
        q = quotas.get(flavor.pk)
        out[str(flavor.pk)] = {
            "nominal_gpus": q.nominal_gpus if q else None,
            "borrowing_limit_gpus": q.borrowing_limit_gpus if q else 0,
            "lending_limit_gpus": q.lending_limit_gpus if q else None,
        }
    return out
