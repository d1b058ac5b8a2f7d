"""Temporary quota: an end date on a quota-change request, the revert on time (Kueue mirrored
through the real client against the API test server), a revert that waits for the reservations
and tells the tenant admins once, and what supersedes a temporary change."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.db import close_old_connections, connection
from django.utils import timezone

from core.exceptions import DomainError
from core.models import AuditEvent
from quotas import services
from quotas.models import QuotaChangeRequest, QuotaReservation, TenantQuota
from quotas.temporary import quota_change_revert, revert_due
from runtime import k8s
from tests.quotas.test_tenants import gpu_nominal
from tests.reclaim.support import give_emails

DAY = timedelta(days=1)


@pytest.fixture
def eager(monkeypatch):
    """Tasks run in this process when their commit hook fires (as a worker would run them)."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)


def ask(world, *, nominal: int = 16, ends_at=None, borrowing: int = 4, **kw) -> QuotaChangeRequest:
    return services.quota_change_request_create(
        tenant=world.alpha,
        flavor=world.h100,
        user=world.users["tenant_admin"],
        nominal_gpus=nominal,
        borrowing_limit_gpus=borrowing,
        justification="launch week",
        ends_at=ends_at,
        **kw,
    )


def approve(world, request) -> QuotaChangeRequest:
    return services.quota_change_approve(request_id=request.pk, approver=world.users["platform_admin"])


def quota(world) -> TenantQuota:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)


def hold(world, gpus: int, owner_id: int = 1) -> None:
    services.quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=gpus, owner_type="test", owner_id=owner_id)


class TestEndDate:
    @pytest.mark.parametrize(
        ("ends_in", "message"),
        [(-DAY, "must be in the future"), (timedelta(0), "must be in the future"), (367 * DAY, "at most a year")],
    )
    def test_an_end_date_in_the_past_or_too_far_is_refused(self, world, ends_in, message):
        with pytest.raises(DomainError, match=message) as caught:
            ask(world, ends_at=timezone.now() + ends_in)
        assert caught.value.field == "ends_at"
        assert not QuotaChangeRequest.objects.exists()

    def test_the_api_and_the_form_take_and_show_it(self, world):
        ends = (timezone.now() + 7 * DAY).replace(microsecond=0)
        admin = world.client("tenant_admin")
        body = {"tenant": "alpha", "flavor": "h100-sxm5", "nominal_gpus": 16, "justification": "launch"}
        bad = admin.post("/api/v1/quota-requests/", {**body, "ends_at": "2020-01-01T00:00:00Z"}, format="json")
        assert bad.status_code == 400 and "future" in bad.json()["ends_at"][0]
        created = admin.post("/api/v1/quota-requests/", {**body, "ends_at": ends.isoformat()}, format="json")
        assert created.status_code == 201, created.content
        data = created.json()
        assert data["ends_at"].startswith(ends.strftime("%Y-%m-%dT%H:%M"))
        assert data["reverted_at"] is None and data["revert_waiting_since"] is None
        permanent = world.client("tenant_admin").post(
            "/api/v1/quota-requests/", {**body, "flavor": "a100-pcie"}, format="json"
        )
        assert permanent.status_code == 201 and permanent.json()["ends_at"] is None

        page = world.browser("tenant_admin").post(
            "/quotas/alpha/",
            {
                "flavor": world.a100.pk,
                "nominal_gpus": 6,
                "borrowing_limit_gpus": 0,
                "justification": "x",
                "ends_at": "2020-01-01T00:00",
            },
        )
        assert page.status_code == 200 and "The end date must be in the future." in page.content.decode()
        listed = world.browser("tenant_admin").get("/quotas/alpha/").content.decode()
        assert f"until {ends:%Y-%m-%d %H:%M}" in listed

    def test_approval_is_refused_once_the_end_date_passed(self, world):
        request = ask(world, ends_at=timezone.now() + DAY)
        QuotaChangeRequest.objects.filter(pk=request.pk).update(ends_at=timezone.now() - timedelta(minutes=1))
        with pytest.raises(DomainError, match="Reject it") as caught:
            approve(world, request)
        assert caught.value.field == "ends_at"
        assert quota(world).nominal_gpus == 8


