"""Revisions: a change to a deployment is a proposed revision; what serves keeps serving.

One class per service. The deployments run on the world's H100 quota for alpha: 8 nominal plus
4 borrowable (beta lends its unused 8), so 12 GPUs at most.
"""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from core.exceptions import ConflictError, DomainError, Forbidden, QuotaExceeded, TransitionError
from core.models import AuditEvent
from deployments import services
from deployments.choices import RevisionStatus as R
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.policy_actions import deployment_policy_stop
from quotas.models import QuotaReservation, TenantQuota
from tests.support.factories import draft


def reserved(world) -> int:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus


def create(world, **kw) -> ModelDeployment:
    return services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, **kw))


def running(world, **kw) -> ModelDeployment:
    """A deployment approved (revision 1 serving) and observed ready."""
    dep = create(world, **kw)
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    dep.refresh_from_db()
    services.deployment_observe(
        deployment_id=dep.pk, generation=dep.generation, state=State.READY, conditions=[], reason="Ready"
    )
    dep.refresh_from_db()
    return dep


def edit(world, dep, **fields) -> ModelDeployment:
    """A member's change naming only the fields it changes, as the API's PATCH sends it."""
    services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data=fields)
    dep.refresh_from_db()
    return dep


def scale(world, dep, low: int, high: int) -> ModelDeployment:
    services.deployment_scale(deployment_id=dep.pk, user=world.users["member"], min_replicas=low, max_replicas=high)
    dep.refresh_from_db()
    return dep


def approve(world, dep, revision: int) -> ModelDeployment:
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=revision)
    dep.refresh_from_db()
    return dep


def statuses(dep) -> dict[int, str]:
    return dict(dep.revisions.order_by("number").values_list("number", "status"))


def runs(dep) -> tuple:
    """What runs: the state, the GPUs held, the row's spec and its generation."""
    dep.refresh_from_db()
    return dep.state, dep.reserved_gpus, dep.max_replicas, dep.max_model_len, dep.generation


class TestUpdate:
    def test_an_edit_of_a_running_deployment_proposes_and_changes_nothing_that_runs(self, world):
        dep = running(world)
        before = runs(dep)
        edit(world, dep, max_model_len=4096)
        assert runs(dep) == before == (State.READY, 2, 2, 8192, 1)
        assert reserved(world) == 2
        assert statuses(dep) == {1: R.APPROVED, 2: R.PROPOSED}
        assert dep.serving_revision.number == 1 and dep.proposed_revision.spec["max_model_len"] == 4096

    def test_a_second_edit_supersedes_the_first_and_builds_on_it(self, world):
        dep = running(world)
        edit(world, dep, max_model_len=4096)
        edit(world, dep, dtype="float16")
        assert statuses(dep) == {1: R.APPROVED, 2: R.SUPERSEDED, 3: R.PROPOSED}
        spec = dep.proposed_revision.spec
        assert (spec["max_model_len"], spec["dtype"]) == (4096, "float16")  # over the proposal, not what serves
        assert runs(dep) == (State.READY, 2, 2, 8192, 1) and dep.dtype == "bfloat16"

    def test_editing_back_to_the_serving_spec_withdraws_the_proposal(self, world):
        dep = running(world)
        edit(world, dep, max_model_len=4096)
        edit(world, dep, max_model_len=8192)
        assert statuses(dep) == {1: R.APPROVED, 2: R.WITHDRAWN}
        assert dep.proposed_number is None and runs(dep) == (State.READY, 2, 2, 8192, 1)

    def test_an_edit_before_the_first_approval_replaces_the_request(self, world):
        dep = create(world)
        edit(world, dep, max_model_len=4096)
        assert statuses(dep) == {1: R.SUPERSEDED, 2: R.PROPOSED}
        assert (dep.state, dep.max_model_len, dep.reserved_gpus) == (State.PENDING_APPROVAL, 4096, 0)

    def test_viewers_cannot_propose(self, world):
        dep = running(world)
        with pytest.raises(Forbidden):
            services.deployment_update(deployment_id=dep.pk, user=world.users["viewer"], data={"max_model_len": 1})
        assert statuses(dep) == {1: R.APPROVED}


