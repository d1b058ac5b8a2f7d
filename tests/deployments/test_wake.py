"""Wake on request (issue 35), the service: a request wakes only what the idle policy or the
serving schedule stopped (the latest stop on the timeline decides), through the quota and budget
checks, audited as the policy with the key; anything else is refused with a code, and a refusal
is written to the timeline once a minute at most. Two wakes at once start it once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from core.models import AuditEvent
from deployments import services
from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.policy_actions import IDLE_STOPPED, SCHEDULE_STOPPED, deployment_policy_stop
from deployments.wake import RETRY_AFTER, WAKE_REFUSED, WOKEN, Wake, deployment_wake, wakeable
from quotas.models import Tenant, TenantQuota
from reclaim.schedules import schedule_sweep
from tests.reclaim.support import serving
from tests.support.factories import draft
from usage.budgets import CAUSE as BUDGET_STOPPED

OFFICE = "mon-fri 08:00-20:00"
MONDAY_NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
MONDAY_NIGHT = datetime(2026, 12, 7, 21, 0, tzinfo=UTC)
TUESDAY_OPENS = datetime(2026, 12, 8, 8, 0, tzinfo=UTC)
KEY_ID = 4242


def reserved(world) -> int:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus


def fresh(dep) -> ModelDeployment:
    return ModelDeployment.objects.get(pk=dep.pk)


def wake(dep, now: datetime | None = None) -> Wake:
    return deployment_wake(deployment_id=dep.pk, key_id=KEY_ID, key_name="client", now=now)


def idle_stopped(world, name: str = "chat") -> ModelDeployment:
    dep = serving(world, name=name, since=timezone.now() - timedelta(hours=3))
    deployment_policy_stop(deployment_id=dep.pk, reason="Idle for 8 h.", cause=IDLE_STOPPED)
    return fresh(dep)


def refusals(dep) -> int:
    return DeploymentEvent.objects.filter(deployment=dep, reason=WAKE_REFUSED).count()


def nothing_started(world, dep, *, held: int = 0) -> None:
    """The refused wake changed nothing but (perhaps) the timeline's refusal."""
    dep = fresh(dep)
    assert dep.state == State.STOPPED and dep.reserved_gpus == 0
    assert reserved(world) == held
    assert not DeploymentEvent.objects.filter(deployment=dep, reason=WOKEN).exists()
    assert not AuditEvent.objects.filter(action="deployment.start", object_id=str(dep.pk), actor_name="policy").exists()


class TestWakes:
    def test_an_idle_stopped_deployment_wakes_with_its_gpus_and_the_key_in_the_audit(self, world):
        dep = idle_stopped(world)
        assert reserved(world) == 0 and wakeable(dep)

        assert wake(dep) == Wake("woken", State.APPROVED)
        dep = fresh(dep)
        assert dep.state == State.APPROVED and dep.reserved_gpus == dep.gpus_needed == 2
        assert reserved(world) == 2
        event = DeploymentEvent.objects.get(deployment=dep, reason=WOKEN)
        assert (event.from_state, event.to_state, event.actor) == (State.STOPPED, State.APPROVED, None)
        assert "API key 'client' (id 4242)" in event.message
        entry = AuditEvent.objects.get(action="deployment.start", object_id=str(dep.pk))
        assert entry.actor_name == "policy" and entry.actor is None
        assert entry.changes == {"reserved_gpus": 2, "cause": WOKEN, "key_id": KEY_ID}
        assert refusals(dep) == 0
        assert not wakeable(dep)  # running now

    def test_what_a_person_started_and_the_idle_policy_stopped_again_is_wakeable(self, world):
        dep = serving(world, since=timezone.now() - timedelta(hours=3))
        member = world.users["member"]
        services.deployment_stop(deployment_id=dep.pk, user=member)
        services.deployment_start(deployment_id=dep.pk, user=member)
        deployment_policy_stop(deployment_id=dep.pk, reason="idle", cause=IDLE_STOPPED)

        assert wake(dep).outcome == "woken"
        assert fresh(dep).state == State.APPROVED and reserved(world) == 2

    def test_the_schedule_stopped_one_wakes_while_the_schedule_is_open(self, world):
        dep = serving(world, since=MONDAY_NOON)
        deployment_policy_stop(deployment_id=dep.pk, reason="closed", cause=SCHEDULE_STOPPED)  # no schedule now
        assert wake(dep, now=MONDAY_NIGHT).outcome == "woken"
        assert fresh(dep).state == State.APPROVED and reserved(world) == 2