class TestRevert:
    def test_it_reverts_on_time_and_mirrors_kueue(self, world, cluster_api, eager, django_capture_on_commit_callbacks):
        ends = timezone.now() + DAY
        with django_capture_on_commit_callbacks(execute=True):
            request = approve(world, ask(world, nominal=16, borrowing=2, ends_at=ends))
        cq = lambda: cluster_api.get_object(k8s.CLUSTERQUEUE, "tenant-alpha")  # noqa: E731
        assert gpu_nominal(cq(), "h100-sxm5") == [16]
        request.refresh_from_db()
        assert request.previous["nominal_gpus"] == 8 and request.previous["borrowing_limit_gpus"] == 4

        assert revert_due(now=ends - timedelta(seconds=1)) == {"reverted": 0, "waiting": 0, "superseded": 0, "none": 0}
        with django_capture_on_commit_callbacks(execute=True):
            assert revert_due(now=ends)["reverted"] == 1
        q = quota(world)
        assert (q.nominal_gpus, q.borrowing_limit_gpus) == (8, 4)
        assert gpu_nominal(cq(), "h100-sxm5") == [8]
        request.refresh_from_db()
        assert request.reverted_at == ends and request.revert_waiting_since is None
        entry = AuditEvent.objects.get(action="quota_change.revert")
        assert entry.actor_name == "policy" and entry.changes["to"]["nominal_gpus"] == 8
        assert revert_due(now=ends + DAY)["reverted"] == 0  # done once
        assert len(mail.outbox) == 0  # an on-time revert needs no e-mail

    def test_it_waits_while_reservations_exceed_the_old_ceiling_and_tells_once(
        self, world, django_capture_on_commit_callbacks
    ):
        give_emails(world)
        ends = timezone.now() + DAY
        approve(world, ask(world, nominal=20, borrowing=0, ends_at=ends))
        hold(world, 14)  # more than 8 nominal + 4 borrowing
        with django_capture_on_commit_callbacks(execute=True):
            assert revert_due(now=ends)["waiting"] == 1
        assert quota(world).nominal_gpus == 20  # nothing taken from running deployments
        request = QuotaChangeRequest.objects.get()
        assert request.revert_waiting_since == ends and request.reverted_at is None
        assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alpha-admin@example.com"]
        assert "cannot end yet" in mail.outbox[0].subject and "hold 14 GPUs" in mail.outbox[0].body
        page = world.browser("tenant_admin").get("/quotas/alpha/").content.decode()
        assert "revert waiting" in page and "the revert waits" in page
        assert "Temporary quota end waits" in page  # the audit trail

        with django_capture_on_commit_callbacks(execute=True):
            assert revert_due(now=ends + timedelta(minutes=1))["waiting"] == 1
        assert len(mail.outbox) == 1  # told once

        services.quota_release(owner_type="test", owner_id=1)
        hold(world, 12, owner_id=2)  # exactly the old ceiling: fits
        with django_capture_on_commit_callbacks(execute=True):
            assert revert_due(now=ends + timedelta(minutes=2))["reverted"] == 1
        assert (quota(world).nominal_gpus, quota(world).reserved_gpus) == (8, 12)
        assert len(mail.outbox) == 2 and "reverted" in mail.outbox[1].subject
        body = world.client("tenant_admin").get(f"/api/v1/quota-requests/{request.pk}/").json()
        assert body["reverted_at"] is not None and body["revert_waiting_since"] is None


class TestSuperseded:
    def test_a_quota_set_meanwhile_stands(self, world):
        ends = timezone.now() + DAY
        approve(world, ask(world, ends_at=ends))
        services.quota_set(tenant=world.alpha, flavor=world.h100, actor=world.users["platform_admin"], nominal_gpus=10)
        assert revert_due(now=ends)["superseded"] == 1
        assert quota(world).nominal_gpus == 10
        assert QuotaChangeRequest.objects.get().reverted_at == ends

    def test_a_second_temporary_change_keeps_the_first_baseline(self, world):
        first = approve(world, ask(world, nominal=16, ends_at=timezone.now() + DAY))
        second_end = timezone.now() + 3 * DAY
        second = approve(world, ask(world, nominal=20, ends_at=second_end))
        first.refresh_from_db()
        assert first.reverted_at is not None  # ended by the second
        assert AuditEvent.objects.filter(action="quota_change.superseded").count() == 1
        assert second.previous["nominal_gpus"] == 8
        assert revert_due(now=second_end)["reverted"] == 1
        assert quota(world).nominal_gpus == 8

    def test_a_permanent_change_ends_the_temporary_one(self, world):
        ends = timezone.now() + DAY
        approve(world, ask(world, nominal=16, ends_at=ends))
        approve(world, ask(world, nominal=12))
        assert revert_due(now=ends) == {"reverted": 0, "waiting": 0, "superseded": 0, "none": 0}
        assert quota(world).nominal_gpus == 12


