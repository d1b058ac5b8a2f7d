"""Archiving a tenant: stop everything it runs, give its GPUs back, then archive it.

Lives here, not in quotas, because it drives deployments (quotas may not import them). One
transaction: either every deployment is stopped or cancelled and the tenant is archived with
zero quota, or nothing changed.
"""

from __future__ import annotations

from django.db import transaction

from core.exceptions import DomainError, Forbidden
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.services import deployment_cancel, deployment_release_quota, deployment_stop
from deployments.states import RUNNING
from quotas.models import Tenant, is_platform_admin
from quotas.tenants import tenant_mark_archived


@transaction.atomic
def tenant_archive(*, tenant_id: int, actor, confirm: str, reason: str) -> Tenant:
    """Archive a tenant after the admin typed its slug to confirm: pending requests are cancelled,
    running and failed deployments stopped with their GPUs released at once (the reconciler
    removes the workloads), every quota goes to zero and the ClusterQueue follows on commit."""
    if not is_platform_admin(actor):
        raise Forbidden("Only platform admins archive tenants.")
    tenant = Tenant.objects.get(pk=tenant_id)
    if confirm != tenant.slug:
        raise DomainError(f"Type the tenant's slug ({tenant.slug}) to confirm.", field="confirm")
    if not reason or not reason.strip():
        raise DomainError("Say why the tenant is archived.", field="reason")
    live = ModelDeployment.objects.filter(tenant=tenant).order_by("pk")
    for dep_id in live.filter(state=State.PENDING_APPROVAL).values_list("pk", flat=True):
        deployment_cancel(deployment_id=dep_id, user=actor)
    for dep_id in live.filter(state__in=RUNNING | {State.FAILED}).values_list("pk", flat=True):
        deployment_stop(deployment_id=dep_id, user=actor)
    # Stopped ones (just now, or earlier with the workload's removal still under way) give their
    # GPUs back now; the reconciler removes what may still run and finds nothing left to release.
    for dep_id in live.filter(state=State.STOPPED, reserved_gpus__gt=0).values_list("pk", flat=True):
        deployment_release_quota(deployment_id=dep_id, reason=f"Tenant archived: {reason.strip()}")
    return tenant_mark_archived(tenant_id=tenant.pk, actor=actor, reason=reason)