class TestRefusals:
    def test_schedule_stopped_while_closed_is_refused_until_it_opens_and_nothing_changes(self, world):
        world.alpha.serving_schedule = OFFICE
        world.alpha.save(update_fields=["serving_schedule"])
        dep = serving(world, since=MONDAY_NOON - timedelta(hours=2))
        assert schedule_sweep(now=MONDAY_NIGHT)["stopped"] == 1
        dep = fresh(dep)
        assert wakeable(dep)

        refused = wake(dep, now=MONDAY_NIGHT)
        assert refused.refused and refused.code == "schedule_closed" and refused.state == State.STOPPED
        assert refused.retry_after == int((TUESDAY_OPENS - MONDAY_NIGHT).total_seconds()) == 11 * 3600 > 0
        assert OFFICE in refused.message
        nothing_started(world, dep)
        assert refusals(dep) == 1
        warning = DeploymentEvent.objects.get(deployment=dep, reason=WAKE_REFUSED)
        assert warning.type == "Warning" and warning.to_state == "" and OFFICE in warning.message

        # Once the window opens (the sweep did not run yet), the next request wakes it.
        assert wake(dep, now=TUESDAY_OPENS + timedelta(minutes=5)).outcome == "woken"

    def test_a_persons_stop_is_not_wakeable(self, world):
        dep = serving(world, since=timezone.now() - timedelta(hours=3))
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        assert not wakeable(fresh(dep))

        refused = wake(dep)
        assert (refused.outcome, refused.code, refused.retry_after) == ("refused", "not_wakeable", RETRY_AFTER)
        assert "a person stopped it" in refused.message
        nothing_started(world, dep)

    def test_a_persons_later_stop_wins_over_the_policys(self, world):
        dep = idle_stopped(world)
        member = world.users["member"]
        services.deployment_start(deployment_id=dep.pk, user=member)
        services.deployment_stop(deployment_id=dep.pk, user=member)
        assert wake(dep).code == "not_wakeable"
        nothing_started(world, dep)

    def test_a_budget_stopped_deployment_is_not_woken(self, world):
        dep = serving(world, since=timezone.now() - timedelta(hours=3))
        deployment_policy_stop(deployment_id=dep.pk, reason="budget spent", cause=BUDGET_STOPPED)
        assert wake(dep).code == "not_wakeable"
        nothing_started(world, dep)

    def test_an_idle_stopped_deployment_of_a_tenant_whose_budget_stopped_is_refused(self, world):
        dep = idle_stopped(world)
        Tenant.objects.filter(pk=world.alpha.pk).update(
            monthly_budget=Decimal("100.00"), budget_hard_stop=True, budget_stopped_at=timezone.now()
        )
        refused = wake(dep)
        assert refused.code == "budget_stopped" and refused.retry_after == RETRY_AFTER
        assert "monthly budget" in refused.message
        nothing_started(world, dep)
        assert refusals(dep) == 1

    def test_gpus_another_deployment_took_meanwhile_refuse_the_wake(self, world):
        dep = idle_stopped(world)
        # While it sleeps, a deployment of 11 GPUs takes all but one of alpha's 12 (8 + 4 borrowed).
        big = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="big", max_replicas=11)
        )
        services.deployment_approve(deployment_id=big.pk, approver=world.users["platform_admin"], revision=1)
        assert reserved(world) == 11

        refused = wake(dep)
        assert refused.code == "quota_exceeded" and refused.state == State.STOPPED
        nothing_started(world, dep, held=11)
        assert fresh(big).reserved_gpus == 11
        assert refusals(dep) == 1

    def test_an_archived_tenant_and_a_deleting_deployment_are_refused(self, world):
        dep = idle_stopped(world)
        Tenant.objects.filter(pk=world.alpha.pk).update(archived_at=timezone.now())
        assert wake(dep).code == "archived"
        nothing_started(world, dep)

        ModelDeployment.objects.filter(pk=dep.pk).update(state=State.DELETING)
        assert wake(dep) == Wake("refused", State.DELETING, "gone", "The deployment was deleted.", RETRY_AFTER)
        nothing_started_at_all = deployment_wake(deployment_id=10**9, key_id=None, key_name="", now=None)
        assert (nothing_started_at_all.code, nothing_started_at_all.state) == ("gone", State.DELETED)

    def test_a_failed_or_pending_deployment_is_not_wakeable(self, world):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        refused = wake(dep)
        assert refused.code == "not_wakeable" and refused.state == State.PENDING_APPROVAL
        assert fresh(dep).state == State.PENDING_APPROVAL and reserved(world) == 0

        ModelDeployment.objects.filter(pk=dep.pk).update(state=State.FAILED)
        refused = wake(dep)
        assert refused.code == "not_wakeable" and "it is failed" in refused.message
        assert fresh(dep).state == State.FAILED and reserved(world) == 0


