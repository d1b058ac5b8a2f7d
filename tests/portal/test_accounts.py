"""People without the identity provider (portal.accounts): the first platform admin from
configuration, and one-time invitation links where the invitee sets their own password."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.contrib.auth.tokens import default_token_generator
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from core.models import AuditEvent
from portal.accounts import invite_path, invite_tokens
from quotas.models import PLATFORM_ADMIN_GROUP, is_platform_admin

NEW_PASSWORD = "a-long-enough-passphrase-7"


def _invite(world, role="platform_admin", **body):
    return world.client(role).post("/api/v1/invitations/", {"username": "erin", "email": "erin@Example.ORG", **body})


def _accept(link: str, password: str = NEW_PASSWORD):
    """Open the link (the token moves to the session), then set the password."""
    browser = Client()
    opened = browser.get(link)
    if opened.status_code != 302:
        return browser, opened
    form_url = opened["Location"]
    assert browser.get(form_url).status_code == 200
    return browser, browser.post(form_url, {"new_password1": password, "new_password2": password})


class TestInvitations:
    def test_the_invitee_sets_their_own_password_once(self, world):
        response = _invite(world, reason="new contractor")
        assert response.status_code == 201
        body = response.json()
        assert (body["username"], body["email"]) == ("erin", "erin@example.org")
        erin = User.objects.get(username="erin")
        assert not erin.has_usable_password() and erin.is_active
        invited = AuditEvent.objects.get(action="user.invite")
        assert (invited.actor_name, invited.object_id, invited.reason) == (
            "platform-admin",
            str(erin.pk),
            "new contractor",
        )
        link = body["url"].removeprefix("http://testserver")
        _, done = _accept(link)
        assert done.status_code == 302 and done["Location"] == "/accounts/login/"
        assert Client().post("/accounts/login/", {"username": "erin", "password": NEW_PASSWORD}).status_code == 302
        assert AuditEvent.objects.filter(action="user.invite_accept", actor_name="erin").count() == 1
        # The same link again: spent.
        _, again = _accept(link, "another-long-passphrase-9")
        assert again.status_code == 200 and "no longer works" in again.content.decode()
        assert User.objects.get(username="erin").check_password(NEW_PASSWORD)

    def test_a_link_expires(self, world, monkeypatch):
        link = _invite(world).json()["url"].removeprefix("http://testserver")
        monkeypatch.setattr(invite_tokens, "_now", lambda: datetime.now() + timedelta(hours=73))
        _, page = _accept(link)
        assert (
            "no longer works" in page.content.decode() and not User.objects.get(username="erin").has_usable_password()
        )

    def test_a_new_invitation_kills_the_old_link(self, world):
        first = _invite(world).json()["url"].removeprefix("http://testserver")
        second = _invite(world).json()["url"].removeprefix("http://testserver")
        assert "no longer works" in _accept(first)[1].content.decode()
        assert _accept(second)[1].status_code == 302

    def test_a_password_reset_token_or_a_deactivated_invitee_opens_nothing(self, world):
        _invite(world)
        erin = User.objects.get(username="erin")
        forged = invite_path(erin).rsplit("/", 2)[0] + f"/{default_token_generator.make_token(erin)}/"
        assert "no longer works" in _accept(forged)[1].content.decode()
        link = invite_path(erin)
        User.objects.filter(pk=erin.pk).update(is_active=False)
        assert "no longer works" in _accept(link)[1].content.decode()

    def test_the_password_rules_apply(self, world):
        link = _invite(world).json()["url"].removeprefix("http://testserver")
        _, page = _accept(link, "short")
        assert page.status_code == 200 and "too short" in page.content.decode()
        assert not User.objects.get(username="erin").has_usable_password()

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"email": "not-an-address"}, "email"),
            ({"username": "bad name!"}, "username"),
            ({"username": "alpha-member"}, "username"),  # an account that is in use
            ({"username": "erin", "email": "x@example.org\x00"}, "email"),
        ],
    )
    def test_bad_or_taken_names_are_a_400_naming_the_field(self, world, body, field):
        response = _invite(world, **body)
        assert response.status_code == 400 and response.json()[field]
        assert not User.objects.filter(username="erin").exists()

    def test_an_address_someone_has_is_taken_under_the_one_matching_rule(self, world):
        User.objects.create_user("dana", email="dana@example.org")
        taken = _invite(world, email="dana@EXAMPLE.org")  # the same mailbox
        assert taken.status_code == 400 and taken.json()["email"] == [
            "Someone already has an account with this e-mail address."
        ]
        assert _invite(world, email="Dana@example.org").status_code == 201  # another one (local part)

    def test_only_platform_admins_invite(self, world):
        for role in ("viewer", "member", "tenant_admin"):
            assert _invite(world, role).status_code == 403
        assert not User.objects.filter(username="erin").exists()

    def test_the_page_shows_the_link_once_and_errors_on_the_field(self, world):
        admin = world.browser("platform_admin")
        assert admin.get("/platform/invite/").status_code == 200
        page = admin.post("/platform/invite/", {"username": "erin", "email": "erin@example.org"})
        assert page.status_code == 200 and "/accounts/invite/" in page.content.decode()
        taken = admin.post("/platform/invite/", {"username": "alpha-member", "email": "z@example.org"})
        assert taken.status_code == 200 and "already has an account" in taken.content.decode()
        assert world.browser("tenant_admin").get("/platform/invite/").status_code == 403


class TestFirstPlatformAdmin:
    @pytest.fixture
    def configured(self, settings, tmp_path):
        secret = tmp_path / "password"
        secret.write_text(NEW_PASSWORD + "\n")  # as a Secret file often ends
        settings.PLATFORM_ADMIN_USERNAME = "root"
        settings.PLATFORM_ADMIN_EMAIL = "root@example.org"
        settings.PLATFORM_ADMIN_PASSWORD_FILE = str(secret)
        return secret

    def test_migrate_creates_it_and_it_signs_in(self, db, configured):
        call_command("migrate", verbosity=0)
        root = User.objects.get(username="root")
        assert is_platform_admin(root) and root.email == "root@example.org"
        assert Client().post("/accounts/login/", {"username": "root", "password": NEW_PASSWORD}).status_code == 302
        grant = AuditEvent.objects.get(action="platform_admin.grant")
        assert (grant.actor_name, grant.object_id) == ("configuration", str(root.pk))

    def test_it_never_resets_a_password_and_restores_the_role(self, db, configured):
        call_command("bootstrap_platform_admin")
        root = User.objects.get(username="root")
        root.set_password("changed-by-root-later-1")
        root.save()
        root.groups.remove(Group.objects.get(name=PLATFORM_ADMIN_GROUP))
        call_command("bootstrap_platform_admin")
        root.refresh_from_db()
        assert root.check_password("changed-by-root-later-1") and is_platform_admin(User.objects.get(pk=root.pk))
        assert AuditEvent.objects.filter(action="platform_admin.grant").count() == 2

    @pytest.mark.parametrize(("content", "message"), [(None, "No such file"), ("short", "too short")])
    def test_a_missing_or_weak_password_stops_with_the_reason(self, db, configured, content, message):
        if content is None:
            configured.unlink()
        else:
            configured.write_text(content)
        with pytest.raises(CommandError, match=message):
            call_command("bootstrap_platform_admin")
        assert not User.objects.filter(username="root").exists()

    def test_unset_does_nothing(self, db, settings):
        settings.PLATFORM_ADMIN_USERNAME = None
        call_command("bootstrap_platform_admin")
        assert not User.objects.exists()
