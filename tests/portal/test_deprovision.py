"""Leavers lose access at once (portal.deprovision): a member removed by any path, a role that no
longer mints, a platform admin no more, an account deactivated or deleted. Keys are checked where
the engines read them (the local key store) and with the gateway's own lookup; tokens over HTTP.
The identity provider dropping a group at the next sign-in is tests/portal/test_oidc_signin.py."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from access.models import ApiKey
from access.services import key_lookup, key_mint
from access.tasks import expire_keys_task
from core.models import AuditEvent
from portal.api import ApiToken, token_create
from quotas.models import PLATFORM_ADMIN_GROUP
from runtime.backends.local.keys import keys_for

T = "/api/v1/tenants"


@pytest.fixture
def store(settings, tmp_path, monkeypatch):
    """Tasks run when their commit hook fires (as a worker would); the local key store in tmp."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
    return settings.LOCAL_RUNTIME_DIR


def mint(world, role: str, tenant=None) -> str:
    _, plaintext = key_mint(user=world.users[role], tenant=tenant or world.alpha, name=f"{role}-key")
    return plaintext


def published(store, slug: str = "alpha") -> set[str]:
    """The keys a tenant-wide engine of `slug` accepts now (deployment id 1: any)."""
    return set(keys_for(store, slug, 1))