class TestRunning:
    @pytest.mark.parametrize(
        ("state", "outcome"),
        [
            (State.APPROVED, "starting"),
            (State.QUEUED, "starting"),
            (State.PROVISIONING, "starting"),
            (State.READY, "serving"),
            (State.DEGRADED, "serving"),
        ],
    )
    def test_a_running_deployment_is_left_as_it_is(self, world, state, outcome):
        dep = serving(world, since=timezone.now() - timedelta(hours=1))
        ModelDeployment.objects.filter(pk=dep.pk).update(state=state)
        events = DeploymentEvent.objects.filter(deployment=dep).count()
        audits = AuditEvent.objects.count()

        assert wake(dep) == Wake(outcome, state)
        assert DeploymentEvent.objects.filter(deployment=dep).count() == events
        assert AuditEvent.objects.count() == audits
        assert fresh(dep).state == state and reserved(world) == 2


class TestRefusalEvents:
    def test_three_refusals_within_a_minute_write_one_event_and_a_later_one_another(self, world):
        dep = serving(world, since=timezone.now() - timedelta(hours=3))
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        for _ in range(3):
            assert wake(dep).code == "not_wakeable"
        assert refusals(dep) == 1

        DeploymentEvent.objects.filter(deployment=dep, reason=WAKE_REFUSED).update(
            created=timezone.now() - timedelta(seconds=61)
        )
        assert wake(dep).code == "not_wakeable"
        assert refusals(dep) == 2

    def test_the_tests_clock_does_not_defeat_the_once_a_minute_rule(self, world):
        """`now` passed in (a closed schedule a day ahead) decides the schedule; the refusals
        themselves are stamped with the real time, and counted against it."""
        world.alpha.serving_schedule = OFFICE
        world.alpha.save(update_fields=["serving_schedule"])
        dep = serving(world, since=MONDAY_NOON)
        deployment_policy_stop(deployment_id=dep.pk, reason="closed", cause=SCHEDULE_STOPPED)
        later = timezone.now() + timedelta(days=1)
        closed = later.replace(hour=22)  # 22:00 is outside 08:00-20:00 on any day
        for _ in range(3):
            assert wake(dep, now=closed).code == "schedule_closed"
        assert refusals(dep) == 1


@pytest.mark.django_db(transaction=True)
def test_two_wakes_at_once_start_it_exactly_once(tx_world):
    dep = idle_stopped(tx_world)
    results: list[Wake] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def call():
        try:
            barrier.wait()
            results.append(wake(dep))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert sorted(w.outcome for w in results) == ["starting", "woken"]
    dep = fresh(dep)
    assert dep.state == State.APPROVED and dep.reserved_gpus == dep.gpus_needed == 2
    assert reserved(tx_world) == 2
    assert DeploymentEvent.objects.filter(deployment=dep, reason=WOKEN).count() == 1
    assert AuditEvent.objects.filter(action="deployment.start", object_id=str(dep.pk)).count() == 1
    assert refusals(dep) == 0


class TestEndpointPanel:
    """The Endpoint panel says a request wakes it only where an activator stands in front of it."""

    def test_a_local_idle_stopped_deployment_says_a_request_wakes_it(self, world, settings):
        from deployments.endpoint import serving_notice
        from deployments.states import Actor

        dep = idle_stopped(world)
        ModelDeployment.objects.filter(pk=dep.pk).update(backend="local")
        settings.LOCAL_GATEWAY, settings.LOCAL_GATEWAY_PORTAL_URL = True, "http://127.0.0.1:8000"
        world.alpha.wake_timeout_seconds = 90
        world.alpha.save()
        again = serving_notice(fresh(dep), Actor.MEMBER)["again"]
        assert again.startswith("A request to its endpoint wakes it: the first one waits while it starts (up to 90 s")

        settings.LOCAL_GATEWAY_PORTAL_URL = None  # no activator: only a person starts it
        assert not serving_notice(fresh(dep), Actor.MEMBER)["again"].startswith("A request")
        settings.LOCAL_GATEWAY_PORTAL_URL = "http://127.0.0.1:8000"
        ModelDeployment.objects.filter(pk=dep.pk).update(backend="kuberay")  # the cluster's is not built yet
        assert not serving_notice(fresh(dep), Actor.MEMBER)["again"].startswith("A request")
