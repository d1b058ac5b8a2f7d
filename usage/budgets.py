"""Monthly budgets: warnings at 80 % and 100 % (on the tenant's pages and by e-mail, once per
level and month) and the optional hard stop at 100 %.

The sweep (usage.tasks, after each ledger refresh) compares each tenant's known cost this month
with its budget. With the hard stop on, at 100 % it sets Tenant.budget_stopped_at and stops the
tenant's running deployments by policy (their GPUs are released at once); while it is set,
quotas.policy.budget_block_reason refuses new requests, starts and approvals. It is cleared when
the budget allows again: a new month, a higher budget, the budget removed or the hard stop off.
Stopped deployments stay stopped: people start them again.
"""

from __future__ import annotations

import logging
from datetime import date, datetime

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.exceptions import DomainError
from core.models import audit
from deployments.models import ModelDeployment
from deployments.policy_actions import POLICY, deployment_policy_stop
from deployments.states import STOPPABLE_BY_POLICY
from quotas.models import Tenant
from quotas.notify import notify_tenant_admins
from usage.models import BudgetNotice
from usage.reports import WARN_PCT, BudgetStatus, tenant_totals

log = logging.getLogger(__name__)
CAUSE = "BudgetStopped"
LEVELS = (WARN_PCT, 100)


def banner(tenant: Tenant, status: BudgetStatus) -> str:
    """The warning shown on the tenant's pages ("" below 80 %)."""
    if status.level == 0:
        return ""
    money = f"{status.spent:.2f} of {status.budget:.2f}"
    if status.level < 100:
        return f"{tenant.display_name} has used {status.pct:.0f} % of its monthly budget ({money})."
    if tenant.budget_stopped_at is not None:
        return (
            f"{tenant.display_name} has spent its monthly budget ({money}). The hard stop is on: its "
            "deployments were stopped and new requests, starts and approvals are refused until next "
            "month or a higher budget."
        )
    return f"{tenant.display_name} has spent its monthly budget ({money})."


def _notice(tenant: Tenant, month: date, status: BudgetStatus) -> int | None:
    """Record the levels reached this month; the highest newly reached one, if any, is e-mailed."""
    new = []
    for level in LEVELS:
        if status.level < level:
            continue
        try:
            with transaction.atomic():
                _, created = BudgetNotice.objects.get_or_create(
                    tenant=tenant, month=month, level=level, defaults={"spent": status.spent, "budget": status.budget}
                )
        except IntegrityError:  # a concurrent sweep recorded it first: it sends the message
            created = False
        if created:
            new.append(level)
    if not new:
        return None
    level = max(new)
    subject = f"{level} % of the monthly budget reached"
    body = banner(tenant, status) + f"\n\nMonth: {month:%Y-%m}. Budget: {status.budget:.2f}; spent: {status.spent:.2f}."
    sent = notify_tenant_admins(tenant, subject=subject, body=body)
    BudgetNotice.objects.filter(tenant=tenant, month=month, level=level).update(sent=sent)
    return level


def _stop(tenant: Tenant, now: datetime, month_start: datetime, status: BudgetStatus) -> int:
    """Hard stop: mark the tenant (once per month) and stop whatever of it still runs."""
    reason = f"Monthly budget spent ({status.spent:.2f} of {status.budget:.2f}); the tenant's policy stops at 100 %."
    with transaction.atomic():
        marked = Tenant.objects.filter(
            Q(budget_stopped_at__isnull=True) | Q(budget_stopped_at__lt=month_start), pk=tenant.pk
        ).update(budget_stopped_at=now)
        if marked:
            tenant.budget_stopped_at = now
            audit(actor=POLICY, action="tenant.budget_stop", obj=tenant, tenant=tenant, reason=reason)
    stopped = 0
    for dep_id in ModelDeployment.objects.filter(tenant=tenant, state__in=STOPPABLE_BY_POLICY).values_list(
        "pk", flat=True
    ):
        try:
            deployment_policy_stop(deployment_id=dep_id, reason=reason, cause=CAUSE)
            stopped += 1
        except DomainError as error:  # it moved on meanwhile (deleted, stopped by a person)
            log.info("budget stop of deployment %s skipped: %s", dep_id, error)
    return stopped


def _clear(tenant: Tenant) -> bool:
    with transaction.atomic():
        cleared = Tenant.objects.filter(pk=tenant.pk, budget_stopped_at__isnull=False).update(budget_stopped_at=None)
        if cleared:
            tenant.budget_stopped_at = None
            audit(
                actor=POLICY,
                action="tenant.budget_resume",
                obj=tenant,
                tenant=tenant,
                reason="The budget allows again.",
            )
    return bool(cleared)


def budget_sweep(*, now: datetime | None = None) -> dict:
    """Warn, stop and clear by each tenant's budget this month (from the stored ledger)."""
    now = now or timezone.now()
    month = timezone.localdate(now).replace(day=1)
    month_start = timezone.make_aware(datetime(month.year, month.month, 1))
    tenants = list(Tenant.objects.filter(Q(monthly_budget__isnull=False) | Q(budget_stopped_at__isnull=False)))
    totals = tenant_totals(tenants, month)
    out = {"warned": {}, "stopped": {}, "cleared": []}
    for tenant in tenants:
        status = totals[tenant.pk]["budget"]
        if (level := _notice(tenant, month, status)) is not None:
            out["warned"][tenant.slug] = level
        if tenant.budget_hard_stop and status.level >= 100:
            out["stopped"][tenant.slug] = _stop(tenant, now, month_start, status)
        elif tenant.budget_stopped_at is not None and _clear(tenant):
            out["cleared"].append(tenant.slug)
    return out