@pytest.mark.django_db(transaction=True)
def test_concurrent_reverts_and_a_reservation_keep_the_invariant(tx_world):
    ends = timezone.now() + DAY
    request = approve(tx_world, ask(tx_world, nominal=16, ends_at=ends))
    hold(tx_world, 10)
    results, barrier = [], threading.Barrier(3)

    def run(work):
        try:
            barrier.wait()
            results.append(work())
        except DomainError as error:
            results.append(type(error).__name__)
        finally:
            close_old_connections()
            connection.close()

    threads = [
        threading.Thread(target=run, args=(lambda: quota_change_revert(request_id=request.pk, now=ends),)),
        threading.Thread(target=run, args=(lambda: quota_change_revert(request_id=request.pk, now=ends),)),
        threading.Thread(target=run, args=(lambda: hold(tx_world, 4, owner_id=2) or "reserved",)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q = TenantQuota.objects.get(tenant=tx_world.alpha, flavor=tx_world.h100)
    active = sum(QuotaReservation.objects.filter(released__isnull=True).values_list("gpus", flat=True))
    assert q.reserved_gpus == active <= q.nominal_gpus + q.borrowing_limit_gpus
    assert AuditEvent.objects.filter(action="quota_change.revert").count() == results.count("reverted") <= 1
    # The three serialize on the quota row. Reservation first: 14 held > 8 + 4, both reverts wait.
    # A revert first: back to 8 + 4 with 10 held, the other revert finds it done, 4 more do not fit.
    if "reserved" in results:
        assert sorted(results) == ["reserved", "waiting", "waiting"] and q.nominal_gpus == 16
    else:
        assert sorted(results) == ["QuotaExceeded", "none", "reverted"] and q.nominal_gpus == 8


HOSTILE_ENDS_AT = [
    "tomorrow",
    "",
    "2026-13-45T00:00:00Z",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    "2027-01-01T00:00:00\x001",  # (a NUL at the very end is dropped by datetime.fromisoformat: the date stands)
    "2027-01-01T00:00:00Z" + "0" * 5000,
    "１９９９-01-01T00:00:00Z",
    12,
    1e308,
    True,
    ["2027-01-01T00:00:00Z"],
    {"date": "2027-01-01"},
]


class TestHostileEndDates:
    @pytest.mark.parametrize("value", HOSTILE_ENDS_AT, ids=range(len(HOSTILE_ENDS_AT)))
    def test_the_api_answers_400_on_the_field_and_writes_nothing(self, world, value):
        body = {"tenant": "alpha", "flavor": "h100-sxm5", "nominal_gpus": 16, "justification": "x", "ends_at": value}
        response = world.client("tenant_admin").post("/api/v1/quota-requests/", body, format="json")
        assert response.status_code == 400, response.content[:300]
        assert response.json()["ends_at"]
        assert not QuotaChangeRequest.objects.exists() and not AuditEvent.objects.exists()

    @pytest.mark.parametrize("value", [v for v in HOSTILE_ENDS_AT if isinstance(v, str)], ids=str)
    def test_the_form_shows_a_field_error(self, world, value):
        form = {"flavor": world.a100.pk, "nominal_gpus": 6, "borrowing_limit_gpus": 0, "justification": "x"}
        page = world.browser("tenant_admin").post("/quotas/alpha/", {**form, "ends_at": value})
        if value == "":
            assert page.status_code == 302  # empty: a permanent change
            assert QuotaChangeRequest.objects.get().ends_at is None
        else:
            assert page.status_code == 200 and 'id="id_ends_at"' in page.content.decode()
            assert not QuotaChangeRequest.objects.exists()


HOSTILE_SCHEDULES = ["mon ٠٨:٠٠-٢٠:٠٠", "mon 08:00-20:00\x00", "x" * 201, "mon 08:00-20:00;" * 20, 5, None, ["mon"]]


@pytest.mark.parametrize("value", HOSTILE_SCHEDULES, ids=range(len(HOSTILE_SCHEDULES)))
def test_hostile_serving_schedules_are_400_on_the_field(world, value):
    body = {"auto_approve_max_gpus": 0, "max_gpus_per_deployment": 0, "allowed_flavors": [], "serving_schedule": value}
    response = world.client("platform_admin").put("/api/v1/tenants/alpha/policy/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["serving_schedule"]
    world.alpha.refresh_from_db()
    assert world.alpha.serving_schedule == ""
