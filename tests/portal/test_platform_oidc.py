"""Provider groups → tenant roles: the mapping setting (checked at start-up) and the membership
sync run at each sign-in. The whole sign-in against a real OpenID provider, in Chromium, is
tests/browser/test_platform_admin.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.contrib.auth.models import User

from core.models import AuditEvent
from portal.oidc_groups import MappingError, groups_of, parse_group_roles, roles_for
from quotas.choices import MembershipSource
from quotas.members import memberships_sync_from_idp, platform_admin_sync_from_idp
from quotas.models import Membership, is_platform_admin
from tests.support.shared import PROJECT_ROOT


class TestMapping:
    def test_any_group_spelling_and_several_grants_per_group(self):
        mapping = parse_group_roles(
            '{"cn=ml,ou=groups,dc=example": "alpha:member", "/ml/leads": ["alpha:tenant_admin", "beta:viewer"]}'
        )
        assert mapping == {
            "cn=ml,ou=groups,dc=example": (("alpha", "member"),),
            "/ml/leads": (("alpha", "tenant_admin"), ("beta", "viewer")),
        }

    @pytest.mark.parametrize(
        "text, message",
        [
            ("not json", "not JSON"),
            ('["a"]', "expected a JSON object"),
            ('{"g": "alpha"}', "expected 'tenant-slug:role'"),
            ('{"g": "Alpha:member"}', "is not a tenant slug"),
            ('{"g": "alpha:owner"}', "role 'owner' is not one of"),
            ('{"g": []}', "no grants"),
        ],
    )
    def test_a_malformed_mapping_is_refused_with_where(self, text, message):
        with pytest.raises(MappingError, match=message):
            parse_group_roles(text)

    def test_the_portal_refuses_to_start_with_a_malformed_mapping(self):
        env = {**os.environ, "OIDC_GROUP_ROLES": '{"g": "alpha:owner"}', "DJANGO_SETTINGS_MODULE": "portal.settings"}
        result = subprocess.run(
            [sys.executable, "-c", "import django; django.setup()"],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode != 0 and "OIDC_GROUP_ROLES: group 'g': role 'owner'" in result.stderr

    def test_the_highest_role_wins_and_odd_claims_are_ignored(self):
        mapping = parse_group_roles('{"a": "alpha:viewer", "b": "alpha:tenant_admin", "c": "alpha:member"}')
        assert roles_for(["a", "b", "c"], mapping) == {"alpha": "tenant_admin"}
        assert groups_of({"groups": "a"}, "groups") == ["a"]
        assert groups_of({"groups": [{"id": 1}, "b", 3]}, "groups") == ["b"]
        assert groups_of({}, "groups") == []


class TestMembershipSync:
    def test_grants_create_update_and_remove_only_provider_memberships(self, world):
        dana = User.objects.create_user("dana", "dana@example.org")
        memberships_sync_from_idp(user=dana, roles={"alpha": "member", "beta": "viewer", "nowhere": "member"})
        assert set(Membership.objects.filter(user=dana).values_list("tenant__slug", "role", "source")) == {
            ("alpha", "member", MembershipSource.IDP),
            ("beta", "viewer", MembershipSource.IDP),
        }
        changed = memberships_sync_from_idp(user=dana, roles={"alpha": "tenant_admin"})
        assert changed == {"alpha": ("member", "tenant_admin"), "beta": ("viewer", None)}
        assert list(Membership.objects.filter(user=dana).values_list("tenant__slug", "role")) == [
            ("alpha", "tenant_admin")
        ]
        entries = AuditEvent.objects.filter(action="membership.sync", actor_name="identity-provider")
        assert entries.count() == 4

    def test_a_membership_added_by_hand_stays_unless_a_group_takes_it_over(self, world):
        member = world.users["member"]  # added by hand in alpha
        assert memberships_sync_from_idp(user=member, roles={}) == {}
        assert Membership.objects.get(user=member).source == MembershipSource.MANUAL
        memberships_sync_from_idp(user=member, roles={"alpha": "viewer"})
        taken = Membership.objects.get(user=member)
        assert (taken.role, taken.source) == ("viewer", MembershipSource.IDP)
        memberships_sync_from_idp(user=member, roles={})
        assert not Membership.objects.filter(user=member).exists()

    def test_archived_tenants_are_not_joined(self, world):
        world.alpha.archived_at = "2026-12-01T00:00:00Z"
        world.alpha.save()
        dana = User.objects.create_user("dana")
        assert memberships_sync_from_idp(user=dana, roles={"alpha": "member"}) == {}

    def test_platform_admin_follows_the_group_and_is_audited(self, world):
        dana = User.objects.create_user("dana")
        assert platform_admin_sync_from_idp(user=dana, is_admin=True) is True
        assert is_platform_admin(User.objects.get(pk=dana.pk))
        assert platform_admin_sync_from_idp(user=dana, is_admin=True) is None
        assert platform_admin_sync_from_idp(user=dana, is_admin=False) is False
        assert not is_platform_admin(User.objects.get(pk=dana.pk))
        assert list(AuditEvent.objects.values_list("action", flat=True).order_by("pk")) == [
            "platform_admin.grant",
            "platform_admin.revoke",
        ]


class TestBackend:
    @pytest.fixture
    def backend(self, settings):
        from portal.oidc import PortalOIDCBackend

        settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = "portal", "secret"
        settings.OIDC_OP_TOKEN_ENDPOINT = "http://127.0.0.1:1/token"
        settings.OIDC_OP_USER_ENDPOINT = "http://127.0.0.1:1/me"
        settings.OIDC_OP_JWKS_ENDPOINT = "http://127.0.0.1:1/jwks"
        settings.OIDC_RP_SIGN_ALGO = "RS256"
        settings.OIDC_GROUP_ROLES = parse_group_roles('{"ml-alpha": "alpha:member"}')
        return PortalOIDCBackend()

    @pytest.mark.parametrize(
        "claims",
        [
            {"email": "a@example.org", "email_verified": False},
            {"email": "a@example.org", "email_verified": "false"},  # some providers send strings
            {"email": "a@example.org", "email_verified": "true"},  # not a boolean either
            {"email": "a@example.org", "email_verified": 1},
            {"email": "a@example.org", "email_verified": None},
            {"email": "a@example.org"},  # a provider that does not say
            {"email": ["a@example.org"], "email_verified": True},
            {"email": "not an address", "email_verified": True},
            {"email": "", "email_verified": True},
            {"preferred_username": "a", "email_verified": True},
        ],
    )
    def test_only_a_boolean_true_verified_address_opens_anything(self, world, backend, claims):
        User.objects.create_user("a", "a@example.org")
        assert backend.verify_claims(claims) is False
        assert list(backend.filter_users_by_claims(claims)) == []

    def test_a_verified_address_opens_the_account_it_names_under_the_one_rule(self, world, backend):
        dana = User.objects.create_user("dana", "dana@example.org")
        claims = {"email": "dana@EXAMPLE.org", "email_verified": True}
        assert backend.verify_claims(claims) is True
        assert list(backend.filter_users_by_claims(claims)) == [dana]
        assert list(backend.filter_users_by_claims({**claims, "email": "DANA@example.org"})) == []

    def test_accounts_are_named_from_the_claim_unless_taken_or_invalid(self, world, backend):
        verified = {"email_verified": True}
        dana = backend.create_user(
            {"email": "dana@example.org", "preferred_username": "dana", "groups": ["ml-alpha"], **verified}
        )
        assert dana.username == "dana" and world.alpha.role_of(dana) == "member"
        other = backend.create_user({"email": "dana2@example.org", "preferred_username": "dana", **verified})
        odd = backend.create_user({"email": "odd@example.org", "preferred_username": "a b/c", **verified})
        assert other.username not in ("dana", "") and odd.username != "a b/c"
