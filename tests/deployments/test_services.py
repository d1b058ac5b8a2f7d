import threading

import pytest
from django.db import close_old_connections, connection

from core.exceptions import ConflictError, Forbidden, QuotaExceeded, TransitionError
from core.models import AuditEvent
from deployments import services
from deployments.choices import State
from deployments.models import ModelDeployment
from quotas.models import QuotaReservation, TenantQuota
from tests.support.factories import draft, work_after_commit


def reserved(world, flavor="h100"):
    return TenantQuota.objects.get(tenant=world.alpha, flavor=getattr(world, flavor)).reserved_gpus


def create(world, **kw):
    return services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, **kw))


class TestCreate:
    def test_a_member_requests_and_it_waits_for_approval(self, world):
        dep = create(world)
        assert dep.state == State.PENDING_APPROVAL
        assert dep.gpus_needed == 2
        assert [e.reason for e in dep.events.all()] == ["Requested"]
        assert reserved(world) == 0  # nothing is reserved before approval

    def test_viewers_cannot_request(self, world):
        with pytest.raises(Forbidden):
            services.deployment_create(tenant=world.alpha, user=world.users["viewer"], data=draft(world))

    @pytest.mark.parametrize(
        "overrides, field",
        [
            ({"name": "Bad_Name"}, "name"),
            ({"name": "x" * 41}, "name"),
            ({"name": "7b-chat"}, "name"),  # DNS-1123 but not DNS-1035: KubeRay refuses it later
            ({"name": "v1"}, "name"),  # the tenant endpoint's path segment (/<tenant>/v1)
            ({"tensor_parallel_size": 16}, "tensor_parallel_size"),
            ({"tensor_parallel_size": 3}, "tensor_parallel_size"),
            ({"max_replicas": 13}, "max_replicas"),
            ({"min_replicas": 3, "max_replicas": 2}, "min_replicas"),
            ({"model_source": "meta-llama/x\nlabel: injected"}, "model_source"),
            ({"model_source": "ftp://models/x"}, "model_source"),
            ({"served_model_name": "ünïcode"}, "served_model_name"),
            ({"hf_token_secret": "Bad Secret"}, "hf_token_secret"),
            ({"model_source": "meta-llama/Meta-Llama-3-70B-Instruct", "max_replicas": 1}, "tensor_parallel_size"),
            ({"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}, "max_num_batched_tokens"),
            ({"backend": "nomad"}, "backend"),
        ],
    )
    def test_bad_drafts_are_refused_with_the_field_and_nothing_is_written(self, world, overrides, field):
        with pytest.raises(services.DraftInvalid) as info:
            create(world, **overrides)
        assert field in info.value.errors
        assert not ModelDeployment.objects.exists()

    def test_auto_approve_policy_approves_small_nominal_requests(self, world):
        world.alpha.auto_approve_max_gpus = 2
        world.alpha.save()
        dep = create(world, max_replicas=2)
        assert dep.state == State.APPROVED
        assert reserved(world) == 2
        big = create(world, name="big", max_replicas=3)
        assert big.state == State.PENDING_APPROVAL


class TestApproveReject:
    def test_approval_reserves_and_enqueues_after_commit(self, world, django_capture_on_commit_callbacks):
        dep = create(world)
        with django_capture_on_commit_callbacks() as callbacks:
            services.deployment_approve(
                deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
            )
        dep.refresh_from_db()
        assert dep.state == State.APPROVED and dep.reserved_gpus == 2 and reserved(world) == 2
        assert len(work_after_commit(callbacks)) == 1

    def test_approval_that_no_longer_fits_rolls_back(self, world):
        first = create(world, name="one", max_replicas=8)
        second = create(world, name="two", max_replicas=8)
        admin = world.users["platform_admin"]
        services.deployment_approve(deployment_id=first.pk, revision=first.proposed_number, approver=admin)
        with pytest.raises(QuotaExceeded):
            services.deployment_approve(deployment_id=second.pk, revision=second.proposed_number, approver=admin)
        second.refresh_from_db()
        assert second.state == State.PENDING_APPROVAL
        assert reserved(world) == 8

    def test_members_cannot_approve_and_reject_needs_a_reason(self, world):
        dep = create(world)
        with pytest.raises(Forbidden):
            services.deployment_approve(
                deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["tenant_admin"]
            )
        admin = world.users["platform_admin"]
        with pytest.raises(Exception, match="reason"):
            services.deployment_reject(deployment_id=dep.pk, approver=admin, revision=1, reason="")
        services.deployment_reject(deployment_id=dep.pk, approver=admin, revision=1, reason="Use 8B")
        dep.refresh_from_db()
        assert dep.state == State.REJECTED and dep.decision_reason == "Use 8B"

    def test_illegal_transitions_are_refused(self, world):
        dep = create(world)
        with pytest.raises(TransitionError):
            services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        services.deployment_cancel(deployment_id=dep.pk, user=world.users["member"])
        with pytest.raises(TransitionError):
            services.deployment_approve(deployment_id=dep.pk, revision=1, approver=world.users["platform_admin"])


class TestLifecycleQuota:
    def approved(self, world, **kw):
        dep = create(world, **kw)
        services.deployment_approve(
            deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
        )
        dep.refresh_from_db()
        return dep

    def test_scaling_up_proposes_a_revision_and_what_serves_keeps_its_reservation(self, world):
        dep = self.approved(world)
        services.deployment_scale(deployment_id=dep.pk, user=world.users["member"], min_replicas=1, max_replicas=6)
        dep.refresh_from_db()
        assert (dep.state, dep.max_replicas, dep.generation, reserved(world)) == (State.APPROVED, 2, 1, 2)
        assert (dep.proposed_number, dep.proposed_revision.spec["max_replicas"]) == (2, 6)

    def test_scaling_up_within_the_policy_rechecks_quota_and_resizes_the_reservation(self, world):
        dep = self.approved(world)
        world.alpha.auto_approve_max_gpus = 8
        world.alpha.save()
        services.deployment_scale(deployment_id=dep.pk, user=world.users["member"], min_replicas=1, max_replicas=6)
        assert reserved(world) == 6
        with pytest.raises(services.DraftInvalid):  # beyond nominal + borrowing: refused, nothing changes
            services.deployment_scale(deployment_id=dep.pk, user=world.users["member"], min_replicas=1, max_replicas=13)
        assert reserved(world) == 6
        dep.refresh_from_db()
        assert (dep.state, dep.max_replicas, dep.generation) == (State.APPROVED, 6, 2)
        assert (
            AuditEvent.objects.filter(
                action="deployment.approve", actor_name="policy", object_id=str(dep.pk), changes__generation=2
            ).count()
            == 1
        )

    def test_scaling_down_shrinks_the_reservation_without_approval(self, world):
        dep = self.approved(world, max_replicas=2)
        services.deployment_scale(deployment_id=dep.pk, user=world.users["member"], min_replicas=1, max_replicas=1)
        dep.refresh_from_db()
        assert (dep.state, dep.generation, reserved(world)) == (State.APPROVED, 2, 1)

    def test_a_bigger_approved_change_resizes_the_one_reservation(self, world):
        dep = self.approved(world)
        services.deployment_scale(deployment_id=dep.pk, user=world.users["member"], min_replicas=1, max_replicas=4)
        assert reserved(world) == 2  # the proposal reserves nothing until it is approved
        services.deployment_approve(deployment_id=dep.pk, revision=2, approver=world.users["platform_admin"])
        assert reserved(world) == 4
        assert QuotaReservation.objects.filter(released__isnull=True).count() == 1

    def test_a_stop_releases_at_once_and_start_reserves_again(self, world):
        dep = self.approved(world)
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        assert reserved(world) == 0
        assert not QuotaReservation.objects.filter(released__isnull=True).exists()
        services.deployment_start(deployment_id=dep.pk, user=world.users["member"])
        dep.refresh_from_db()
        assert (dep.state, dep.reserved_gpus, reserved(world)) == (State.APPROVED, 2, 2)

    def test_delete_of_a_running_deployment_releases_at_once_and_waits_for_the_cluster(self, world):
        dep = self.approved(world)
        services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
        dep.refresh_from_db()
        assert (dep.state, dep.reserved_gpus, reserved(world)) == (State.DELETING, 0, 0)
        assert services.deployment_mark_deleted(deployment_id=dep.pk) is True
        assert services.deployment_mark_deleted(deployment_id=dep.pk) is False
        reasons = list(dep.events.order_by("created", "id").values_list("reason", flat=True))
        assert reasons == ["Requested", "Approved", "Deleting", "Deleted"]

    def test_a_failure_observed_releases_at_once(self, world):
        dep = self.approved(world)
        changed = services.deployment_observe(
            deployment_id=dep.pk, generation=dep.generation, state=State.FAILED, conditions=[], reason="Failed"
        )
        dep.refresh_from_db()
        assert (changed, dep.state, dep.reserved_gpus, reserved(world)) == (True, State.FAILED, 0, 0)

    def test_observations_for_an_old_generation_are_ignored(self, world):
        dep = self.approved(world)
        assert (
            services.deployment_observe(
                deployment_id=dep.pk, generation=dep.generation, state=State.READY, conditions=[], reason="Ready"
            )
            is True
        )
        assert (
            services.deployment_observe(
                deployment_id=dep.pk, generation=dep.generation - 1, state=State.FAILED, conditions=[]
            )
            is False
        )
        dep.refresh_from_db()
        assert dep.state == State.READY


@pytest.mark.django_db(transaction=True)
class TestConcurrentDecisions:
    def test_two_admins_approving_at_once_exactly_one_wins(self, tx_world):
        dep = create(tx_world)
        number = dep.proposed_number  # what both admins reviewed
        admin2 = type(tx_world.users["platform_admin"]).objects.create(username="admin2", is_staff=True)
        outcomes = []
        barrier = threading.Barrier(2)

        def approve(user):
            close_old_connections()
            try:
                barrier.wait(timeout=10)
                services.deployment_approve(deployment_id=dep.pk, revision=number, approver=user)
                outcomes.append("ok")
            except ConflictError as error:
                outcomes.append(error.code)
            finally:
                connection.close()

        threads = [threading.Thread(target=approve, args=(u,)) for u in (tx_world.users["platform_admin"], admin2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(outcomes) == ["ok", "stale_revision"]
        assert reserved(tx_world) == 2
        assert dep.events.filter(reason="Approved").count() == 1
