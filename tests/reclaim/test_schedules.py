"""Serving schedules with a clock passed in (`now=`): stop outside the window, start what the
schedule stopped (only that) when it opens, one try per window when the quota refuses."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.db import close_old_connections, connection

from core.models import AuditEvent
from deployments import services
from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.policy_actions import deployment_policy_stop
from deployments.reconcile import Result, reconcile
from quotas.models import TenantQuota
from reclaim.schedules import SCHEDULE_STARTED, SCHEDULE_STOPPED, START_FAILED, schedule_sweep
from tests.reclaim.support import give_emails, serving
from tests.support.factories import draft

OFFICE = "mon-fri 08:00-20:00"
MONDAY_NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
MONDAY_NIGHT = datetime(2026, 12, 7, 21, 0, tzinfo=UTC)
TUESDAY_NOON = MONDAY_NOON + timedelta(days=1)


def schedule(tenant, text: str) -> None:
    tenant.serving_schedule = text
    tenant.save(update_fields=["serving_schedule"])


def state(dep) -> str:
    return ModelDeployment.objects.get(pk=dep.pk).state


def reserved(world) -> int:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus


class TestStopAndStart:
    def test_closed_stops_and_releases_then_open_starts_again(self, world):
        schedule(world.alpha, OFFICE)
        dep = serving(world, since=MONDAY_NOON - timedelta(hours=2))
        other_tenant = services.deployment_create(
            tenant=world.beta, user=world.users["other_member"], data=draft(world, name="beta-chat")
        )
        assert schedule_sweep(now=MONDAY_NOON) == {"stopped": 0, "started": 0, "failed": 0}

        assert schedule_sweep(now=MONDAY_NIGHT) == {"stopped": 1, "started": 0, "failed": 0}
        assert state(dep) == State.STOPPED and reserved(world) == 0
        event = DeploymentEvent.objects.get(deployment=dep, reason=SCHEDULE_STOPPED)
        assert "mon-fri 08:00-20:00" in event.message and "closed until Tue 08:00 (UTC)" in event.message
        assert AuditEvent.objects.get(action="deployment.stop").actor_name == "policy"
        assert schedule_sweep(now=MONDAY_NIGHT) == {"stopped": 0, "started": 0, "failed": 0}  # idempotent
        assert state(other_tenant) == State.PENDING_APPROVAL  # beta has no schedule

        assert schedule_sweep(now=TUESDAY_NOON) == {"stopped": 0, "started": 1, "failed": 0}
        assert state(dep) == State.APPROVED and reserved(world) == 2  # re-reserved by the normal checks
        assert DeploymentEvent.objects.filter(deployment=dep, reason=SCHEDULE_STARTED).count() == 1
        assert AuditEvent.objects.get(action="deployment.start").changes["cause"] == SCHEDULE_STARTED
        assert schedule_sweep(now=TUESDAY_NOON) == {"stopped": 0, "started": 0, "failed": 0}

    def test_only_what_the_schedule_stopped_is_started(self, world):
        schedule(world.alpha, OFFICE)
        by_schedule = serving(world, name="a", since=MONDAY_NOON)
        by_person = serving(world, name="b", since=MONDAY_NOON)
        by_idle = serving(world, name="c", since=MONDAY_NOON)
        touched = serving(world, name="d", since=MONDAY_NOON)
        services.deployment_stop(deployment_id=by_person.pk, user=world.users["member"])
        deployment_policy_stop(deployment_id=by_idle.pk, reason="idle", cause="IdleStopped")
        schedule_sweep(now=MONDAY_NIGHT)
        # A person started "d" at night, then stopped it again: the last stop is theirs.
        services.deployment_start(deployment_id=touched.pk, user=world.users["member"])
        services.deployment_stop(deployment_id=touched.pk, user=world.users["member"])

        assert schedule_sweep(now=TUESDAY_NOON)["started"] == 1
        assert [state(d) for d in (by_schedule, by_person, by_idle, touched)] == [
            State.APPROVED,
            State.STOPPED,
            State.STOPPED,
            State.STOPPED,
        ]

    def test_a_start_outside_the_window_is_stopped_again(self, world):
        schedule(world.alpha, OFFICE)
        dep = serving(world, since=MONDAY_NOON)
        schedule_sweep(now=MONDAY_NIGHT)
        services.deployment_start(deployment_id=dep.pk, user=world.users["member"])
        assert schedule_sweep(now=MONDAY_NIGHT)["stopped"] == 1
        assert DeploymentEvent.objects.filter(deployment=dep, reason=SCHEDULE_STOPPED).count() == 2

    def test_clearing_the_schedule_starts_what_it_stopped(self, world):
        schedule(world.alpha, OFFICE)
        dep = serving(world, since=MONDAY_NOON)
        schedule_sweep(now=MONDAY_NIGHT)
        schedule(world.alpha, "")
        assert schedule_sweep(now=MONDAY_NIGHT)["started"] == 1 and state(dep) == State.APPROVED

    def test_an_archived_tenant_and_an_unreadable_stored_schedule_are_left_alone(self, world):
        dep = serving(world, since=MONDAY_NOON)
        schedule(world.alpha, "whenever")  # only a hand edit gets past the policy service
        assert schedule_sweep(now=MONDAY_NIGHT)["stopped"] == 0
        schedule(world.alpha, OFFICE)
        type(world.alpha).objects.filter(pk=world.alpha.pk).update(archived_at=MONDAY_NOON)
        assert schedule_sweep(now=MONDAY_NIGHT)["stopped"] == 0 and state(dep) == State.READY


class TestLateReconcile:
    def test_a_late_reconcile_of_the_stopped_run_keeps_the_new_starts_gpus(self, world, cluster_api):
        """The reconciler read the deployment stopped and tears its workload down after the
        schedule started it again: the reconciler never touches GPUs (the services settle them
        with the state), so the new reservation stays."""
        schedule(world.alpha, OFFICE)
        dep = serving(world, since=MONDAY_NOON)
        schedule_sweep(now=MONDAY_NIGHT)
        assert reserved(world) == 0  # released by the stop itself, before any reconcile
        stale = ModelDeployment.objects.select_related("tenant", "flavor").get(pk=dep.pk)
        schedule_sweep(now=TUESDAY_NOON)
        assert reconcile(stale) == Result("removed")
        assert reserved(world) == 2 and ModelDeployment.objects.get(pk=dep.pk).reserved_gpus == 2
        assert state(dep) == State.APPROVED


class TestRefusedStart:
    def test_a_full_quota_is_recorded_told_and_tried_once_per_window(self, world, django_capture_on_commit_callbacks):
        give_emails(world)
        schedule(world.alpha, OFFICE)
        dep = serving(world, since=MONDAY_NOON)
        schedule_sweep(now=MONDAY_NIGHT)
        # Overnight someone else takes the GPUs: 8 nominal + 4 borrowing, 12 reserved.
        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(reserved_gpus=12)

        with django_capture_on_commit_callbacks(execute=True):
            assert schedule_sweep(now=TUESDAY_NOON) == {"stopped": 0, "started": 0, "failed": 1}
        failure = DeploymentEvent.objects.get(deployment=dep, reason=START_FAILED)
        assert failure.type == "Warning" and "Does not fit" in failure.message
        assert "next window" in failure.message
        assert state(dep) == State.STOPPED and dep.events.filter(reason=SCHEDULE_STARTED).count() == 0
        assert len(mail.outbox) == 1 and "could not be started" in mail.outbox[0].subject
        DeploymentEvent.objects.filter(reason=START_FAILED).update(created=TUESDAY_NOON)  # the tests' clock

        # The rest of the window: no retry, no new event, no new e-mail.
        with django_capture_on_commit_callbacks(execute=True):
            assert schedule_sweep(now=TUESDAY_NOON + timedelta(hours=3)) == {"stopped": 0, "started": 0, "failed": 0}
        assert len(mail.outbox) == 1

        # The next window tries again, and the GPUs are back by then.
        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(reserved_gpus=0)
        assert schedule_sweep(now=TUESDAY_NOON + timedelta(days=1))["started"] == 1
        assert state(dep) == State.APPROVED


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_stop_and_start_each_deployment_once(tx_world):
    schedule(tx_world.alpha, OFFICE)
    deps = [serving(tx_world, name=f"d{i}", since=MONDAY_NOON) for i in range(3)]

    def race(now) -> list[dict]:
        results, barrier = [], threading.Barrier(2)

        def sweep():
            try:
                barrier.wait()
                results.append(schedule_sweep(now=now))
            finally:
                close_old_connections()
                connection.close()

        threads = [threading.Thread(target=sweep) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    night = race(MONDAY_NIGHT)
    assert sum(r["stopped"] for r in night) == 3
    day = race(TUESDAY_NOON)
    assert sum(r["started"] for r in day) == 3
    for dep in deps:
        assert dep.events.filter(reason=SCHEDULE_STOPPED).count() == 1
        assert dep.events.filter(reason=SCHEDULE_STARTED).count() == 1
    assert TenantQuota.objects.get(tenant=tx_world.alpha, flavor=tx_world.h100).reserved_gpus == 6
