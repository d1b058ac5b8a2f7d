"""The idle policy over hand-set metric points and a clock passed in (`now=`): warn once, then
stop and release the GPUs; never on time the portal did not watch."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.db import close_old_connections, connection
from django.utils import timezone

from core.models import AuditEvent
from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from metrics.models import Resolution
from quotas.models import TenantQuota
from reclaim.idle import IDLE_STOPPED, IDLE_WARNING, idle_candidates, idle_check, idle_clock, idle_sweep, plan_for
from tests.reclaim.support import give_emails, points, serving

H = timedelta(hours=1)


def policy(tenant, *, warn: int = 0, stop: int = 0) -> None:
    tenant.idle_warn_hours, tenant.idle_stop_hours = warn, stop
    tenant.save(update_fields=["idle_warn_hours", "idle_stop_hours"])


def reserved(world) -> int:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus


def pin_warning(dep, now) -> None:
    """Events take the real time; the tests' clock is `now` (passed in): move the warning there."""
    DeploymentEvent.objects.filter(deployment=dep, reason=IDLE_WARNING).update(created=now)


@pytest.fixture
def now():
    return timezone.now().replace(microsecond=0)


class TestWarnThenStop:
    def test_it_warns_once_then_stops_and_releases_the_gpus(self, world, now, django_capture_on_commit_callbacks):
        give_emails(world)
        policy(world.alpha, warn=6, stop=8)
        dep = serving(world, since=now - 12 * H)
        points(dep, start=now - 12 * H, end=now, tokens_until=now - 7 * H)
        assert reserved(world) == 2

        with django_capture_on_commit_callbacks(execute=True):
            assert idle_check(dep.pk, now=now) == "warn"
        pin_warning(dep, now)
        warning = DeploymentEvent.objects.get(deployment=dep, reason=IDLE_WARNING)
        assert warning.type == "Warning"
        # Warned an hour late (7 h idle): the stop still comes the promised 8 - 6 = 2 h later.
        assert "No tokens generated for 7.0 h" in warning.message and "(in 2.0 h)" in warning.message
        assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alpha-admin@example.com"]
        assert "chat is idle" in mail.outbox[0].subject
        assert AuditEvent.objects.filter(action="deployment.idle_warning", actor_name="policy").count() == 1

        assert idle_check(dep.pk, now=now + 1.5 * H) == "none"  # warned once per idle stretch
        assert DeploymentEvent.objects.filter(deployment=dep, reason=IDLE_WARNING).count() == 1

        later = now + 2 * H
        points(dep, start=now + timedelta(minutes=1), end=later)
        with django_capture_on_commit_callbacks(execute=True):
            assert idle_check(dep.pk, now=later) == "stop"
        dep.refresh_from_db()
        assert dep.state == State.STOPPED and dep.reserved_gpus == 0
        assert reserved(world) == 0  # released at once, not when the workload is gone
        stop = dep.events.get(reason=IDLE_STOPPED)
        assert stop.type == "Warning" and stop.actor is None and "stops deployments after 8 h" in stop.message
        entry = AuditEvent.objects.get(action="deployment.stop", actor_name="policy")
        assert entry.changes == {"released_gpus": 2, "cause": IDLE_STOPPED}
        assert len(mail.outbox) == 2 and "was stopped (idle)" in mail.outbox[1].subject
        assert idle_check(dep.pk, now=later) == "none"  # stopped: nothing more to do

    def test_a_late_warning_still_gives_the_promised_notice(self, world, now):
        policy(world.alpha, warn=6, stop=8)
        dep = serving(world, since=now - 30 * H)
        points(dep, start=now - 30 * H, end=now, step=timedelta(minutes=10))
        # Idle for 30 h (the sweep did not run): warn now, stop two hours later, not at once.
        assert idle_check(dep.pk, now=now) == "warn"
        pin_warning(dep, now)
        plan = plan_for(ModelDeployment.objects.get(pk=dep.pk), now=now)
        assert plan.stop_at == now + 2 * H
        points(dep, start=now + timedelta(minutes=10), end=now + 2 * H, step=timedelta(minutes=10))
        assert idle_check(dep.pk, now=now + 1.9 * H) == "none"
        assert idle_check(dep.pk, now=now + 2 * H) == "stop"

    def test_stop_without_a_warning_and_warning_without_a_stop(self, world, now):
        policy(world.alpha, stop=2)
        quiet = serving(world, since=now - 3 * H)
        points(quiet, start=now - 3 * H, end=now)
        assert idle_check(quiet.pk, now=now) == "stop"
        assert not DeploymentEvent.objects.filter(reason=IDLE_WARNING).exists()

        policy(world.alpha, warn=2)
        other = serving(world, name="other", since=now - 3 * H)
        points(other, start=now - 3 * H, end=now)
        assert idle_check(other.pk, now=now) == "warn"
        assert idle_check(other.pk, now=now + 24 * H) == "none"  # fresh or not, never a stop
        assert ModelDeployment.objects.get(pk=other.pk).state == State.READY