class TestApprove:
    def test_approving_a_change_applies_its_spec_and_bumps_the_generation(self, world):
        dep = edit(world, running(world), max_model_len=4096)
        approve(world, dep, dep.proposed_number)
        assert runs(dep) == (State.READY, 2, 2, 4096, 2)
        assert statuses(dep) == {1: R.APPROVED, 2: R.APPROVED} and dep.serving_revision.number == 2
        entry = AuditEvent.objects.get(action="deployment.approve", object_id=str(dep.pk), changes__revision=2)
        assert (entry.actor_name, entry.changes["generation"]) == ("platform-admin", 2)

    def test_a_bigger_revision_reserves_only_the_difference(self, world):
        dep = scale(world, running(world, max_replicas=6), 1, 10)  # 6 + 10 would not fit in 12
        approve(world, dep, 2)
        assert runs(dep) == (State.READY, 10, 10, 8192, 2)
        assert reserved(world) == 10
        held = QuotaReservation.objects.filter(owner_id=dep.pk, released__isnull=True)
        assert list(held.values_list("gpus", flat=True)) == [10]

    def test_a_difference_that_does_not_fit_is_refused_and_nothing_changes(self, world):
        one, two = running(world, name="one"), running(world, name="two")
        scale(world, one, 1, 8)
        approve(world, scale(world, two, 1, 8), 2)  # 2 + 8 of 12 reserved now
        with pytest.raises(QuotaExceeded):
            approve(world, one, 2)
        assert runs(one) == (State.READY, 2, 2, 8192, 1)
        assert statuses(one) == {1: R.APPROVED, 2: R.PROPOSED} and one.serving_revision.number == 1
        assert reserved(world) == 10
        assert not AuditEvent.objects.filter(action="deployment.approve", object_id=str(one.pk), changes__revision=2)

    def test_a_stale_revision_is_a_conflict_and_changes_nothing(self, world):
        dep = scale(world, running(world), 1, 4)
        services.deployment_withdraw(deployment_id=dep.pk, user=world.users["member"], revision=2)
        dep = scale(world, dep, 1, 3)  # revision 3 waits now; the admin reviewed 2
        with pytest.raises(ConflictError) as info:
            approve(world, dep, 2)
        assert (info.value.code, info.value.field) == ("stale_revision", "revision")
        assert runs(dep) == (State.READY, 2, 2, 8192, 1) and reserved(world) == 2
        assert statuses(dep) == {1: R.APPROVED, 2: R.WITHDRAWN, 3: R.PROPOSED}

    def test_an_unknown_revision_is_a_400_on_the_revision(self, world):
        dep = scale(world, running(world), 1, 4)
        with pytest.raises(DomainError) as info:
            approve(world, dep, 99)
        assert (info.value.status_code, info.value.code, info.value.field) == (400, "not_found", "revision")
        assert statuses(dep) == {1: R.APPROVED, 2: R.PROPOSED}

    def test_the_policy_approves_a_change_within_its_ceiling_and_no_more(self, world):
        world.alpha.auto_approve_max_gpus = 4
        world.alpha.save()
        dep = create(world)
        assert dep.state == State.APPROVED  # revision 1 by the policy
        dep = scale(world, dep, 1, 4)
        assert (dep.serving_revision.number, dep.serving_revision.decider, dep.reserved_gpus) == (2, "policy", 4)
        dep = scale(world, dep, 1, 6)
        assert statuses(dep) == {1: R.APPROVED, 2: R.APPROVED, 3: R.PROPOSED} and dep.reserved_gpus == 4

    def test_a_spent_budget_refuses_an_approval_that_grows_gpus(self, world):
        dep = scale(world, running(world), 1, 4)
        world.alpha.monthly_budget = Decimal("100")
        world.alpha.budget_hard_stop = True
        world.alpha.budget_stopped_at = timezone.now()
        world.alpha.save()
        with pytest.raises(ConflictError) as info:
            approve(world, dep, 2)
        assert info.value.code == "budget_stopped"
        assert runs(dep) == (State.READY, 2, 2, 8192, 1) and statuses(dep)[2] == R.PROPOSED


@pytest.mark.django_db(transaction=True)
class TestConcurrentApprovals:
    def test_two_bigger_revisions_that_fit_only_one_at_a_time_one_wins(self, tx_world):
        world = tx_world
        deps = [scale(world, running(world, name=name), 1, 8) for name in ("one", "two")]  # +6 each, 8 free
        outcomes: list[str] = []
        barrier = threading.Barrier(2)

        def decide(dep):
            close_old_connections()
            try:
                barrier.wait(timeout=10)
                services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=2)
                outcomes.append("ok")
            except QuotaExceeded as error:
                outcomes.append(error.code)
            finally:
                connection.close()

        threads = [threading.Thread(target=decide, args=(dep,)) for dep in deps]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(outcomes) == ["ok", "quota_exceeded"]
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        held = QuotaReservation.objects.filter(quota=quota, released__isnull=True)
        assert quota.reserved_gpus == sum(held.values_list("gpus", flat=True)) == 10
        serving = sorted(ModelDeployment.objects.values_list("serving_revision__number", "max_replicas"))
        assert serving == [(1, 2), (2, 8)]


