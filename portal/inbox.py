"""The platform admin's approvals inbox: what is waiting for a decision."""

from __future__ import annotations


def pending_counts() -> dict[str, int]:
    from deployments.choices import State
    from deployments.models import ModelDeployment
    from quotas.choices import QuotaChangeStatus
    from quotas.models import QuotaChangeRequest

    deployments = ModelDeployment.objects.filter(state=State.PENDING_APPROVAL).count()
    quotas = QuotaChangeRequest.objects.filter(status=QuotaChangeStatus.PENDING).count()
    return {"deployments": deployments, "quotas": quotas, "total": deployments + quotas}
