"""The one ceiling rule (quotas.ceiling): an ended temporary raise no longer counts for new
reservations while its revert waits, and an archived tenant gets no quota by any path."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.exceptions import ConflictError, DomainError, QuotaExceeded
from deployments.models import ModelDeployment
from quotas import services, tenants
from quotas.choices import QuotaChangeStatus
from quotas.models import QuotaChangeRequest, QuotaReservation, TenantQuota
from quotas.temporary import revert_due
from tests.support.factories import api_draft

DAY = timedelta(days=1)


def quota(world) -> TenantQuota:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)


def hold(world, gpus: int, owner_id: int) -> QuotaReservation:
    return services.quota_reserve(
        tenant=world.alpha, flavor=world.h100, gpus=gpus, owner_type="test", owner_id=owner_id
    )


def raise_until_ended(world, *, nominal: int = 20, borrowing: int = 0) -> QuotaChangeRequest:
    """alpha's H100 quota (8 nominal + 4 borrowing) raised for a day, 14 GPUs taken, then the day
    over: the end date has passed and the revert has not run (or waits: 14 > 8 + 4)."""
    request = services.quota_change_request_create(
        tenant=world.alpha,
        flavor=world.h100,
        user=world.users["tenant_admin"],
        nominal_gpus=nominal,
        borrowing_limit_gpus=borrowing,
        justification="launch week",
        ends_at=timezone.now() + DAY,
    )
    services.quota_change_approve(request_id=request.pk, approver=world.users["platform_admin"])
    hold(world, 14, owner_id=1)
    QuotaChangeRequest.objects.filter(pk=request.pk).update(ends_at=timezone.now() - timedelta(minutes=1))
    return request


class TestEndedTemporaryQuota:
    @pytest.mark.parametrize("revert_ran", [False, True], ids=["before-the-beat", "revert-waiting"])
    def test_a_reservation_over_the_base_ceiling_is_refused(self, world, revert_ran):
        raise_until_ended(world)
        if revert_ran:
            assert revert_due()["waiting"] == 1
        assert quota(world).nominal_gpus == 20  # not reverted: 14 held > 8 + 4
        with pytest.raises(QuotaExceeded, match="temporary quota ended") as refused:
            hold(world, 1, owner_id=2)  # 15 ≤ 20 would fit the temporary ceiling
        assert refused.value.code == "quota_exceeded"
        assert quota(world).reserved_gpus == 14

    def test_a_deployment_request_is_refused_not_auto_approved(self, world):
        world.alpha.auto_approve_max_gpus = 4
        world.alpha.save()
        raise_until_ended(world)
        response = world.client("member").post("/api/v1/deployments/", api_draft(world), format="json")
        assert response.status_code == 400, response.content
        assert "temporary quota ended" in response.json()["max_replicas"][0]
        assert not ModelDeployment.objects.exists()
        assert quota(world).reserved_gpus == 14
        preview = world.client("member").get(
            "/api/v1/quota-preview/", {"tenant": "alpha", "flavor": "h100-sxm5", "gpus": 1}
        )
        assert preview.status_code == 200 and preview.json()["fit"] == "no_fit"
        assert (preview.json()["nominal"], preview.json()["borrowing_limit"]) == (8, 4)
        listed = world.client("member").get("/api/v1/quotas/", {"tenant__slug": "alpha", "flavor__name": "h100-sxm5"})
        (row,) = listed.json()["results"]
        assert (row["nominal_gpus"], row["free_nominal_gpus"]) == (20, 0)  # configured until the revert; none free

    def test_an_approval_that_would_reserve_is_refused(self, world):
        body = api_draft(world, max_replicas=1)
        created = world.client("member").post("/api/v1/deployments/", body, format="json")
        assert created.status_code == 201 and created.json()["state"] == "pending_approval"
        raise_until_ended(world)
        approved = world.client("platform_admin").post(
            f"/api/v1/deployments/{created.json()['id']}/approve/", {"revision": 1}, format="json"
        )
        assert approved.status_code == 400 and approved.json()["code"] == "quota_exceeded"
        assert ModelDeployment.objects.get().state == "pending_approval" and quota(world).reserved_gpus == 14

    def test_shrinking_still_succeeds(self, world):
        raise_until_ended(world)
        assert hold(world, 10, owner_id=1).gpus == 10
        assert quota(world).reserved_gpus == 10

    def test_once_within_the_base_ceiling_new_reservations_fit_it_again(self, world):
        raise_until_ended(world)
        hold(world, 10, owner_id=1)
        hold(world, 2, owner_id=2)  # 12 = 8 + 4
        with pytest.raises(QuotaExceeded):
            hold(world, 1, owner_id=3)

    def test_values_set_meanwhile_stand(self, world):
        raise_until_ended(world)
        services.quota_set(tenant=world.alpha, flavor=world.h100, actor=world.users["platform_admin"], nominal_gpus=18)
        hold(world, 4, owner_id=2)  # 18 ≤ 18: the set values are the ceiling, not the old 12
        assert quota(world).reserved_gpus == 18


class TestArchivedTenant:
    def archive(self, world) -> None:
        tenants.tenant_mark_archived(tenant_id=world.beta.pk, actor=world.users["platform_admin"], reason="gone")

    def beta_admin(self, world):
        from quotas.models import Membership

        Membership.objects.filter(user=world.users["other_member"]).update(role="tenant_admin")
        return world.users["other_member"]

    def test_a_quota_change_request_is_400_over_the_api_and_a_form_error(self, world):
        self.beta_admin(world)
        self.archive(world)
        body = {"tenant": "beta", "flavor": "h100-sxm5", "nominal_gpus": 8, "justification": "back"}
        response = world.client("other_member").post("/api/v1/quota-requests/", body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "archived" and "archived" in response.json()["tenant"][0]
        page = world.browser("other_member").post(
            "/quotas/beta/",
            {"flavor": world.h100.pk, "nominal_gpus": 8, "borrowing_limit_gpus": 0, "justification": "back"},
        )
        assert page.status_code == 200 and "is archived and takes no new requests" in page.content.decode()
        assert not QuotaChangeRequest.objects.exists()

    def test_approving_an_earlier_pending_request_is_refused(self, world):
        admin = self.beta_admin(world)
        request = services.quota_change_request_create(
            tenant=world.beta, flavor=world.h100, user=admin, nominal_gpus=16, justification="more"
        )
        self.archive(world)
        response = world.client("platform_admin").post(f"/api/v1/quota-requests/{request.pk}/approve/", {})
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "archived"
        request.refresh_from_db()
        assert request.status == QuotaChangeStatus.PENDING
        assert TenantQuota.objects.get(tenant=world.beta, flavor=world.h100).nominal_gpus == 0
        page = world.browser("platform_admin").post(f"/quota-requests/{request.pk}/approve/", follow=True)
        assert "is archived" in page.content.decode()
        assert TenantQuota.objects.get(tenant=world.beta, flavor=world.h100).nominal_gpus == 0

    def test_quota_set_gives_the_same_answer(self, world):
        self.archive(world)
        response = world.client("platform_admin").post(
            "/api/v1/quotas/", {"tenant": "beta", "flavor": "a100-pcie", "nominal_gpus": 2}, format="json"
        )
        assert response.status_code == 400 and response.json()["code"] == "archived"
        assert not TenantQuota.objects.filter(tenant=world.beta, flavor=world.a100).exists()

    def test_a_temporary_change_ending_after_the_archive_gives_nothing_back(self, world):
        ends = timezone.now() + DAY
        request = services.quota_change_request_create(
            tenant=world.alpha,
            flavor=world.h100,
            user=world.users["tenant_admin"],
            nominal_gpus=0,
            borrowing_limit_gpus=0,
            justification="pause",
            ends_at=ends,
        )
        services.quota_change_approve(request_id=request.pk, approver=world.users["platform_admin"])
        tenants.tenant_mark_archived(tenant_id=world.alpha.pk, actor=world.users["platform_admin"], reason="gone")
        assert revert_due(now=ends)["superseded"] == 1
        assert (quota(world).nominal_gpus, quota(world).borrowing_limit_gpus) == (0, 0)


class TestBelowReserved:
    def test_approval_and_quota_set_refuse_with_one_code(self, world):
        hold(world, 6, owner_id=1)
        request = services.quota_change_request_create(
            tenant=world.alpha,
            flavor=world.h100,
            user=world.users["tenant_admin"],
            nominal_gpus=4,
            borrowing_limit_gpus=0,
            justification="less",
        )
        with pytest.raises(ConflictError) as approving:
            services.quota_change_approve(request_id=request.pk, approver=world.users["platform_admin"])
        with pytest.raises(ConflictError) as setting:
            services.quota_set(
                tenant=world.alpha,
                flavor=world.h100,
                actor=world.users["platform_admin"],
                nominal_gpus=4,
                borrowing_limit_gpus=0,
            )
        assert approving.value.code == setting.value.code == "below_reserved"
        assert approving.value.message == setting.value.message
        assert isinstance(approving.value, DomainError) and quota(world).nominal_gpus == 8