class TestReject:
    def test_rejecting_a_change_leaves_the_serving_revision_running(self, world):
        dep = scale(world, running(world), 1, 4)
        services.deployment_reject(
            deployment_id=dep.pk, approver=world.users["platform_admin"], revision=2, reason="Too many"
        )
        assert runs(dep) == (State.READY, 2, 2, 8192, 1) and reserved(world) == 2
        assert statuses(dep) == {1: R.APPROVED, 2: R.REJECTED}
        assert dep.revisions.get(number=2).decision_reason == "Too many"
        assert dep.events.filter(reason="ChangeRejected").count() == 1

    def test_rejecting_revision_1_is_final(self, world):
        dep = create(world)
        services.deployment_reject(
            deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1, reason="No"
        )
        dep.refresh_from_db()
        assert (dep.state, dep.reserved_gpus, statuses(dep)) == (State.REJECTED, 0, {1: R.REJECTED})
        with pytest.raises(TransitionError):
            scale(world, dep, 1, 1)


class TestWithdraw:
    def test_a_member_withdraws_a_change_and_what_serves_is_untouched(self, world):
        dep = scale(world, running(world), 1, 4)
        services.deployment_withdraw(deployment_id=dep.pk, user=world.users["member"], revision=2)
        assert runs(dep) == (State.READY, 2, 2, 8192, 1)
        assert statuses(dep) == {1: R.APPROVED, 2: R.WITHDRAWN}
        with pytest.raises(ConflictError) as info:
            services.deployment_withdraw(deployment_id=dep.pk, user=world.users["member"], revision=2)
        assert info.value.code == "stale_revision"

    def test_viewers_cannot_withdraw(self, world):
        dep = scale(world, running(world), 1, 4)
        with pytest.raises(Forbidden):
            services.deployment_withdraw(deployment_id=dep.pk, user=world.users["viewer"], revision=2)
        assert statuses(dep)[2] == R.PROPOSED


class TestCancel:
    def test_cancel_ends_a_request_nothing_of_which_was_approved(self, world):
        dep = create(world)
        services.deployment_cancel(deployment_id=dep.pk, user=world.users["member"])
        dep.refresh_from_db()
        assert (dep.state, statuses(dep)) == (State.CANCELLED, {1: R.WITHDRAWN})

    def test_cancel_is_refused_once_something_was_approved(self, world):
        dep = scale(world, running(world), 1, 4)
        with pytest.raises(TransitionError):
            services.deployment_cancel(deployment_id=dep.pk, user=world.users["member"])
        assert runs(dep) == (State.READY, 2, 2, 8192, 1) and statuses(dep)[2] == R.PROPOSED


class TestScale:
    def test_within_the_approval_it_applies_at_once_and_rebases_the_waiting_proposal(self, world):
        dep = edit(world, running(world), max_model_len=4096)
        dep = scale(world, dep, 1, 1)
        assert runs(dep) == (State.READY, 1, 1, 8192, 2) and reserved(world) == 1
        assert statuses(dep) == {1: R.APPROVED, 2: R.SUPERSEDED, 3: R.APPROVED, 4: R.PROPOSED}
        spec = dep.proposed_revision.spec
        assert (spec["max_replicas"], spec["max_model_len"]) == (1, 4096)

    def test_a_rebased_proposal_keeps_its_own_replica_change(self, world):
        dep = edit(world, scale(world, running(world), 1, 3), max_model_len=4096)  # revision 3: 1–3, 4096
        dep = scale(world, dep, 0, 2)  # within what serves: min 0 applies now
        assert (dep.min_replicas, dep.max_replicas, dep.serving_revision.number) == (0, 2, 4)
        spec = dep.proposed_revision.spec
        assert (dep.proposed_number, spec["min_replicas"], spec["max_replicas"], spec["max_model_len"]) == (
            5,
            0,
            3,
            4096,
        )

    def test_beyond_the_approval_while_a_change_waits_is_a_conflict(self, world):
        dep = scale(world, running(world), 1, 3)
        with pytest.raises(ConflictError) as info:
            scale(world, dep, 1, 4)
        assert info.value.code == "change_pending"
        assert statuses(dep) == {1: R.APPROVED, 2: R.PROPOSED} and dep.proposed_revision.spec["max_replicas"] == 3


