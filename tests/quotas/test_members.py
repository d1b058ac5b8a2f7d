"""The last tenant admin (quotas.members): no removal or demotion may leave a tenant without an
active tenant admin, whoever asks, over the API, in the pages, and under a race."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction

from core.exceptions import DomainError
from core.models import AuditEvent
from quotas import members
from quotas.models import Membership

ADMIN = "alpha-tenant_admin"
MEMBER_URL = f"/api/v1/tenants/alpha/members/{ADMIN}/"


def _second_admin(world, *, active: bool = True) -> User:
    user = User.objects.create_user("alpha-admin-2", is_active=active)
    Membership.objects.create(user=user, tenant=world.alpha, role="tenant_admin")
    return user


def _admins(world) -> list[str]:
    rows = Membership.objects.filter(tenant=world.alpha, role="tenant_admin")
    return sorted(rows.values_list("user__username", flat=True))


class TestLastTenantAdmin:
    @pytest.mark.parametrize("role", ["tenant_admin", "platform_admin"])
    def test_nobody_removes_the_last_tenant_admin(self, world, role):
        response = world.client(role).delete(MEMBER_URL)
        assert response.status_code == 400
        assert response.json() == {
            "user": [f"{ADMIN} is the last tenant admin of alpha: make someone else tenant admin first."],
            "code": "last_tenant_admin",
        }
        assert _admins(world) == [ADMIN]
        assert not AuditEvent.objects.filter(action="membership.remove").exists()

    @pytest.mark.parametrize("role", ["tenant_admin", "platform_admin"])
    def test_nobody_demotes_the_last_tenant_admin(self, world, role):
        response = world.client(role).patch(MEMBER_URL, {"role": "member"})
        assert response.status_code == 400
        assert response.json()["code"] == "last_tenant_admin" and "last tenant admin" in response.json()["role"][0]
        assert _admins(world) == [ADMIN]

    def test_with_another_admin_they_may_step_down(self, world):
        _second_admin(world)
        assert world.client("tenant_admin").patch(MEMBER_URL, {"role": "member"}).status_code == 200
        assert _admins(world) == ["alpha-admin-2"]
        # …and now the other one is the last.
        with pytest.raises(DomainError, match="last tenant admin"):
            members.membership_remove(tenant=world.alpha, actor=world.users["platform_admin"], username="alpha-admin-2")

    def test_a_deactivated_admin_does_not_count(self, world):
        _second_admin(world, active=False)
        assert world.client("tenant_admin").delete(MEMBER_URL).status_code == 400
        assert _admins(world) == ["alpha-admin-2", ADMIN]

    def test_other_members_come_and_go_as_before(self, world):
        assert (
            world.client("tenant_admin")
            .patch("/api/v1/tenants/alpha/members/alpha-member/", {"role": "viewer"})
            .status_code
            == 200
        )
        assert world.client("tenant_admin").delete("/api/v1/tenants/alpha/members/alpha-viewer/").status_code == 204

    def test_the_page_shows_the_refusal(self, world):
        page = world.browser("tenant_admin").post(
            f"/tenants/alpha/members/{ADMIN}/", {"remove": "1", "confirm": "1"}, follow=True
        )
        assert page.status_code == 200
        assert "is the last tenant admin of alpha" in page.content.decode()
        assert _admins(world) == [ADMIN]


@pytest.mark.django_db(transaction=True)
def test_two_admins_stepping_down_at_once_leave_one(tx_world):
    """The first demotion holds its transaction open while the second runs: without the tenant
    row lock the second would count the first admin (not yet committed) and both would go."""
    second = _second_admin(tx_world)
    first_done, second_started = threading.Event(), threading.Event()

    def first():
        try:
            with transaction.atomic():
                members.membership_set_role(
                    tenant=tx_world.alpha, actor=tx_world.users["tenant_admin"], username=ADMIN, role="member"
                )
                first_done.set()
                second_started.wait(10)
                time.sleep(0.5)  # the second is now waiting for the lock (or, unlocked, done)
            return "demoted"
        finally:
            connection.close()

    def other():
        first_done.wait(10)
        second_started.set()
        try:
            members.membership_set_role(tenant=tx_world.alpha, actor=second, username=second.username, role="member")
            return "demoted"
        except DomainError as error:
            return error.code
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        outcomes = [pool.submit(first), pool.submit(other)]
        assert [f.result(30) for f in outcomes] == ["demoted", "last_tenant_admin"]
    assert _admins(tx_world) == ["alpha-admin-2"]


def test_the_django_admin_keeps_the_rule_one_by_one_and_in_bulk(world):
    from django.test import Client

    ops = User.objects.create_user("ops", password="x", is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(ops)
    last = Membership.objects.get(user=world.users["tenant_admin"])
    page = admin.post(f"/admin/quotas/membership/{last.pk}/delete/", {"post": "yes"}, follow=True)
    assert "is the last tenant admin of alpha" in page.content.decode()
    second = Membership.objects.get(user=_second_admin(world))
    bulk = {"action": "delete_selected", "_selected_action": [last.pk, second.pk], "post": "yes"}
    admin.post("/admin/quotas/membership/", bulk)
    assert len(_admins(world)) == 1  # one of the two went; the other is now the last


class TestNoProbingForAccounts:
    """Adding a member checks the role before anyone is looked up: a member, a viewer or another
    tenant's admin learns the same 403 whether the person has an account or not."""

    @pytest.mark.parametrize("role, status", [("member", 403), ("viewer", 403), ("other_member", 404)])
    def test_the_same_refusal_for_an_account_and_for_none(self, world, role, status):
        client = world.client(role)
        known = client.post("/api/v1/tenants/alpha/members/", {"user": "beta-member", "role": "viewer"}, format="json")
        unknown = client.post("/api/v1/tenants/alpha/members/", {"user": "nobody-xyz", "role": "viewer"}, format="json")
        assert (known.status_code, unknown.status_code) == (status, status)
        assert known.json() == unknown.json()

    def test_an_admin_learns_that_there_is_no_account_and_who_can_invite(self, world):
        body = world.client("tenant_admin").post(
            "/api/v1/tenants/alpha/members/", {"user": "nobody-xyz", "role": "viewer"}, format="json"
        )
        assert body.status_code == 400
        assert "a platform admin invites them" in str(body.json()["user"])