def token_status(secret: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.get("/api/v1/me/").status_code


@pytest.fixture
def keys(world, store, django_capture_on_commit_callbacks):
    """alpha-member and the tenant admin each mint a key; alpha-member holds a token."""
    with django_capture_on_commit_callbacks(execute=True):
        member_key, admin_key = mint(world, "member"), mint(world, "tenant_admin")
    _, secret = token_create(user=world.users["member"], name="laptop")
    assert published(store) == {member_key, admin_key} and token_status(secret) == 200
    return member_key, admin_key, secret


def assert_left(store, keys, reason: str) -> None:
    """The member's key is revoked, withdrawn from the store and audited; their token refused;
    the tenant admin's key untouched."""
    member_key, admin_key, secret = keys
    assert key_lookup(member_key) is None and key_lookup(admin_key) is not None
    assert published(store) == {admin_key}
    assert token_status(secret) == 401
    event = AuditEvent.objects.get(action="apikey.revoke")
    assert (event.actor_name, event.reason) == ("system", reason)
    assert AuditEvent.objects.filter(action="token.revoke", actor_name="system", reason=reason).count() == 1


class TestMembershipRemoved:
    def test_over_the_api(self, world, store, keys, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=True):
            response = world.client("tenant_admin").delete(f"{T}/alpha/members/alpha-member/")
        assert response.status_code == 204
        assert_left(store, keys, "Left tenant alpha.")

    def test_on_the_members_page(self, world, store, keys, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=True):
            response = world.browser("tenant_admin").post(
                "/tenants/alpha/members/alpha-member/", {"remove": "1", "confirm": "1"}
            )
        assert response.status_code == 302
        assert_left(store, keys, "Left tenant alpha.")

    def test_in_the_django_admin(self, world, store, keys, django_capture_on_commit_callbacks):
        from quotas.models import Membership

        root = User.objects.create_superuser("root", "root@example.org", "pw")
        client = world.browser("anonymous")
        client.force_login(root)
        membership = Membership.objects.get(user=world.users["member"])
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(f"/admin/quotas/membership/{membership.pk}/delete/", {"post": "yes"})
        assert response.status_code == 302
        assert_left(store, keys, "Left tenant alpha.")

    def test_a_platform_admin_removed_from_a_tenant_keeps_the_keys_they_may_still_mint(
        self, world, store, django_capture_on_commit_callbacks
    ):
        from quotas.models import Membership

        admin = world.users["platform_admin"]
        Membership.objects.create(user=admin, tenant=world.alpha, role="member")
        with django_capture_on_commit_callbacks(execute=True):
            key = mint(world, "platform_admin")
            world.client("tenant_admin").delete(f"{T}/alpha/members/platform-admin/")
        assert key_lookup(key) is not None and published(store) == {key}


class TestRoleNoLongerMints:
    def test_a_member_made_viewer_loses_their_keys_and_keeps_their_token(
        self, world, store, keys, django_capture_on_commit_callbacks
    ):
        member_key, admin_key, secret = keys
        with django_capture_on_commit_callbacks(execute=True):
            response = world.client("tenant_admin").patch(f"{T}/alpha/members/alpha-member/", {"role": "viewer"})
        assert response.status_code == 200
        assert key_lookup(member_key) is None and published(store) == {admin_key}
        assert token_status(secret) == 200  # what a token may do is read at each request
        assert AuditEvent.objects.get(action="apikey.revoke").reason == "Role in alpha is now viewer."

    def test_a_platform_admin_no_more_loses_keys_in_tenants_they_are_not_a_member_of(
        self, world, store, django_capture_on_commit_callbacks
    ):
        admin = world.users["platform_admin"]
        with django_capture_on_commit_callbacks(execute=True):
            key = mint(world, "platform_admin", tenant=world.beta)
        assert published(store, "beta") == {key}
        with django_capture_on_commit_callbacks(execute=True):
            admin.groups.remove(Group.objects.get(name=PLATFORM_ADMIN_GROUP))
        assert key_lookup(key) is None and published(store, "beta") == set()

    def test_the_staff_flag_taken_away_counts_the_same(self, world, store, django_capture_on_commit_callbacks):
        staff = User.objects.create_user("ops", is_staff=True)
        with django_capture_on_commit_callbacks(execute=True):
            _, key = key_mint(user=staff, tenant=world.beta, name="ops")
        with django_capture_on_commit_callbacks(execute=True):
            staff.is_staff = False
            staff.save()
        assert key_lookup(key) is None and published(store, "beta") == set()


class TestAccountDeactivated:
    def test_in_the_django_admin_every_token_and_key_goes_and_reactivation_brings_none_back(
        self, world, store, keys, django_capture_on_commit_callbacks
    ):
        root = User.objects.create_superuser("root", "root@example.org", "pw")
        client = world.browser("anonymous")
        client.force_login(root)
        member = world.users["member"]
        with django_capture_on_commit_callbacks(execute=True):
            _, beta_key = key_mint(user=world.users["platform_admin"], tenant=world.beta, name="b")
        form = {"username": member.username, "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"}
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(f"/admin/auth/user/{member.pk}/change/", form)  # is_active unticked
        assert response.status_code == 302, response.content[:3000]
        assert not User.objects.get(pk=member.pk).is_active
        assert_left(store, keys, "Account deactivated.")
        User.objects.filter(pk=member.pk).update(is_active=True)
        assert token_status(keys[2]) == 401 and key_lookup(keys[0]) is None
        assert key_lookup(beta_key) is not None  # someone else's

    def test_a_bulk_update_that_sends_no_signal_is_caught_by_the_keys_sweep(
        self, world, store, keys, django_capture_on_commit_callbacks
    ):
        member_key, admin_key, secret = keys
        User.objects.filter(pk=world.users["member"].pk).update(is_active=False)
        assert token_status(secret) == 401  # knox refuses an inactive account's token by itself
        with django_capture_on_commit_callbacks(execute=True):
            assert expire_keys_task() == [ApiKey.objects.get(created_by=world.users["member"]).pk]
        assert key_lookup(member_key) is None and published(store) == {admin_key}
        assert expire_keys_task() == []  # once


class TestAccountDeleted:
    def test_every_key_is_revoked_before_the_row_that_says_whose_they_were_goes(
        self, world, store, keys, django_capture_on_commit_callbacks
    ):
        member_key, admin_key, _ = keys
        with django_capture_on_commit_callbacks(execute=True):
            world.users["member"].delete()
        assert key_lookup(member_key) is None and published(store) == {admin_key}
        assert ApiKey.objects.filter(created_by__isnull=True).get().status == "revoked"
        assert not ApiToken.objects.exists()