class TestTheClock:
    def test_generated_tokens_reset_the_clock(self, world, now):
        policy(world.alpha, warn=1, stop=2)
        dep = serving(world, since=now - 12 * H)
        points(dep, start=now - 12 * H, end=now, tokens_until=now - timedelta(minutes=30))
        assert idle_clock(dep.pk, now=now).idle_since == now - timedelta(minutes=30)
        assert idle_check(dep.pk, now=now) == "none"

    def test_a_pooling_deployment_is_busy_while_it_processes_prompts(self, world, now):
        """An embedding engine generates no token ever: prompt tokens are its work (runtime.tasks)."""
        policy(world.alpha, warn=1, stop=2)
        dep = serving(world, since=now - 12 * H, task="embedding")
        points(dep, start=now - 12 * H, end=now, tokens_until=now - timedelta(minutes=30), pooling=True)
        assert idle_clock(dep.pk, now=now, task="embedding").idle_since == now - timedelta(minutes=30)
        assert idle_check(dep.pk, now=now) == "none"
        points(dep, start=now + timedelta(minutes=1), end=now + 3 * H, pooling=True)
        assert idle_check(dep.pk, now=now + 3 * H) == "warn"  # idle once they stop coming: warned first

    def test_a_deployment_never_scraped_is_never_stopped(self, world, now):
        policy(world.alpha, stop=1)
        dep = serving(world, since=now - 48 * H)
        assert idle_clock(dep.pk, now=now).idle_since is None
        assert idle_sweep(now=now) == {"warn": 0, "stop": 0, "none": 1}

    def test_after_a_restart_it_waits_for_a_scrape_across_the_gap(self, world, now):
        """The portal was down for 9 h: the old points end 9 h ago. No judgement until a fresh
        point with a rate arrives; that point's rate covers the gap (counters read across it)."""
        policy(world.alpha, stop=8)
        dep = serving(world, since=now - 20 * H)
        points(dep, start=now - 20 * H, end=now - 9 * H, tokens_until=now - 10 * H)
        assert idle_check(dep.pk, now=now) == "none"
        gap = dep.samples.create(
            ts=now, resolution=Resolution.RAW, interval_s=9 * 3600, generation_tokens_per_s=0.0, running=0.0
        )
        assert idle_check(dep.pk, now=now) == "stop"
        gap.delete()

    def test_tokens_generated_during_the_gap_keep_it_running(self, world, now):
        policy(world.alpha, stop=8)
        dep = serving(world, since=now - 20 * H)
        points(dep, start=now - 20 * H, end=now - 9 * H, tokens_until=now - 10 * H)
        dep.samples.create(ts=now, resolution=Resolution.RAW, interval_s=9 * 3600, generation_tokens_per_s=0.3)
        assert idle_clock(dep.pk, now=now).idle_since == now
        assert idle_check(dep.pk, now=now) == "none"

    def test_hours_nobody_watched_do_not_count(self, world, now):
        """Ready for 12 h, but its metrics could be read only for the last 3 h."""
        policy(world.alpha, stop=8)
        dep = serving(world, since=now - 12 * H)
        points(dep, start=now - 3 * H, end=now)
        assert idle_clock(dep.pk, now=now).idle_since == now - 3 * H
        assert idle_check(dep.pk, now=now) == "none"

    def test_a_start_gives_the_whole_allowance_again(self, world, now):
        policy(world.alpha, stop=8)
        dep = serving(world, since=now - 1 * H)
        points(dep, start=now - 12 * H, end=now, tokens_until=now - 11 * H)  # points of an earlier run
        assert idle_clock(dep.pk, now=now).idle_since == now - 1 * H
        assert idle_check(dep.pk, now=now) == "none"

    def test_rollups_count_to_the_end_of_their_bucket(self, world, now):
        """Raw points are kept for a day: an older last token is found in the rollups, and a
        10-minute bucket with tokens counts as busy until its end."""
        policy(world.alpha, stop=48)
        dep = serving(world, since=now - 80 * H)
        bucket = now - 50 * H - timedelta(minutes=5)
        points(dep, start=now - 80 * H, end=now - 24 * H, step=timedelta(minutes=10), resolution=Resolution.TEN_MINUTES)
        dep.samples.filter(ts__gte=bucket - timedelta(minutes=30), ts__lte=bucket).update(generation_tokens_per_s=5.0)
        last = dep.samples.filter(generation_tokens_per_s__gt=0).latest("ts").ts
        points(dep, start=now - 24 * H + timedelta(minutes=1), end=now)
        assert idle_clock(dep.pk, now=now).last_token_at == last + timedelta(minutes=10)
        assert idle_check(dep.pk, now=last + timedelta(minutes=10) + 48 * H - timedelta(minutes=1)) == "none"
        assert idle_check(dep.pk, now=now) == "stop"


