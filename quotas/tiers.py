"""Priority tier administration: create, change, delete. Platform admins only.

A tier is a Kueue WorkloadPriorityClass (quotas.tier_models, rendered by quotas.kueue), so every
change is audited and re-syncs Kueue on commit. Its name is fixed once made: deployments and
tenant policies name it, and it names the class. A tier that a deployment still names cannot be
deleted; deleting one takes it out of every tenant's allowed and auto-approve sets.

Locks, always in this order: the tier's row, then the rows of the tenants that allow it. A policy
change takes the tiers it names first too (quotas.tenants.tenant_policy_set), and a deployment
request holds its tenant's row while it checks the tier against the policy
(deployments.services), so a tier cannot be deleted between that check and the request's commit.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count

from core.exceptions import ConflictError, DomainError, Forbidden
from core.models import audit
from quotas.models import PriorityTier, Tenant, is_platform_admin
from quotas.policy import policy_summary
from quotas.services import schedule_kueue_sync

FIELDS = ("name", "display_name", "value", "description")
EDITABLE = ("display_name", "value", "description")
GONE = "deleted"  # ModelDeployment.state of a deleted deployment: it names nothing any more


def _require_platform_admin(actor) -> None:
    if not is_platform_admin(actor):
        raise Forbidden("Only platform admins manage priority tiers.")


def _values(tier: PriorityTier) -> dict:
    return {field: getattr(tier, field) for field in FIELDS}


def _validated(tier: PriorityTier) -> None:
    """The model's own rules (name, lengths, the value's range), each on its field."""
    for field in ("name", "display_name", "description"):
        if "\x00" in str(getattr(tier, field)):
            raise DomainError("No NUL characters.", field=field)
    if isinstance(tier.display_name, str):
        tier.display_name = tier.display_name.strip()
    if isinstance(tier.value, bool) or not isinstance(tier.value, int):
        raise DomainError("A whole number.", field="value")
    try:
        tier.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as error:
        field, messages = next(iter(error.message_dict.items()))
        raise DomainError(" ".join(messages), field=None if field == "__all__" else field) from None


def _deployments():
    """The deployment model, reached through Tenant's reverse relation: quotas sits below
    deployments (import-linter's layers) and a deployment names its tier, it has no foreign key."""
    return Tenant._meta.get_field("deployments").related_model


def tier_usage(*, tenants=None) -> dict[str, int]:
    """How many deployments (not deleted) name each tier, {name: count}, counted in `tenants`
    (a Tenant queryset: what a user sees) or in every tenant."""
    rows = _deployments().objects.exclude(state=GONE).exclude(priority_tier="")
    if tenants is not None:
        rows = rows.filter(tenant__in=tenants)
    counted = rows.values("priority_tier").annotate(n=Count("pk")).order_by()
    return {row["priority_tier"]: row["n"] for row in counted}


@transaction.atomic
def tier_create(
    *, actor, name: str, display_name: str, value: int, description: str = "", reason: str = ""
) -> PriorityTier:
    """A new tier; its WorkloadPriorityClass follows on commit."""
    _require_platform_admin(actor)
    tier = PriorityTier(name=name, display_name=display_name, value=value, description=description)
    _validated(tier)
    try:
        with transaction.atomic():
            tier.save()
    except IntegrityError:
        raise DomainError(f"A priority tier named {name!r} already exists.", field="name", code="unique") from None
    audit(actor=actor, action="tier.create", obj=tier, reason=reason, changes={"from": None, "to": _values(tier)})
    schedule_kueue_sync(None)
    return tier


def _locked(name: str, *, no_key: bool) -> PriorityTier:
    tier = PriorityTier.objects.select_for_update(no_key=no_key).filter(name=name).first()
    if tier is None:
        raise DomainError(f"There is no priority tier {name!r}.", field="name", code="not_found")
    return tier


@transaction.atomic
def tier_update(*, actor, name: str, values: dict, reason: str = "") -> PriorityTier:
    """Change the display name, value or description of the tier named `name`. The name is
    fixed: `values` may repeat it (no change), another one is a field error."""
    _require_platform_admin(actor)
    values = dict(values)
    if values.get("name", name) != name:
        raise DomainError(
            "A priority tier's name cannot change: it names the Kueue WorkloadPriorityClass and deployments "
            "and tenant policies refer to it. Create a new tier instead.",
            field="name",
            code="immutable",
        )
    values.pop("name", None)
    unknown = sorted(set(values) - set(EDITABLE))
    if unknown:
        raise DomainError(f"Cannot change {', '.join(unknown)} here.", field=unknown[0])
    # NO KEY: the name (the key tenants' policies refer to) stays; rows that refer to it stay insertable.
    tier = _locked(name, no_key=True)
    before = _values(tier)
    for field, value in values.items():
        setattr(tier, field, value)
    _validated(tier)
    after = _values(tier)
    changed = [field for field in FIELDS if before[field] != after[field]]
    if not changed:
        return tier
    tier.save(update_fields=changed)
    audit(
        actor=actor,
        action="tier.update",
        obj=tier,
        reason=reason,
        changes={"from": {k: before[k] for k in changed}, "to": {k: after[k] for k in changed}},
    )
    schedule_kueue_sync(None)
    return tier


@transaction.atomic
def tier_delete(*, actor, name: str, reason: str = "") -> None:
    """Delete a tier no deployment names (409 otherwise). Tenants that allowed it stop allowing
    it, each audited as a policy change; its WorkloadPriorityClass is deleted on commit."""
    _require_platform_admin(actor)
    tier = _locked(name, no_key=False)
    # Held until the commit: a request in these tenants waits, then finds the tier gone.
    tenants = list(
        Tenant.objects.select_for_update(no_key=True)
        .filter(pk__in=_tenants_naming(tier))
        .order_by("pk")
        .prefetch_related("allowed_flavors", "allowed_models", "allowed_tiers", "auto_approve_tiers")
    )
    in_use = tier_usage().get(tier.name, 0)
    if in_use:
        which = "1 deployment uses" if in_use == 1 else f"{in_use} deployments use"
        raise ConflictError(
            f"{which} the priority tier {tier.name!r}: change their tier or delete them first.", code="in_use"
        )
    before = {tenant.pk: policy_summary(tenant) for tenant in tenants}
    audit(actor=actor, action="tier.delete", obj=tier, reason=reason, changes={"from": _values(tier), "to": None})
    tier.delete()  # and its rows in every tenant's allowed and auto-approve sets
    for tenant in tenants:
        tenant = Tenant.objects.get(pk=tenant.pk)
        audit(
            actor=actor,
            action="tenant.policy",
            obj=tenant,
            tenant=tenant,
            reason=reason or f"Priority tier {name} deleted.",
            changes={"from": before[tenant.pk], "to": policy_summary(tenant)},
        )
    schedule_kueue_sync(None)


def _tenants_naming(tier: PriorityTier) -> set[int]:
    allowing = tier.allowed_tenants.values_list("pk", flat=True)
    auto = tier.auto_approving_tenants.values_list("pk", flat=True)
    return set(allowing) | set(auto)


def tiers_named(names, *, field: str) -> list[PriorityTier]:
    """The tiers with these names, locked against deletion until the commit (in name order, so two
    policy changes naming the same tiers queue rather than deadlock); an unknown name is an error
    on `field`."""
    wanted = sorted(set(names))
    found = list(PriorityTier.objects.select_for_update(no_key=True).filter(name__in=wanted).order_by("name"))
    missing = sorted(set(wanted) - {tier.name for tier in found})
    if missing:
        raise DomainError(f"No such priority tier: {', '.join(missing)}.", field=field)
    return found
