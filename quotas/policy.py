"""A tenant's request policy: which flavors it may use, how big one deployment may be, and what
the platform approves without a person (the auto-approve ceiling).

The one place these rules live. Deployments' request validation (deployments.validation) asks
`policy_errors` for every draft, so the API, the browser form, the live preview and spec updates
refuse the same things with the same messages; the deployment services ask `auto_approves`.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from quotas.ceiling import archived_error
from quotas.choices import Fit
from quotas.models import GpuFlavor, Tenant


def allowed_flavor_ids(tenant: Tenant) -> set[int] | None:
    """The flavors the tenant may request, or None when it may request every active flavor."""
    ids = {flavor.pk for flavor in tenant.allowed_flavors.all()}
    return ids or None


def policy_errors(*, tenant: Tenant, flavor: GpuFlavor | None, gpus: int) -> dict[str, str]:
    """Field errors for a draft needing `gpus` GPUs of `flavor` in `tenant` (empty: allowed)."""
    if tenant.archived:
        error = archived_error(tenant)
        return {error.field: error.message}
    if reason := budget_block_reason(tenant):
        return {"tenant": reason}
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


def budget_block_reason(tenant: Tenant, *, now: datetime | None = None) -> str:
    """Why the tenant's budget refuses to reserve GPUs now ("" when it does not).

    The budget sweep (usage.budgets) sets `budget_stopped_at` when a tenant with the hard stop on
    reaches 100 % of its monthly budget. The stop holds for that calendar month while the hard
    stop and a budget are set; a raised budget clears it at the next sweep.
    """
    stopped = tenant.budget_stopped_at
    if stopped is None or not tenant.budget_hard_stop or tenant.monthly_budget is None:
        return ""
    month = timezone.localdate(now or timezone.now()).replace(day=1)
    if timezone.localdate(stopped).replace(day=1) != month:
        return ""
    return (
        f"{tenant.display_name} has spent its monthly budget ({tenant.monthly_budget}) and its policy "
        "stops at 100 %: no GPUs can be reserved until next month, a higher budget or the hard stop turned off."
    )


def auto_approves(*, tenant: Tenant, gpus: int, fit: str | None) -> bool:
    """Whether the policy approves a request on its own: within nominal quota and at most the
    tenant's auto-approve ceiling (0 turns auto-approval off). `fit` is quotas.services' preview,
    measured against quotas.ceiling: an ended temporary raise or an archived tenant gives no fit."""
    limit = tenant.auto_approve_max_gpus
    return bool(limit) and not tenant.archived and fit == Fit.NOMINAL and gpus <= limit


def _gpus(n: int) -> str:
    return f"{n} GPU{'' if n == 1 else 's'}"


def policy_words(tenant: Tenant) -> str:
    """The request policy in words, as the platform's tenant list and the tenant API say it:
    "Auto-approves up to 2 GPUs within nominal quota · at most 8 GPUs per deployment · every
    flavor", or "No auto-approval · no per-deployment limit · …" when the settings are 0."""
    ceiling, limit = tenant.auto_approve_max_gpus, tenant.max_gpus_per_deployment
    auto = f"Auto-approves up to {_gpus(ceiling)} within nominal quota" if ceiling else "No auto-approval"
    per = f"at most {_gpus(limit)} per deployment" if limit else "no per-deployment limit"
    flavors = sorted(f.name for f in tenant.allowed_flavors.all())
    which = "only " + ", ".join(flavors) if flavors else "every flavor"
    return f"{auto} · {per} · {which}"


# The policy's single-valued settings: the request rules above, the monthly budget and idle
# policy (usage.budgets, reclaim) and the gateway limits (access). tenants.tenant_policy_set
# validates and stores them; a setting left out of a change keeps its value.
SCALAR_FIELDS = (
    "auto_approve_max_gpus",
    "max_gpus_per_deployment",
    "monthly_budget",
    "budget_hard_stop",
    "idle_warn_hours",
    "idle_stop_hours",
    "serving_schedule",
    "tokens_per_minute",
    "requests_per_minute",
)


def policy_summary(tenant: Tenant) -> dict:
    """The policy as plain values (audit entries, the API)."""
    summary = {field: getattr(tenant, field) for field in SCALAR_FIELDS}
    if summary["monthly_budget"] is not None:
        summary["monthly_budget"] = str(summary["monthly_budget"])
    summary["allowed_flavors"] = sorted(f.name for f in tenant.allowed_flavors.all())
    return summary