class TestWho:
    def test_only_serving_deployments_of_tenants_with_a_policy(self, world, now):
        dep = serving(world, since=now - 12 * H)
        points(dep, start=now - 12 * H, end=now)
        assert idle_candidates() == []  # no policy: the advice only advises
        policy(world.alpha, stop=4)
        assert idle_candidates() == [dep.pk]
        ModelDeployment.objects.filter(pk=dep.pk).update(state=State.FAILED)
        assert idle_candidates() == [] and idle_check(dep.pk, now=now) == "none"

    def test_an_archived_tenant_is_left_alone(self, world, now):
        policy(world.alpha, stop=1)
        dep = serving(world, since=now - 12 * H)
        points(dep, start=now - 12 * H, end=now)
        type(world.alpha).objects.filter(pk=world.alpha.pk).update(archived_at=now)
        assert idle_check(dep.pk, now=now) == "none"


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_warn_once(tx_world):
    now = timezone.now()
    policy(tx_world.alpha, warn=1, stop=5)
    dep = serving(tx_world, since=now - 6 * H)
    points(dep, start=now - 6 * H, end=now)
    results, barrier = [], threading.Barrier(2)

    def sweep():
        try:
            barrier.wait()
            results.append(idle_check(dep.pk, now=now))
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["none", "warn"]
    assert DeploymentEvent.objects.filter(deployment=dep, reason=IDLE_WARNING).count() == 1


class TestCost:
    def test_a_check_reads_the_same_few_queries_however_many_points(self, world, now, django_assert_num_queries):
        """Each of the clock's reads stops at its first row (indexed by deployment, resolution,
        time): a deployment with a day of 15 s points costs what one with an hour does."""
        policy(world.alpha, stop=48)
        small = serving(world, name="small", since=now - 30 * H)
        big = serving(world, name="big", since=now - 30 * H)
        points(small, start=now - 1 * H, end=now)
        points(big, start=now - 24 * H, end=now, step=timedelta(seconds=15))
        for dep in (small, big):
            with django_assert_num_queries(12):
                assert idle_check(dep.pk, now=now) == "none"
