"""Archiving a tenant: stop everything it runs, give its GPUs back, then archive it.

Lives here, not in quotas, because it drives deployments (quotas may not import them). One
transaction: either every deployment is stopped or cancelled and the tenant is archived with
zero quota, or nothing changed.
"""

from __future__ import annotations

from django.db import transaction

from core.exceptions import DomainError, Forbidden
from deployments.choices import RevisionStatus
from deployments.models import ModelDeployment
from deployments.services import deployment_cancel, deployment_stop, deployment_withdraw
from deployments.states import HAS_SERVING, REQUESTED, STOPPABLE_BY_POLICY
from quotas.models import Tenant, is_platform_admin
from quotas.tenants import tenant_mark_archived


@transaction.atomic
def tenant_archive(*, tenant_id: int, actor, confirm: str, reason: str) -> Tenant:
    """Archive a tenant after the admin typed its slug to confirm: pending requests are cancelled,
    waiting changes withdrawn, running deployments stopped with their GPUs released at once
    (failed ones hold none already; the reconciler removes the workloads), every quota goes to
    zero and the ClusterQueue follows on commit."""
    if not is_platform_admin(actor):
        raise Forbidden("Only platform admins archive tenants.")
    tenant = Tenant.objects.get(pk=tenant_id)
    if confirm != tenant.slug:
        raise DomainError(f"Type the tenant's slug ({tenant.slug}) to confirm.", field="confirm")
    if not reason or not reason.strip():
        raise DomainError("Say why the tenant is archived.", field="reason")
    live = ModelDeployment.objects.filter(tenant=tenant).order_by("pk")
    for dep_id in live.filter(state__in=REQUESTED).values_list("pk", flat=True):
        deployment_cancel(deployment_id=dep_id, user=actor)
    # A stop releases the GPUs when it is recorded (services.settle_gpus, the one rule), so the
    # quotas hold nothing by the time they go to zero; the reconciler removes the workloads.
    for dep_id in live.filter(state__in=STOPPABLE_BY_POLICY).values_list("pk", flat=True):
        deployment_stop(deployment_id=dep_id, user=actor, reason=f"Tenant archived: {reason.strip()}")
    # A change waiting beside a serving revision would stay in the approvals inbox of a tenant
    # that can run nothing any more: withdraw it (audited as the archiving admin's withdrawal).
    waiting = live.filter(state__in=HAS_SERVING, revisions__status=RevisionStatus.PROPOSED)
    for dep_id, number in waiting.values_list("pk", "revisions__number"):
        deployment_withdraw(deployment_id=dep_id, user=actor, revision=number)
    return tenant_mark_archived(tenant_id=tenant.pk, actor=actor, reason=reason)
