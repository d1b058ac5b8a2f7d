import threading

import pytest
from django.db import close_old_connections, connection

from core.exceptions import ConflictError, Forbidden, QuotaExceeded
from core.models import AuditEvent
from quotas import services
from quotas.choices import Fit, QuotaChangeStatus
from quotas.models import QuotaReservation, TenantQuota
from tests.support.factories import work_after_commit


def quota(world, tenant="alpha", flavor="h100"):
    return TenantQuota.objects.get(tenant=getattr(world, tenant), flavor=getattr(world, flavor))


class TestQuotaPreview:
    def test_it_says_nominal_borrowing_or_no_fit_with_numbers(self, world):
        fit = services.quota_preview(tenant=world.alpha, flavor=world.h100, gpus=8)
        assert fit.fit == Fit.NOMINAL and fit.free_nominal == 8
        # beta lends its unused 8 H100; alpha may borrow up to 4.
        borrow = services.quota_preview(tenant=world.alpha, flavor=world.h100, gpus=12)
        assert borrow.fit == Fit.BORROWING and borrow.borrowable == 4
        assert "preempted" in borrow.message
        nofit = services.quota_preview(tenant=world.alpha, flavor=world.h100, gpus=13)
        assert nofit.fit == Fit.NO_FIT and "13" in nofit.message

    def test_borrowing_needs_unused_capacity_in_the_cohort(self, world):
        services.quota_reserve(tenant=world.beta, flavor=world.h100, gpus=8, owner_type="t", owner_id=1)
        assert services.quota_preview(tenant=world.alpha, flavor=world.h100, gpus=9).fit == Fit.NO_FIT

    def test_no_quota_for_flavor_does_not_fit(self, world):
        assert services.quota_preview(tenant=world.beta, flavor=world.a100, gpus=1).fit == Fit.NO_FIT


class TestQuotaReserveRelease:
    def test_reserve_records_borrowing_and_release_is_exactly_once(self, world):
        services.quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=6, owner_type="d", owner_id=1)
        r2 = services.quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=4, owner_type="d", owner_id=2)
        assert r2.borrowed_gpus == 2
        assert quota(world).reserved_gpus == 10
        assert services.quota_release(owner_type="d", owner_id=2) is True
        assert services.quota_release(owner_type="d", owner_id=2) is False
        assert quota(world).reserved_gpus == 6

    def test_reserving_twice_for_one_owner_is_idempotent_and_resizes(self, world):
        services.quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=4, owner_type="d", owner_id=1)
        services.quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=4, owner_type="d", owner_id=1)
        assert quota(world).reserved_gpus == 4
        services.quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=2, owner_type="d", owner_id=1)
        assert quota(world).reserved_gpus == 2
        assert QuotaReservation.objects.filter(owner_id=1, released__isnull=True).count() == 1

    def test_it_refuses_when_quota_exhausted(self, world):
        with pytest.raises(QuotaExceeded):
            services.quota_reserve(tenant=world.alpha, flavor=world.a100, gpus=5, owner_type="d", owner_id=1)
        assert quota(world, flavor="a100").reserved_gpus == 0


@pytest.mark.django_db(transaction=True)
class TestConcurrentReservations:
    def test_fifty_threads_admit_exactly_what_fits(self, tx_world):
        """50 threads race for 2 GPUs each against 8 nominal + 4 borrowing: exactly 6 win."""
        results, errors = [], []
        barrier = threading.Barrier(50)

        def reserve(i):
            close_old_connections()
            try:
                barrier.wait(timeout=30)
                services.quota_reserve(
                    tenant=tx_world.alpha, flavor=tx_world.h100, gpus=2, owner_type="race", owner_id=i
                )
                results.append(i)
            except QuotaExceeded:
                pass
            except Exception as exc:  # deadlocks or anything else fail the test
                errors.append(repr(exc))
            finally:
                connection.close()

        threads = [threading.Thread(target=reserve, args=(i,)) for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors
        assert len(results) == 6
        q = quota(tx_world)
        assert q.reserved_gpus == 12
        assert sum(QuotaReservation.objects.filter(released__isnull=True).values_list("gpus", flat=True)) == 12


class TestQuotaChangeRequests:
    def create(self, world, user="tenant_admin", **kw):
        values = dict(nominal_gpus=16, borrowing_limit_gpus=0, justification="Llama-70B launch")
        values.update(kw)
        return services.quota_change_request_create(
            tenant=world.alpha, flavor=world.h100, user=world.users[user], **values
        )

    def test_members_cannot_request_quota(self, world):
        with pytest.raises(Forbidden):
            self.create(world, user="member")

    def test_approval_updates_quota_and_audits(self, world, django_capture_on_commit_callbacks):
        req = self.create(world)
        with django_capture_on_commit_callbacks() as callbacks:
            services.quota_change_approve(request_id=req.pk, approver=world.users["platform_admin"], comment="ok")
        assert len(work_after_commit(callbacks)) == 1  # the Kueue sync, scheduled after commit
        assert quota(world).nominal_gpus == 16
        event = AuditEvent.objects.get(action="quota_change.approve")
        assert event.actor == world.users["platform_admin"]
        assert event.changes["from"]["nominal_gpus"] == 8 and event.changes["to"]["nominal_gpus"] == 16

    def test_a_decrease_below_reserved_is_refused_and_stays_pending(self, world):
        services.quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=6, owner_type="d", owner_id=1)
        req = self.create(world, nominal_gpus=4, borrowing_limit_gpus=0)
        with pytest.raises(ConflictError, match="6 GPUs are reserved"):
            services.quota_change_approve(request_id=req.pk, approver=world.users["platform_admin"])
        req.refresh_from_db()
        assert req.status == QuotaChangeStatus.PENDING
        assert quota(world).nominal_gpus == 8

    def test_reject_requires_a_reason_and_a_second_decision_conflicts(self, world):
        req = self.create(world)
        admin = world.users["platform_admin"]
        with pytest.raises(Exception, match="reason"):
            services.quota_change_reject(request_id=req.pk, approver=admin, comment=" ")
        services.quota_change_reject(request_id=req.pk, approver=admin, comment="Use A100s")
        with pytest.raises(ConflictError):
            services.quota_change_approve(request_id=req.pk, approver=admin)

    def test_only_platform_admins_decide(self, world):
        req = self.create(world)
        with pytest.raises(Forbidden):
            services.quota_change_approve(request_id=req.pk, approver=world.users["tenant_admin"])