class TestRollback:
    def test_it_proposes_an_old_spec(self, world):
        dep = approve(world, scale(world, running(world), 1, 4), 2)
        dep = scale(world, dep, 1, 1)  # fewer GPUs: serving now as revision 3
        services.deployment_rollback(deployment_id=dep.pk, user=world.users["member"], revision=2)
        dep.refresh_from_db()
        assert (dep.max_replicas, dep.proposed_number) == (1, 4)
        proposal = dep.proposed_revision
        assert (proposal.spec, proposal.rollback_of) == (dep.revisions.get(number=2).spec, 2)

    def test_the_serving_revision_cannot_be_rolled_back_to(self, world):
        dep = running(world)
        with pytest.raises(ConflictError) as info:
            services.deployment_rollback(deployment_id=dep.pk, user=world.users["member"], revision=1)
        assert info.value.code == "serving" and statuses(dep) == {1: R.APPROVED}

    def test_a_rollback_to_fewer_gpus_is_applied_at_once(self, world):
        dep = approve(world, scale(world, running(world), 1, 4), 2)
        services.deployment_rollback(deployment_id=dep.pk, user=world.users["member"], revision=1)
        assert runs(dep) == (State.READY, 2, 2, 8192, 3) and reserved(world) == 2
        serving = dep.serving_revision
        assert (serving.number, serving.rollback_of, serving.decider) == (3, 1, "policy")

    def test_a_rollback_of_names_only_is_applied_at_once(self, world):
        dep = edit(world, running(world), served_model_name="chat")
        assert (dep.served_model_name, dep.serving_revision.number) == ("chat", 2)
        services.deployment_rollback(deployment_id=dep.pk, user=world.users["member"], revision=1)
        dep.refresh_from_db()
        assert (dep.served_model_name, dep.serving_revision.number, dep.proposed_number) == ("llama3-8b", 3, None)


class TestStopStartDelete:
    def test_a_policy_stop_with_a_change_waiting_releases_and_keeps_the_proposal(self, world):
        dep = scale(world, running(world), 1, 4)
        deployment_policy_stop(deployment_id=dep.pk, reason="Budget spent.", cause="BudgetStopped")
        assert runs(dep) == (State.STOPPED, 0, 2, 8192, 1) and reserved(world) == 0
        assert statuses(dep) == {1: R.APPROVED, 2: R.PROPOSED}
        assert AuditEvent.objects.get(action="deployment.stop", object_id=str(dep.pk)).actor_name == "policy"

    def test_stop_and_start_while_a_change_waits_keep_the_proposal(self, world):
        dep = scale(world, running(world), 1, 4)
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        assert runs(dep) == (State.STOPPED, 0, 2, 8192, 1)
        services.deployment_start(deployment_id=dep.pk, user=world.users["member"])
        assert runs(dep) == (State.APPROVED, 2, 2, 8192, 1) and reserved(world) == 2  # the serving revision's
        assert statuses(dep) == {1: R.APPROVED, 2: R.PROPOSED}

    def test_delete_withdraws_a_waiting_change_and_releases(self, world):
        dep = scale(world, running(world), 1, 4)
        services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
        assert runs(dep) == (State.DELETING, 0, 2, 8192, 1)
        assert statuses(dep) == {1: R.APPROVED, 2: R.WITHDRAWN}


class TestArchiveWithdrawsWaitingChanges:
    def test_archiving_a_tenant_withdraws_the_change_waiting_beside_its_serving_revision(self, world):
        from deployments.archive import tenant_archive

        admin = world.users["platform_admin"]
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        services.deployment_approve(deployment_id=dep.pk, approver=admin, revision=1)
        services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data={"max_model_len": 4096})
        assert dep.revisions.get(number=2).status == R.PROPOSED

        tenant_archive(tenant_id=world.alpha.pk, actor=admin, confirm=world.alpha.slug, reason="team gone")

        dep.refresh_from_db()
        assert dep.state == State.STOPPED and dep.reserved_gpus == 0
        assert dep.revisions.get(number=2).status == R.WITHDRAWN
        assert dep.serving_revision.number == 1
