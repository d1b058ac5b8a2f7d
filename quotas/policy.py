"""A tenant's request policy: which flavors it may use, how big one deployment may be, and what
the platform approves without a person (the auto-approve ceiling).

It also says which models the tenant may deploy (an allow-list of catalog models at their
pinned revisions and of source patterns, catalog.patterns) and refuses a gated catalog model
that no token would open.

The one place these rules live. Deployments' request validation (deployments.validation) asks
`policy_errors` for every draft, so the API, the browser form, the live preview and spec updates
refuse the same things with the same messages; the deployment services ask `auto_approves`.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from catalog.models import CatalogModel
from catalog.patterns import matching
from quotas.ceiling import archived_error
from quotas.choices import Fit
from quotas.models import GpuFlavor, Tenant
from quotas.tenant_secrets import hf_token_secret as tenant_hf_token


def allowed_flavor_ids(tenant: Tenant) -> set[int] | None:
    """The flavors the tenant may request, or None when it may request every active flavor."""
    ids = {flavor.pk for flavor in tenant.allowed_flavors.all()}
    return ids or None


def policy_errors(
    *,
    tenant: Tenant,
    flavor: GpuFlavor | None,
    gpus: int,
    model_source: str | None = None,
    model_revision: str = "",
    hf_token_secret: str = "",
) -> dict[str, str]:
    """Field errors for a draft needing `gpus` GPUs of `flavor` in `tenant` (empty: allowed).
    `model_source` (None: not checked, e.g. a source its own syntax rule refused) is held to the
    model allow-list and the gating rule, with the draft's revision and token Secret."""
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
    if model_source is not None:
        errors.update(model_errors(tenant, model_source, model_revision, hf_token_secret))
    return errors


def _allows(row: CatalogModel, source: str, revision: str) -> bool:
    """A catalog row allows a draft of its source at its pinned revision (or, for a row that
    follows the default branch, with no revision)."""
    return row.active and row.source == source and row.revision == revision


def model_errors(tenant: Tenant, source: str, revision: str = "", token_secret: str = "") -> dict[str, str]:
    """The allow-list and the gating rule for a draft of `source` at `revision`.

    Allowed: both lists empty (any model, as before issue 33); a pattern matching the source; or
    an allowed catalog row with this source and revision. A deactivated row allows nothing, and
    does not empty the list either (deactivating must not open every model). A gated catalog
    model needs a token: the draft's own Secret or the tenant's Hugging Face token.
    """
    errors = {}
    rows = list(tenant.allowed_models.all())
    patterns = list(tenant.allowed_source_patterns or [])
    if (rows or patterns) and not matching(source, patterns) and not any(_allows(r, source, revision) for r in rows):
        errors["model_source"] = _not_allowed(tenant, source, revision, rows, patterns)
    gated = CatalogModel.objects.filter(source=source, active=True, gated=True).order_by("name").first()
    if gated is not None and not token_secret and not tenant_hf_token(tenant):
        where = (
            f" (the catalog keeps it in the Secret {gated.token_secret}: name it as the token Secret)"
            if gated.token_secret
            else ""
        )
        errors["hf_token_secret"] = (
            f"{gated.display_name} is gated on Hugging Face and {tenant.display_name} has no token for it{where}. "
            "Set the tenant's Hugging Face token on its credentials page, or name a Secret with key HF_TOKEN."
        )
    return errors


def _not_allowed(tenant: Tenant, source: str, revision: str, rows: list, patterns: list[str]) -> str:
    pinned = [r for r in rows if r.active and r.source == source]
    if pinned:
        at = ", ".join(f"{r.revision or 'the default branch'} (catalog model {r.name})" for r in pinned)
        return (
            f"{tenant.display_name} may deploy {source} only at {at}, not at "
            f"{revision or 'the default branch'}: pick the catalog model, or set that revision."
        )
    allowed = (
        [f"catalog models {', '.join(sorted(r.name for r in rows if r.active))}"] if any(r.active for r in rows) else []
    )
    if patterns:
        allowed.append(f"sources matching {', '.join(patterns)}")
    return (
        f"{tenant.display_name} may not deploy {source}; its policy allows only {' and '.join(allowed) or 'no model'}."
    )


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


def tier_error(tenant: Tenant, tier: str) -> str:
    """Why `tenant` may not give a deployment the priority tier named `tier` ('' when it may;
    '' — no tier — always may)."""
    if not tier:
        return ""
    allowed = sorted(t.name for t in tenant.allowed_tiers.all())
    if tier in allowed:
        return ""
    if not allowed:
        return f"{tenant.display_name} may not choose a priority tier: leave it empty (Kueue's default priority)."
    return f"{tenant.display_name} may use only these priority tiers: {', '.join(allowed)} (or none)."


def auto_approves(*, tenant: Tenant, gpus: int, fit: str | None, tier: str = "") -> bool:
    """Whether the policy approves a request on its own: within nominal quota and at most the
    tenant's auto-approve ceiling (0 turns auto-approval off), and with no priority tier or one
    the tenant's policy auto-approves. `fit` is quotas.services' preview, measured against
    quotas.ceiling: an ended temporary raise or an archived tenant gives no fit."""
    limit = tenant.auto_approve_max_gpus
    if not (bool(limit) and not tenant.archived and fit == Fit.NOMINAL and gpus <= limit):
        return False
    return not tier or tenant.auto_approve_tiers.filter(name=tier).exists()


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
    models = sorted(m.name for m in tenant.allowed_models.all()) + list(tenant.allowed_source_patterns or [])
    what = " · only the models " + ", ".join(models) if models else ""  # nothing said: any model
    return f"{auto} · {per} · {which}{what}{_tier_words(tenant)}"


def _tier_words(tenant: Tenant) -> str:
    """The priority tiers in words, " · tiers: production, standard (auto-approves standard)"; nothing
    when the tenant allows none (its deployments have no tier). With auto-approval off, no tier is
    said to be auto-approved (auto_approves: the ceiling comes first)."""
    allowed = sorted(t.name for t in tenant.allowed_tiers.all())
    if not allowed:
        return ""
    auto = sorted(t.name for t in tenant.auto_approve_tiers.all()) if tenant.auto_approve_max_gpus else []
    return f" · tiers: {', '.join(allowed)}" + (f" (auto-approves {', '.join(auto)})" if auto else "")


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
    "wake_timeout_seconds",
    "tokens_per_minute",
    "requests_per_minute",
)


def policy_summary(tenant: Tenant) -> dict:
    """The policy as plain values (audit entries, the API)."""
    summary = {field: getattr(tenant, field) for field in SCALAR_FIELDS}
    if summary["monthly_budget"] is not None:
        summary["monthly_budget"] = str(summary["monthly_budget"])
    summary["allowed_flavors"] = sorted(f.name for f in tenant.allowed_flavors.all())
    summary["allowed_models"] = sorted(m.name for m in tenant.allowed_models.all())
    summary["allowed_source_patterns"] = list(tenant.allowed_source_patterns or [])
    summary["allowed_tiers"] = sorted(t.name for t in tenant.allowed_tiers.all())
    summary["auto_approve_tiers"] = sorted(t.name for t in tenant.auto_approve_tiers.all())
    return summary
