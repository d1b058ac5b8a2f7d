"""A tenant's request policy: which flavors it may use, how big one deployment may be, and what
the platform approves without a person (the auto-approve ceiling).

The one place these rules live. Deployments' request validation (deployments.validation) asks
`policy_errors` for every draft, so the API, the browser form, the live preview and spec updates
refuse the same things with the same messages; the deployment services ask `auto_approves`.
"""

from __future__ import annotations

from quotas.choices import Fit
from quotas.models import GpuFlavor, Tenant


def allowed_flavor_ids(tenant: Tenant) -> set[int] | None:
    """The flavors the tenant may request, or None when it may request every active flavor."""
    ids = {flavor.pk for flavor in tenant.allowed_flavors.all()}
    return ids or None


def policy_errors(*, tenant: Tenant, flavor: GpuFlavor | None, gpus: int) -> dict[str, str]:
    """Field errors for a draft needing `gpus` GPUs of `flavor` in `tenant` (empty: allowed)."""
    if tenant.archived:
        return {"tenant": f"Tenant {tenant.slug} is archived and takes no new requests or changes."}
    errors = {}
    allowed = allowed_flavor_ids(tenant)
    if flavor is not None and allowed is not None and flavor.pk not in allowed:
        names = ", ".join(sorted(f.name for f in tenant.allowed_flavors.all()))
        errors["flavor"] = f"{tenant.display_name} may use only these GPU flavors: {names}."
    limit = tenant.max_gpus_per_deployment
    if limit and gpus > limit:
        errors["max_replicas"] = (
            f"This deployment would reserve {gpus} GPUs (max replicas × TP × PP); "
            f"{tenant.display_name}'s policy allows at most {limit} per deployment."
        )
    return errors


def auto_approves(*, tenant: Tenant, gpus: int, fit: str | None) -> bool:
    """Whether the policy approves a request on its own: within nominal quota and at most the
    tenant's auto-approve ceiling (0 turns auto-approval off)."""
    limit = tenant.auto_approve_max_gpus
    return bool(limit) and not tenant.archived and fit == Fit.NOMINAL and gpus <= limit


def policy_summary(tenant: Tenant) -> dict:
    """The policy as plain values (audit entries, the API)."""
    return {
        "auto_approve_max_gpus": tenant.auto_approve_max_gpus,
        "max_gpus_per_deployment": tenant.max_gpus_per_deployment,
        "allowed_flavors": sorted(f.name for f in tenant.allowed_flavors.all()),
    }
