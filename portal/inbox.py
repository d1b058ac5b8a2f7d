"""The platform admin's approvals inbox: what is waiting for a decision."""

from __future__ import annotations


def pending_counts() -> dict[str, int]:
    """Proposed revisions (first requests and changes to approved deployments) and quota changes."""
    from deployments.choices import RevisionStatus
    from deployments.models import DeploymentRevision
    from deployments.states import GONE
    from quotas.choices import QuotaChangeStatus
    from quotas.models import QuotaChangeRequest

    deployments = (
        DeploymentRevision.objects.filter(status=RevisionStatus.PROPOSED).exclude(deployment__state__in=GONE).count()
    )
    quotas = QuotaChangeRequest.objects.filter(status=QuotaChangeStatus.PENDING).count()
    return {"deployments": deployments, "quotas": quotas, "total": deployments + quotas}
