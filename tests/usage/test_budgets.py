"""Monthly budgets: warnings at 80 % and 100 % on the tenant's pages and by e-mail, once per level
and month; the hard stop at 100 % stops the tenant's deployments by policy and refuses new
requests, starts and approvals (API 400/409 naming the tenant) until the budget allows again."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import timezone

from core.exceptions import ConflictError
from deployments import services
from deployments.models import ModelDeployment
from deployments.policy_actions import deployment_policy_start
from quotas.policy import budget_block_reason
from tests.support.factories import api_draft, draft
from tests.usage.test_api import month_row
from usage.budgets import budget_sweep
from usage.models import BudgetNotice, UsageMonth


def this_month():
    return timezone.localdate().replace(day=1)


@pytest.fixture
def spender(world):
    """alpha with a tenant admin who reads mail and one approved (running) deployment."""
    admin = world.users["tenant_admin"]
    admin.email = "alpha-admin@example.com"
    admin.save()
    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, max_replicas=1))
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )
    return dep


def spend(dep: ModelDeployment, cost: str) -> None:
    UsageMonth.objects.filter(deployment=dep, month=this_month()).delete()
    month_row(dep, this_month(), cost=Decimal(cost))


def set_budget(tenant, budget: str | None, hard_stop: bool = False) -> None:
    tenant.monthly_budget = None if budget is None else Decimal(budget)
    tenant.budget_hard_stop = hard_stop
    tenant.save()


class TestWarnings:
    def test_80_then_100_percent_each_mailed_once_per_month(self, world, spender):
        set_budget(world.alpha, "100")
        spend(spender, "79.99")
        assert budget_sweep()["warned"] == {}
        spend(spender, "85")
        assert budget_sweep()["warned"] == {"alpha": 80}
        assert budget_sweep()["warned"] == {}  # the second sweep sends nothing
        assert len(mail.outbox) == 1
        assert mail.outbox[0].to == ["alpha-admin@example.com"]
        assert "80 % of the monthly budget" in mail.outbox[0].subject
        assert "85.00 of 100.00" in mail.outbox[0].body
        spend(spender, "100")
        assert budget_sweep()["warned"] == {"alpha": 100}
        budget_sweep()
        assert [m.subject.split(": ", 1)[1] for m in mail.outbox] == [
            "80 % of the monthly budget reached",
            "100 % of the monthly budget reached",
        ]
        assert not ModelDeployment.objects.get(pk=spender.pk).state == "stopped"  # no hard stop: it runs on

    def test_jumping_past_100_sends_one_message_and_records_both_levels(self, world, spender):
        set_budget(world.alpha, "50")
        spend(spender, "120")
        budget_sweep()
        assert len(mail.outbox) == 1 and "100 %" in mail.outbox[0].subject
        assert sorted(BudgetNotice.objects.values_list("level", flat=True)) == [80, 100]

    def test_the_banner_shows_on_the_overview_and_the_usage_page(self, world, spender):
        set_budget(world.alpha, "100")
        spend(spender, "90")
        for path in ("/", "/usage/"):
            text = world.browser("viewer").get(path).content.decode()
            assert "Team Alpha has used 90 % of its monthly budget (90.00 of 100.00)." in text, path
        assert "Team Alpha has used" not in world.browser("other_member").get("/").content.decode()

    def test_the_overview_shows_the_ledgers_reserved_and_serving_hours(self, world, spender):
        spend(spender, "39")  # 10 reserved, 5 serving GPU-hours (month_row's defaults)
        text = world.browser("member").get("/").content.decode()
        assert "10.0 reserved GPU-hours this month</a> (5.0 serving) · $39.00" in text


class TestHardStop:
    def test_at_100_percent_deployments_stop_and_gpus_are_refused_until_the_budget_allows(self, world, spender):
        set_budget(world.alpha, "50", hard_stop=True)
        spend(spender, "60")
        pending = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="later", max_replicas=1)
        )
        assert budget_sweep()["stopped"] == {"alpha": 1}
        spender.refresh_from_db()
        world.alpha.refresh_from_db()
        assert (spender.state, spender.reserved_gpus) == ("stopped", 0)
        assert spender.events.filter(reason="BudgetStopped").exists()
        assert world.alpha.budget_stopped_at is not None
        member, admin = world.client("member"), world.client("platform_admin")

        started = member.post(f"/api/v1/deployments/{spender.pk}/start/")
        assert started.status_code == 409
        assert "spent its monthly budget" in started.json()["tenant"][0]
        approved = admin.post(f"/api/v1/deployments/{pending.pk}/approve/", {"revision": pending.proposed_number})
        assert approved.status_code == 409 and approved.json()["code"] == "budget_stopped"
        created = member.post("/api/v1/deployments/", api_draft(world, name="new-one", max_replicas=1))
        assert created.status_code == 400 and "spent its monthly budget" in created.json()["tenant"][0]
        with pytest.raises(ConflictError):
            deployment_policy_start(deployment_id=spender.pk, reason="schedule", cause="ScheduleStarted")
        assert "The hard stop is on" in world.browser("member").get("/usage/").content.decode()

        set_budget(world.alpha, "200", hard_stop=True)  # a higher budget: the next sweep clears the stop
        assert budget_sweep()["cleared"] == ["alpha"]
        assert member.post(f"/api/v1/deployments/{spender.pk}/start/").status_code == 200

    def test_the_stop_ends_with_the_month_or_the_hard_stop_turned_off(self, world, spender):
        set_budget(world.alpha, "50", hard_stop=True)
        world.alpha.budget_stopped_at = timezone.now()
        world.alpha.save()
        assert budget_block_reason(world.alpha)
        assert budget_block_reason(world.alpha, now=timezone.now() + timedelta(days=32)) == ""
        world.alpha.budget_hard_stop = False
        assert budget_block_reason(world.alpha) == ""

    def test_a_stop_from_last_month_is_renewed_when_this_month_is_spent_too(self, world, spender):
        set_budget(world.alpha, "50", hard_stop=True)
        world.alpha.budget_stopped_at = timezone.now() - timedelta(days=40)
        world.alpha.save()
        spend(spender, "60")
        budget_sweep()
        world.alpha.refresh_from_db()
        assert world.alpha.budget_stopped_at > timezone.now() - timedelta(minutes=1)
        assert ModelDeployment.objects.get(pk=spender.pk).state == "stopped"


class TestTask:
    def test_the_beat_task_refreshes_the_ledger_then_applies_the_budget(self, world, spender):
        from quotas.models import QuotaReservation
        from usage.tasks import refresh_usage_task

        # The spender's reservation has been held since the month began (at least a little while).
        start = timezone.make_aware(timezone.datetime.combine(this_month(), timezone.datetime.min.time()))
        QuotaReservation.objects.filter(owner_id=spender.pk).update(created=start)
        set_budget(world.alpha, "0.00", hard_stop=True)  # any spend reaches a budget of 0
        result = refresh_usage_task.apply().get()
        assert result["written"][this_month().isoformat()] == 1  # (and last month's on the 1st: nothing)
        assert result["budgets"]["stopped"] == {"alpha": 1}
        assert UsageMonth.objects.get(deployment=spender, month=this_month()).reserved_gpu_hours > 0
        assert ModelDeployment.objects.get(pk=spender.pk).state == "stopped"

    def test_on_the_first_of_a_month_the_previous_month_is_refreshed_too(self):
        from datetime import UTC, date, datetime

        from usage.rollup import months_to_refresh

        assert months_to_refresh(datetime(2026, 12, 1, 8, tzinfo=UTC)) == [date(2026, 11, 1), date(2026, 12, 1)]
        assert months_to_refresh(datetime(2026, 12, 2, 8, tzinfo=UTC)) == [date(2026, 12, 1)]
