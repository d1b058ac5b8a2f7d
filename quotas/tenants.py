"""Tenant administration: create, edit, set the request policy, archive. Platform admins only.

Every write is audited with its actor, the values before and after, and the reason given, and
(where the cluster's objects depend on it) mirrored to Kueue once the transaction commits.
Stopping a tenant's deployments before it is archived is the deployments app's part
(deployments.archive); this module only checks that nothing is held any more.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from catalog.patterns import clean_patterns
from core.exceptions import ConflictError, DomainError, Forbidden
from core.models import audit
from quotas.models import GpuFlavor, RetiredTenantSlug, Tenant, TenantQuota, is_platform_admin
from quotas.policy import SCALAR_FIELDS, policy_summary
from quotas.schedule import ScheduleError, parse_schedule
from quotas.services import schedule_kueue_sync
from quotas.tiers import tiers_named
from quotas.validators import validate_dns1123_label, validate_tenant_slug

EDITABLE = ("slug", "display_name", "cohort")


def _require_platform_admin(actor) -> None:
    if not is_platform_admin(actor):
        raise Forbidden("Only platform admins manage tenants.")


def _check_names(*, slug: str, display_name: str, cohort: str) -> None:
    for field, value, validate in (("slug", slug, validate_tenant_slug), ("cohort", cohort, validate_dns1123_label)):
        if not value and field == "cohort":
            continue
        try:
            validate(value)
        except ValidationError as error:
            raise DomainError(error.messages[0], field=field) from None
    if not display_name or not display_name.strip() or len(display_name) > 100:
        raise DomainError("Enter a display name (at most 100 characters).", field="display_name")


def _values(tenant: Tenant) -> dict:
    return {field: getattr(tenant, field) for field in EDITABLE}


@transaction.atomic
def tenant_create(*, actor, slug: str, display_name: str, cohort: str = "", reason: str = "") -> Tenant:
    """A new tenant; its Namespace and queues follow on commit (Kueue sync)."""
    _require_platform_admin(actor)
    _check_names(slug=slug, display_name=display_name, cohort=cohort)
    if RetiredTenantSlug.objects.filter(slug=slug).exists():
        raise ConflictError(
            f"The slug {slug!r} belonged to a deleted tenant, and what was published under it may remain; "
            "choose another.",
            field="slug",
            code="retired",
        )
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(slug=slug, display_name=display_name.strip(), cohort=cohort)
    except IntegrityError:
        raise ConflictError(f"A tenant with the slug {slug!r} already exists.", field="slug") from None
    audit(
        actor=actor, action="tenant.create", obj=tenant, tenant=tenant, reason=reason, changes={"to": _values(tenant)}
    )
    schedule_kueue_sync(tenant.pk)
    return tenant


def _lock(tenant_id: int) -> Tenant:
    return Tenant.objects.select_for_update().get(pk=tenant_id)


@transaction.atomic
def tenant_update(*, tenant_id: int, actor, reason: str = "", **values) -> Tenant:
    """Change the display name or the cohort. The slug is fixed (Tenant says why): sending the
    current one is no change, another one is a field error."""
    _require_platform_admin(actor)
    unknown = set(values) - set(EDITABLE)
    if unknown:
        raise DomainError(f"Cannot change {', '.join(sorted(unknown))} here.")
    tenant = _lock(tenant_id)
    if tenant.archived:
        raise ConflictError("This tenant is archived.", code="archived")
    before = _values(tenant)
    after = {**before, **values}
    if after["slug"] != before["slug"]:
        raise DomainError(
            f"The slug {tenant.slug!r} is fixed: it names the tenant's namespace, queues, API keys and "
            "endpoints. To use another slug, create a new tenant and archive this one.",
            field="slug",
            code="immutable",
        )
    _check_names(**after)
    changed = {k: v for k, v in after.items() if before[k] != v}
    if not changed:
        return tenant
    for key, value in changed.items():
        setattr(tenant, key, value.strip() if key == "display_name" else value)
    tenant.save(update_fields=list(changed))
    audit(
        actor=actor,
        action="tenant.update",
        obj=tenant,
        tenant=tenant,
        reason=reason,
        changes={"from": {k: before[k] for k in changed}, "to": changed},
    )
    if "cohort" in changed:
        schedule_kueue_sync(tenant.pk)
    return tenant


@transaction.atomic
def tenant_policy_set(
    *,
    tenant_id: int,
    actor,
    allowed_flavors: list[GpuFlavor],
    reason: str = "",
    allowed_models: list | None = None,
    allowed_source_patterns: list[str] | None = None,
    allowed_tiers: list | None = None,
    auto_approve_tiers: list | None = None,
    **values,
) -> Tenant:
    """Set the tenant's policy (quotas.policy.SCALAR_FIELDS, the allowed flavors, the model
    allow-list: catalog models and source patterns, and the priority tiers it may use and have
    auto-approved, given as tiers or their names). A setting left out keeps its value. It shapes
    requests, spend and idle handling, not the Kueue objects: no Kueue sync."""
    _require_platform_admin(actor)
    if allowed_source_patterns is not None:
        allowed_source_patterns, problem = clean_patterns(allowed_source_patterns)
        if problem:
            raise DomainError(problem, field="allowed_source_patterns")
    retired_models = sorted(m.name for m in allowed_models or () if not m.active)
    if retired_models:
        raise DomainError(f"Not offered any more: {', '.join(retired_models)}.", field="allowed_models")
    unknown = sorted(set(values) - set(SCALAR_FIELDS))
    if unknown:
        raise DomainError(f"Not a policy setting: {', '.join(unknown)}.", field=unknown[0])
    for field, value in values.items():
        _check_policy_value(field, value)
    retired = sorted(f.name for f in allowed_flavors if not f.active)
    if retired:
        raise DomainError(f"Not offered any more: {', '.join(retired)}.", field="allowed_flavors")
    # The tiers before the tenant: the order quotas.tiers locks in, so a tier deleted meanwhile is
    # refused here on its field rather than failing the write.
    tiers = {
        field: tiers_named(_names(chosen), field=field)
        for field, chosen in (("allowed_tiers", allowed_tiers), ("auto_approve_tiers", auto_approve_tiers))
        if chosen is not None
    }
    tenant = _lock(tenant_id)
    if tenant.archived:
        raise ConflictError("This tenant is archived.", code="archived")
    before = policy_summary(tenant)
    if tiers:  # against the locked row's other set when only one is given
        _check_auto_approve_tiers(
            _names(tiers.get("allowed_tiers", tenant.allowed_tiers.all())),
            _names(tiers.get("auto_approve_tiers", tenant.auto_approve_tiers.all())),
        )
    for field, value in values.items():
        setattr(tenant, field, value)
    ceiling, per_deployment = tenant.auto_approve_max_gpus, tenant.max_gpus_per_deployment
    if per_deployment and ceiling > per_deployment:
        raise DomainError(
            "The auto-approve ceiling cannot exceed the maximum GPUs per deployment.", field="auto_approve_max_gpus"
        )
    if tenant.idle_warn_hours and tenant.idle_stop_hours and tenant.idle_warn_hours >= tenant.idle_stop_hours:
        raise DomainError("The idle warning must come before the idle stop.", field="idle_warn_hours")
    if tenant.budget_hard_stop and tenant.monthly_budget is None:
        raise DomainError("A hard stop needs a monthly budget.", field="budget_hard_stop")
    if allowed_source_patterns is not None:
        tenant.allowed_source_patterns = allowed_source_patterns
        values["allowed_source_patterns"] = allowed_source_patterns
    tenant.save(update_fields=list(values))
    tenant.allowed_flavors.set(allowed_flavors)
    if allowed_models is not None:
        tenant.allowed_models.set(allowed_models)
    for field, chosen in tiers.items():
        getattr(tenant, field).set(chosen)
    after = policy_summary(tenant)
    if after != before:
        audit(
            actor=actor,
            action="tenant.policy",
            obj=tenant,
            tenant=tenant,
            reason=reason,
            changes={"from": before, "to": after},
        )
    return tenant


def _names(tiers) -> list[str]:
    return sorted({tier if isinstance(tier, str) else tier.name for tier in tiers})


def _check_auto_approve_tiers(allowed: list[str], auto: list[str]) -> None:
    """The policy auto-approves only tiers the tenant may choose."""
    outside = sorted(set(auto) - set(allowed))
    if outside:
        raise DomainError(
            f"Only allowed tiers can be auto-approved; not allowed: {', '.join(outside)}.", field="auto_approve_tiers"
        )


# (lowest, highest) for the whole-number settings; the model's validators say the same.
_POLICY_RANGES = {
    "auto_approve_max_gpus": (0, 100_000),
    "max_gpus_per_deployment": (0, 100_000),
    "idle_warn_hours": (0, 24 * 90),
    "idle_stop_hours": (0, 24 * 90),
    "wake_timeout_seconds": (0, 900),
    "tokens_per_minute": (0, 10**9),
    "requests_per_minute": (0, 10**7),
}


def _check_policy_value(field: str, value) -> None:
    if field in _POLICY_RANGES:
        low, high = _POLICY_RANGES[field]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise DomainError(f"A whole number from {low} to {high}.", field=field)
    elif field == "monthly_budget":
        if value is not None and (
            not isinstance(value, Decimal) or not value.is_finite() or value < 0 or value >= Decimal("1e10")
        ):
            raise DomainError("An amount of at least 0 with at most 10 digits before the point.", field=field)
        if value is not None and value.as_tuple().exponent < -2:
            raise DomainError("At most two decimal places.", field=field)
    elif field == "budget_hard_stop":
        if not isinstance(value, bool):
            raise DomainError("True or false.", field=field)
    elif field == "serving_schedule":
        if not isinstance(value, str) or len(value) > 200:
            raise DomainError("At most 200 characters.", field=field)
        try:
            parse_schedule(value)
        except ScheduleError as error:
            raise DomainError(str(error), field=field) from None


@transaction.atomic
def tenant_mark_archived(*, tenant_id: int, actor, reason: str) -> Tenant:
    """The last step of archiving: give the tenant's quota back to the cohort (every quota to zero)
    and mark it archived. Its deployments must hold nothing by now (deployments.archive stops
    them first); the ClusterQueue follows on commit."""
    _require_platform_admin(actor)
    if not reason or not reason.strip():
        raise DomainError("Say why the tenant is archived.", field="reason")
    tenant = _lock(tenant_id)
    if tenant.archived:
        raise ConflictError("This tenant is already archived.", code="archived")
    quotas = list(TenantQuota.objects.select_for_update().filter(tenant=tenant).order_by("pk"))
    held = sum(q.reserved_gpus for q in quotas)
    if held:
        raise ConflictError(f"{held} GPUs are still reserved by this tenant's deployments.", code="reserved")
    before = {
        q.flavor.name: {"nominal_gpus": q.nominal_gpus, "borrowing_limit_gpus": q.borrowing_limit_gpus} for q in quotas
    }
    TenantQuota.objects.filter(pk__in=[q.pk for q in quotas]).update(
        nominal_gpus=0, borrowing_limit_gpus=0, lending_limit_gpus=None, updated=timezone.now()
    )
    tenant.archived_at = timezone.now()
    tenant.save(update_fields=["archived_at"])
    audit(
        actor=actor,
        action="tenant.archive",
        obj=tenant,
        tenant=tenant,
        reason=reason.strip(),
        changes={"from": {"quotas": before}, "to": {"quotas": dict.fromkeys(before, 0), "archived": True}},
    )
    schedule_kueue_sync(tenant.pk)
    return tenant
