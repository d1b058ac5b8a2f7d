"""The model-cache claim in each tenant namespace: created by the Kueue sync (quotas.kueue), right
after the tenant's Namespace, while MODEL_CACHE_PVC names one.

Every engine pod of the tenant mounts the claim (runtime.manifests.common.model_cache_volume), so
it must exist before the first deployment starts; it is ReadWriteMany, `MODEL_CACHE_SIZE_GI` GiB
of `MODEL_CACHE_STORAGE_CLASS` unless the tenant overrides either (Tenant.model_cache_size_gi,
Tenant.model_cache_storage_class).

The portal creates the claim when it is absent and otherwise only raises its size: it never
shrinks it (the API server refuses that) and never deletes it (the cache is the tenant's data).
A larger size is a patch of `spec.resources.requests.storage`, which the API server accepts only
when the claim's StorageClass allows volume expansion (its PersistentVolumeClaimResize admission:
"only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must
support resize", kubernetes/kubernetes plugin/pkg/admission/storage/persistentvolume/resize). The
portal tries, and when the API server refuses it leaves the claim as it is and records why. A
different storage class on an existing claim is never applied (a claim's class is immutable):
that is recorded too. What was found is kept on the tenant (`model_cache_status`) for its page and
the readiness page.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.exceptions import ConflictError, Forbidden
from core.models import audit
from quotas.models import Tenant, is_platform_admin
from runtime import k8s
from runtime.manifests.storage import (
    cache_size_problem,
    quantity_bytes,
    render_model_cache_claim,
    storage_class_problem,
)

log = logging.getLogger(__name__)
GI = 2**30


def wanted(tenant: Tenant) -> tuple[int, str]:
    """(size in GiB, storage class) the tenant's claim should have: its overrides, else the settings."""
    size = tenant.model_cache_size_gi or settings.MODEL_CACHE_SIZE_GI
    storage_class = tenant.model_cache_storage_class or settings.MODEL_CACHE_STORAGE_CLASS
    return size, storage_class


def sync_model_cache(cluster: k8s.Cluster, tenant: Tenant) -> int:
    """Create or grow the tenant's claim; returns how many writes were made (0 or 1). A refusal
    by the API server (a 4xx) is recorded on the tenant and does not stop the sync; a transient
    error propagates (the task retries)."""
    name = settings.MODEL_CACHE_PVC
    if not name:
        _record(tenant, {})
        return 0
    size_gi, storage_class = wanted(tenant)
    claim = render_model_cache_claim(
        name=name, namespace=tenant.namespace, tenant_slug=tenant.slug, size_gi=size_gi, storage_class=storage_class
    )
    status = {"claim": name, "size_gi": size_gi, "storage_class": storage_class, "problem": ""}
    written = 0
    try:
        current = cluster.get(k8s.PVC, name, tenant.namespace)
        if current is None:
            cluster.create_claim(claim)
            status["action"] = "created"
            written = 1
        else:
            status["problem"], written = _reconcile(cluster, tenant, current, size_gi, storage_class)
            status["action"] = "grown" if written else "kept"
    except k8s.PermanentClusterError as error:
        status["action"] = "refused"
        status["problem"] = f"The API server refused the model-cache claim {name}: {error}"
        log.warning("tenant %s: %s", tenant.slug, status["problem"])
    _record(tenant, status)
    return written


def _reconcile(
    cluster: k8s.Cluster, tenant: Tenant, current: dict, size_gi: int, storage_class: str
) -> tuple[str, int]:
    """(problem, writes) for a claim that exists: grow it when asked for more, note what differs."""
    name = settings.MODEL_CACHE_PVC
    spec = current.get("spec") or {}
    problems = []
    has_class = spec.get("storageClassName") or ""
    if storage_class and has_class != storage_class:
        problems.append(
            f"The claim {name} has storage class {has_class or '(default)'!s}, not {storage_class}: a claim's "
            "class cannot change, so the portal keeps it (delete the claim to have it made again)."
        )
    requested = quantity_bytes(((spec.get("resources") or {}).get("requests") or {}).get("storage"))
    if requested is None or requested >= size_gi * GI:
        return " ".join(problems), 0  # never shrunk: a smaller wish is not a problem, just not done
    phase = (current.get("status") or {}).get("phase") or "Pending"
    if phase != "Bound":
        # The API server refuses any change of an unbound claim's spec (kubernetes/kubernetes
        # pkg/apis/core/validation/validation.go, ValidatePersistentVolumeClaimUpdate: "spec is
        # immutable after creation except resources.requests ... for bound claims"): a later sync grows it.
        problems.append(f"The claim {name} is {phase}: it grows to {size_gi}Gi once it is bound.")
        return " ".join(problems), 0
    try:
        cluster.patch_claim_storage(name, tenant.namespace, f"{size_gi}Gi")
    except k8s.PermanentClusterError as error:
        problems.append(
            f"The claim {name} stays at its size: the API server refused to grow it to {size_gi}Gi ({error}). "
            "Its StorageClass must allow volume expansion (allowVolumeExpansion: true)."
        )
        return " ".join(problems), 0
    return " ".join(problems), 1


def _record(tenant: Tenant, status: dict) -> None:
    if status:
        status = {**status, "checked_at": timezone.now().isoformat()}
    Tenant.objects.filter(pk=tenant.pk).update(model_cache_status=status)


def storage_set(*, tenant_id: int, actor, model_cache_size_gi: int | None, model_cache_storage_class: str) -> Tenant:
    """A platform admin sets the tenant's own claim size and class (None and "": the settings');
    audited, and mirrored by the Kueue sync on commit. ValidationError with field messages."""
    if not is_platform_admin(actor):
        raise Forbidden("Only platform admins set a tenant's model-cache size and storage class.")
    errors = {}
    if model_cache_size_gi is not None and (problem := cache_size_problem(model_cache_size_gi)):
        errors["model_cache_size_gi"] = [problem]
    if not isinstance(model_cache_storage_class, str) or (problem := storage_class_problem(model_cache_storage_class)):
        errors["model_cache_storage_class"] = [problem or "Enter a StorageClass name."]
    if errors:
        raise ValidationError(errors)
    from quotas.services import schedule_kueue_sync

    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
        if tenant.archived:
            raise ConflictError("This tenant is archived.", code="archived")
        fields = ("model_cache_size_gi", "model_cache_storage_class")
        before = {field: getattr(tenant, field) for field in fields}
        after = {"model_cache_size_gi": model_cache_size_gi, "model_cache_storage_class": model_cache_storage_class}
        if after != before:
            for field, value in after.items():
                setattr(tenant, field, value)
            tenant.save(update_fields=list(fields))
            audit(
                actor=actor, action="tenant.storage", obj=tenant, tenant=tenant, changes={"from": before, "to": after}
            )
            schedule_kueue_sync(tenant.pk)
    return tenant
