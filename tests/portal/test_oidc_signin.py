"""Sign-in through a real OpenID provider (`oidc-provider` on Node.js, tests/support/oidc.py),
driven over HTTP: which account a sign-in opens (portal.oidc, core.identity), and what a group
gone at the next sign-in takes away (portal.deprovision). The same provider in Chromium is
tests/browser/test_platform_admin.py."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from access.models import ApiKey
from access.services import key_lookup, key_mint
from core.models import AuditEvent
from portal.api import ApiToken, token_create
from quotas.models import Membership
from runtime.backends.local.keys import keys_for
from tests.support.oidc import point_the_portal_at, sign_in_over_http, start_provider, stop_provider


@pytest.fixture
def provider(tmp_path, settings):
    provider, process = start_provider(tmp_path, ["http://testserver/oidc/callback/"])
    point_the_portal_at(provider, settings)
    yield provider
    stop_provider(process)


def signed_in_as(login: str, provider) -> User | None:
    """Sign in at the provider as `login` in a fresh browser session; the portal account it opened."""
    client = Client()
    response = sign_in_over_http(client, provider, login)
    assert response.status_code == 302
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


@pytest.fixture
def dana(world):
    """An existing account with roles: a tenant admin of alpha."""
    user = User.objects.create_user("dana", "dana@example.org")
    Membership.objects.create(user=user, tenant=world.alpha, role="tenant_admin")
    return user


class TestWhichAccount:
    @pytest.mark.parametrize("verified", ["false", "true", None], ids=["string-false", "string-true", "omitted"])
    def test_an_address_not_verified_by_a_boolean_true_opens_no_account(self, dana, provider, verified):
        claims = {"email": "dana@example.org", "preferred_username": "mallory", "groups": ["ml-beta"]}
        if verified is not None:
            claims["email_verified"] = verified  # sent by the provider as a JSON string
        provider.set_account("mallory", **claims)
        assert signed_in_as("mallory", provider) is None
        assert list(User.objects.order_by("pk").values_list("username", flat=True)) == [
            "alpha-viewer",
            "alpha-member",
            "alpha-tenant_admin",
            "beta-member",
            "platform-admin",
            "dana",
        ]
        assert dict(Membership.objects.filter(user=dana).values_list("tenant__slug", "role")) == {
            "alpha": "tenant_admin"
        }

    def test_an_address_that_differs_in_the_local_part_is_someone_else(self, dana, provider):
        provider.set_account("mallory", email="Dana@example.org", email_verified=True, preferred_username="mallory")
        opened = signed_in_as("mallory", provider)
        assert opened is not None and opened != dana
        assert (opened.username, opened.email) == ("mallory", "Dana@example.org")
        assert not Membership.objects.filter(user=opened).exists()

    def test_the_verified_address_opens_its_account_whatever_the_domains_case(self, dana, provider):
        provider.set_account("dana-at-idp", email="dana@EXAMPLE.org", email_verified=True, groups=["ml-alpha"])
        assert signed_in_as("dana-at-idp", provider) == dana


class TestGroupGone:
    def test_the_membership_goes_and_with_it_the_leavers_keys_and_tokens(
        self, world, provider, settings, tmp_path, django_capture_on_commit_callbacks, monkeypatch
    ):
        from portal.celery import app

        monkeypatch.setitem(app.conf, "task_always_eager", True)
        settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
        provider.set_account("erin", email="erin@example.org", email_verified=True, groups=["ml-alpha", "ml-beta"])
        erin = signed_in_as("erin", provider)
        assert dict(Membership.objects.filter(user=erin).values_list("tenant__slug", "role")) == {
            "alpha": "member",
            "beta": "viewer",
        }
        with django_capture_on_commit_callbacks(execute=True):
            key, plaintext = key_mint(user=erin, tenant=world.alpha, name="ci")
            _, kept = key_mint(user=world.users["member"], tenant=world.alpha, name="other")
        _, secret = token_create(user=erin, name="laptop")
        assert sorted(keys_for(settings.LOCAL_RUNTIME_DIR, "alpha", 1)) == sorted([plaintext, kept])

        provider.set_account("erin", email="erin@example.org", email_verified=True, groups=["ml-beta"])
        with django_capture_on_commit_callbacks(execute=True):
            assert signed_in_as("erin", provider) == erin
        assert dict(Membership.objects.filter(user=erin).values_list("tenant__slug", "role")) == {"beta": "viewer"}
        assert ApiKey.objects.get(pk=key.pk).status == "revoked" and key_lookup(plaintext) is None
        assert keys_for(settings.LOCAL_RUNTIME_DIR, "alpha", 1) == [kept]  # no longer published
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        assert client.get("/api/v1/me/").status_code == 401
        assert not ApiToken.objects.filter(user=erin).exists()
        revoked = AuditEvent.objects.get(action="apikey.revoke", object_id=str(key.pk))
        assert (revoked.actor_name, revoked.reason) == ("system", "Left tenant alpha.")
