"""GPU flavor administration: create, edit, retire. Platform admins only.

A flavor is mirrored as a Kueue ResourceFlavor and appears in every ClusterQueue that has quota
for it, so every change is audited and re-syncs every tenant on commit. Its node labels and
tolerations are checked by GpuFlavor.clean (the ResourceFlavor CRD's schema and CEL rules), its
accelerator type against Ray's names (runtime.accelerators) when it is new or changes.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from core.exceptions import ConflictError, DomainError, Forbidden
from core.models import audit
from quotas.models import GpuFlavor, is_platform_admin
from quotas.services import schedule_kueue_sync
from quotas.specs import flavor_spec

FIELDS = (
    "name",
    "gpu_model",
    "accelerator_type",
    "gpu_memory_gib",
    "gpus_per_node",
    "cpu_per_gpu",
    "memory_gib_per_gpu",
    "node_labels",
    "tolerations",
    "price_per_gpu_hour",
    "provisioning",
    "topology_levels",
    "active",
)


def _plain(value):
    return str(value) if isinstance(value, Decimal) else value


def _values(flavor: GpuFlavor) -> dict:
    return {field: _plain(getattr(flavor, field)) for field in FIELDS}


def _validated(flavor: GpuFlavor) -> None:
    try:
        flavor.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as error:
        field, messages = next(iter(error.message_dict.items()))
        raise DomainError(" ".join(messages), field=None if field == "__all__" else field) from None


def _fixed_with_topology(flavor: GpuFlavor) -> dict:
    """What the flavor's ResourceFlavor may not change once it has a topologyName, as rendered
    (so the same tolerations written another way are no change)."""
    spec = flavor_spec(flavor)
    return {"node_labels": spec.node_labels, "tolerations": spec.tolerations}


def _refuse_fixed_with_topology(before: dict, flavor: GpuFlavor) -> None:
    """Kueue keeps a ResourceFlavor's nodeLabels and tolerations once it has a topologyName (CEL
    rules, kubernetes-sigs/kueue v0.19.2 apis/kueue/v1beta2/resourceflavor_types.go): the sync
    could never apply the change, so it is refused here, on the field."""
    after = _fixed_with_topology(flavor)
    for field, what in (("node_labels", "node labels"), ("tolerations", "tolerations")):
        if before[field] != after[field]:
            raise DomainError(
                f"A flavor with a topology keeps its {what}: Kueue refuses to change them on its ResourceFlavor. "
                "Stop its deployments, retire it and create a new flavor instead.",
                field=field,
            )


def _refuse_unknown_accelerator(before: dict | None, flavor: GpuFlavor) -> None:
    """Ray Serve LLM refuses an accelerator type it does not know only when it builds the app,
    after the GPU workers started (DEPLOY_FAILED; runtime.accelerators cites Ray's check), so a new
    or changed name is checked here, on the field. A name saved before this check is flagged
    (readiness, the flavor's page) but blocks no other change, retiring the flavor included."""
    if before is not None and before["accelerator_type"] == flavor.accelerator_type:
        return
    if problem := flavor.accelerator_problem:
        raise DomainError(problem, field="accelerator_type")


@transaction.atomic
def flavor_save(*, actor, values: dict, name: str | None = None, reason: str = "") -> GpuFlavor:
    """Create a flavor (`name` None) or change the named one. The name is fixed once created: it
    names the ResourceFlavor that ClusterQueues and admitted workloads refer to."""
    if not is_platform_admin(actor):
        raise Forbidden("Only platform admins manage GPU flavors.")
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise DomainError(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    if name is None:
        flavor, before, fixed = GpuFlavor(), None, None
    else:
        flavor = GpuFlavor.objects.select_for_update().get(name=name)
        before = _values(flavor)
        fixed = _fixed_with_topology(flavor) if flavor.topology_levels else None
        if "name" in values and values["name"] != name:
            raise DomainError("A flavor's name cannot change (it names the Kueue ResourceFlavor).", field="name")
    for field, value in values.items():
        setattr(flavor, field, value)
    if before and before["topology_levels"] and not flavor.topology_levels:
        # Kueue keeps a ResourceFlavor's topologyName once set (CRD rule): levels may change, not go.
        raise DomainError(
            "A flavor's topology can be changed but not removed (Kueue forbids it).", field="topology_levels"
        )
    _validated(flavor)
    _refuse_unknown_accelerator(before, flavor)
    if fixed is not None:
        _refuse_fixed_with_topology(fixed, flavor)
    try:
        with transaction.atomic():
            flavor.save()
    except IntegrityError:
        raise ConflictError(f"A flavor named {flavor.name!r} already exists.", field="name") from None
    after = _values(flavor)
    if after != before:
        changed = [k for k in FIELDS if before is None or before[k] != after[k]]
        audit(
            actor=actor,
            action="flavor.create" if before is None else "flavor.update",
            obj=flavor,
            reason=reason,
            changes={
                "from": None if before is None else {k: before[k] for k in changed},
                "to": {k: after[k] for k in changed},
            },
        )
        schedule_kueue_sync(None)
    return flavor


def flavor_retire(*, actor, name: str, reason: str = "") -> GpuFlavor:
    """Stop offering a flavor. Quotas and deployments refer to it, so it is kept, inactive."""
    return flavor_save(actor=actor, name=name, values={"active": False}, reason=reason)
