"""SCIM 2.0 provisioning (portal.scim, portal.scim_views): the identity provider creates people,
puts them in groups named "tenant-slug:role", and takes them out again; a leaver's keys and
tokens go at once, without a sign-in. Everything over HTTP with the provider's bearer token."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from access.services import key_lookup, key_mint
from core.models import AuditEvent
from portal.api import ApiToken, token_create
from quotas.members import memberships_sync_from_idp
from quotas.models import Membership, is_platform_admin
from tests.portal.test_settings import load_settings

TOKEN = "scim-" + "s3cret" * 8
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
LIST = "urn:ietf:params:scim:api:messages:2.0:ListResponse"


class Idp:
    """The identity provider: JSON requests with its bearer token."""

    def __init__(self, token: str = TOKEN):
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    def __getattr__(self, method):
        def call(path: str, doc=None, raw: bytes | None = None, **extra):
            body = raw if raw is not None else (json.dumps(doc) if doc is not None else "")
            kwargs = {"content_type": "application/scim+json"} if method != "get" else {}
            args = (f"/scim/v2/{path}", doc or {}) if method == "get" else (f"/scim/v2/{path}", body)
            return getattr(self.client, method)(*args, **kwargs, **extra)

        return call


@pytest.fixture
def idp(settings) -> Idp:
    settings.SCIM_BEARER_TOKEN = TOKEN
    return Idp()


@pytest.fixture
def eager(monkeypatch, settings, tmp_path):
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"


def ops(*operations) -> dict:
    return {"schemas": [PATCH], "Operations": list(operations)}


def create_user(idp: Idp, username: str = "dana", email: str = "dana@example.org") -> str:
    doc = {"userName": username, "name": {"givenName": "Dana", "familyName": "Ng"}, "emails": [{"value": email}]}
    response = idp.post("Users", doc)
    assert response.status_code == 201, response.content
    return response.json()["id"]


def create_group(idp: Idp, name: str, *member_ids: str) -> str:
    response = idp.post("Groups", {"displayName": name, "members": [{"value": m} for m in member_ids]})
    assert response.status_code == 201, response.content
    return response.json()["id"]


def token_status(secret: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.get("/api/v1/me/").status_code


def assert_scim_error(response, status: int, scim_type: str | None = None) -> None:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/scim+json"
    doc = response.json()
    assert doc["schemas"] == [ERROR] and doc["status"] == str(status)
    assert doc.get("scimType") == scim_type


def roles_of(username: str) -> dict[str, tuple[str, str]]:
    rows = Membership.objects.filter(user__username=username)
    return {m.tenant.slug: (m.role, m.source) for m in rows}


class TestAuthentication:
    def test_it_is_a_404_when_not_configured(self, db, settings):
        settings.SCIM_BEARER_TOKEN = None
        assert_scim_error(Idp().get("Users"), 404)

    @pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", f"Token {TOKEN}", "Bearer "])
    def test_only_the_providers_token_gets_in(self, db, idp, header):
        client = Client(**({"HTTP_AUTHORIZATION": header} if header else {}))
        response = client.get("/scim/v2/Users")
        assert_scim_error(response, 401)
        assert response["WWW-Authenticate"].startswith("Bearer")

    def test_a_platform_admins_token_or_session_is_refused(self, world, idp):
        admin = world.users["platform_admin"]
        _, secret = token_create(user=admin, name="laptop")
        assert_scim_error(Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/scim/v2/Users"), 401)
        assert_scim_error(world.browser("platform_admin").get("/scim/v2/Users"), 401)


class TestLeaver:
    """The identity provider's sequence for a joiner who then leaves."""

    def test_removal_from_the_group_revokes_key_and_token(self, world, idp, eager):
        user_id = create_user(idp)
        group_id = create_group(idp, "alpha:member", user_id)
        assert roles_of("dana") == {"alpha": ("member", "scim")}
        dana = User.objects.get(username="dana")
        _, key = key_mint(user=dana, tenant=world.alpha, name="laptop")
        _, secret = token_create(user=dana, name="cli")
        assert key_lookup(key) is not None and token_status(secret) == 200

        response = idp.patch(f"Groups/{group_id}", ops({"op": "remove", "path": f'members[value eq "{user_id}"]'}))

        assert response.status_code == 200 and response.json()["members"] == []
        assert roles_of("dana") == {}
        assert key_lookup(key) is None
        assert token_status(secret) == 401
        changes = AuditEvent.objects.get(action="scim_group.change").changes
        assert changes["removed"] == [int(user_id)]
        assert AuditEvent.objects.get(action="membership.sync", changes__to=None).actor_name == "scim"

    def test_active_false_revokes_every_token_and_key(self, world, idp, eager):
        user_id = create_user(idp)
        create_group(idp, "alpha:member", user_id)
        dana = User.objects.get(username="dana")
        _, key = key_mint(user=dana, tenant=world.alpha, name="laptop")
        _, secret = token_create(user=dana, name="cli")

        # Entra ID's form: no path, and the value as a string.
        response = idp.patch(f"Users/{user_id}", ops({"op": "Replace", "value": {"active": "False"}}))

        assert response.status_code == 200 and response.json()["active"] is False
        assert not ApiToken.objects.filter(user=dana).exists() and token_status(secret) == 401
        assert key_lookup(key) is None
        event = AuditEvent.objects.get(action="user.deactivate")
        assert (event.actor_name, event.changes["to"]) == ("scim", {"is_active": False})

    def test_delete_deactivates_and_keeps_the_account(self, world, idp, eager):
        user_id = create_user(idp)
        _, secret = token_create(user=User.objects.get(pk=user_id), name="cli")
        assert idp.delete(f"Users/{user_id}").status_code == 204
        assert User.objects.get(pk=user_id).is_active is False and token_status(secret) == 401
        assert idp.get(f"Users/{user_id}").json()["active"] is False


class TestUsers:
    def test_filter_by_username_finds_exactly_that_user(self, world, idp):
        create_user(idp)
        create_user(idp, "dana2", "dana2@example.org")
        doc = idp.get("Users", {"filter": 'userName eq "dana"'}).json()
        assert doc["totalResults"] == 1 and [r["userName"] for r in doc["Resources"]] == ["dana"]
        assert idp.get("Users", {"filter": 'username EQ "nobody"'}).json()["totalResults"] == 0

    def test_it_creates_an_account_without_a_password(self, db, idp):
        user = User.objects.get(pk=create_user(idp))
        assert (user.email, user.first_name, user.is_active, user.has_usable_password()) == (
            "dana@example.org",
            "Dana",
            True,
            False,
        )
        assert AuditEvent.objects.get(action="user.provision").actor_name == "scim"

    def test_a_taken_username_or_email_is_a_409(self, world, idp):
        create_user(idp)
        assert_scim_error(idp.post("Users", {"userName": "dana"}), 409, "uniqueness")
        other = {"userName": "dee", "emails": [{"value": "dana@EXAMPLE.org"}]}
        assert_scim_error(idp.post("Users", other), 409, "uniqueness")

    @pytest.mark.parametrize(
        "doc",
        [
            {"userName": "has space"},
            {"userName": ""},
            {"userName": "x" * 151},
            {"emails": [{"value": "dana@example.org"}]},
            {"userName": "dana", "emails": [{"value": "not-an-address"}]},
            {"userName": "dana", "emails": "dana@example.org"},
            {"userName": "dana", "active": "maybe"},
            {"userName": "dana", "name": {"givenName": "a\x00b"}},
            {"userName": ["dana"]},
        ],
    )
    def test_bad_attributes_are_a_400(self, db, idp, doc):
        assert_scim_error(idp.post("Users", doc), 400, "invalidValue")
        assert not User.objects.exists()

    def test_put_replaces_the_attributes(self, db, idp):
        user_id = create_user(idp)
        doc = {"userName": "dana.ng", "emails": [{"value": "dn@example.org", "primary": True}], "title": "x"}
        response = idp.put(f"Users/{user_id}", doc)
        assert response.status_code == 200
        assert User.objects.filter(pk=user_id, username="dana.ng", email="dn@example.org").exists()


class TestGroups:
    def test_the_highest_role_of_several_groups_wins_and_removal_demotes(self, world, idp):
        user_id = create_user(idp)
        create_group(idp, "alpha:viewer", user_id)
        admins = create_group(idp, "alpha:tenant_admin", user_id)
        assert roles_of("dana") == {"alpha": ("tenant_admin", "scim")}
        idp.patch(f"Groups/{admins}", ops({"op": "replace", "path": "members", "value": []}))
        assert roles_of("dana") == {"alpha": ("viewer", "scim")}

    def test_a_name_that_maps_to_nothing_is_kept_and_grants_nothing(self, world, idp):
        user_id = create_user(idp)
        for name in ("engineering", "gamma:member", "alpha:owner"):
            create_group(idp, name, user_id)
        assert roles_of("dana") == {}
        assert idp.get("Groups", {"filter": 'displayName eq "engineering"'}).json()["totalResults"] == 1

    def test_a_name_in_the_oidc_mapping_grants_its_roles(self, world, idp, settings):
        settings.OIDC_GROUP_ROLES = {"ml-team": (("alpha", "member"), ("beta", "viewer"))}
        create_group(idp, "ml-team", create_user(idp))
        assert roles_of("dana") == {"alpha": ("member", "scim"), "beta": ("viewer", "scim")}

    def test_platform_admin_groups_grant_and_take_the_standing(self, world, idp, settings):
        settings.OIDC_PLATFORM_ADMIN_GROUPS = ["portal-admins"]
        user_id = create_user(idp)
        group_id = create_group(idp, "portal-admins", user_id)
        assert is_platform_admin(User.objects.get(pk=user_id))
        assert idp.delete(f"Groups/{group_id}").status_code == 204
        assert not is_platform_admin(User.objects.get(pk=user_id))

    def test_add_and_remove_members_in_one_patch(self, world, idp):
        one, two = create_user(idp), create_user(idp, "eli", "eli@example.org")
        group_id = create_group(idp, "beta:member", one)
        patch = ops(
            {"op": "add", "path": "members", "value": [{"value": two}]},
            {"op": "remove", "path": "members", "value": [{"value": one}]},
        )
        assert [m["value"] for m in idp.patch(f"Groups/{group_id}", patch).json()["members"]] == [two]
        assert roles_of("dana") == {} and roles_of("eli") == {"beta": ("member", "scim")}

    def test_the_last_tenant_admin_rule_does_not_bind_the_provider(self, world, idp):
        world.users["tenant_admin"].memberships.all().delete()  # dana will be alpha's only admin
        group_id = create_group(idp, "alpha:tenant_admin", create_user(idp))
        assert idp.delete(f"Groups/{group_id}").status_code == 204
        assert roles_of("dana") == {}

    def test_a_hand_added_membership_and_sign_in_sync_leave_each_other_alone(self, world, idp):
        user_id = create_user(idp)
        dana = User.objects.get(pk=user_id)
        Membership.objects.create(user=dana, tenant=world.beta, role="viewer")  # by hand
        create_group(idp, "alpha:member", user_id)
        memberships_sync_from_idp(user=dana, roles={})  # a sign-in whose claim maps no group
        assert roles_of("dana") == {"alpha": ("member", "scim"), "beta": ("viewer", "manual")}

    def test_a_duplicate_name_is_a_409_and_unknown_members_a_400(self, world, idp):
        create_group(idp, "alpha:member")
        assert_scim_error(idp.post("Groups", {"displayName": "alpha:member"}), 409, "uniqueness")
        bad = {"displayName": "beta:member", "members": [{"value": "999999"}]}
        assert_scim_error(idp.post("Groups", bad), 400, "invalidValue")


class TestHostileInput:
    @pytest.mark.parametrize(
        ("method", "path", "raw", "status", "scim_type"),
        [
            ("post", "Users", b"{not json", 400, "invalidSyntax"),
            ("post", "Users", b"[]", 400, "invalidSyntax"),
            ("post", "Users", b"\xff\xfe", 400, "invalidSyntax"),
            ("post", "Users", b"[" * 100_000, 400, "invalidSyntax"),
            ("post", "Users", b'{"userName": "eve", "name": {"givenName": "\\ud800"}}', 400, "invalidValue"),
            ("post", "Users", b'{"userName": "eve", "\\u0000": 1}', 400, "invalidValue"),
            ("post", "Users", b'{"userName": "eve", "emails": [{"value": 5}]}', 400, "invalidValue"),
            ("post", "Groups", b'{"displayName": "\\udfff"}', 400, "invalidValue"),
            ("post", "Groups", b'{"displayName": ""}', 400, "invalidValue"),
            ("post", "Groups", b'{"displayName": "g", "members": [{"value": "x"}]}', 400, "invalidValue"),
            ("post", "Groups", b'{"displayName": "g", "members": {"value": 1}}', 400, "invalidValue"),
            ("patch", "Users/{user}", b'{"Operations": []}', 400, "invalidSyntax"),
            ("patch", "Users/{user}", b'{"Operations": [{"op": "explode"}]}', 400, "invalidSyntax"),
            (
                "patch",
                "Users/{user}",
                b'{"Operations": [{"op": "replace", "path": "nickName", "value": "x"}]}',
                400,
                "invalidPath",
            ),
            ("patch", "Users/{user}", b'{"Operations": [{"op": "add", "value": {"shoeSize": 9}}]}', 400, "invalidPath"),
            ("patch", "Users/{user}", b'{"Operations": [{"op": "remove", "path": "userName"}]}', 400, "mutability"),
            (
                "patch",
                "Groups/{group}",
                b'{"Operations": [{"op": "replace", "path": "owner", "value": 1}]}',
                400,
                "invalidPath",
            ),
            (
                "patch",
                "Groups/{group}",
                b'{"Operations": [{"op": "add", "path": "members", "value": "1"}]}',
                400,
                "invalidValue",
            ),
            (
                "patch",
                "Users/999999",
                b'{"Operations": [{"op": "replace", "path": "active", "value": false}]}',
                404,
                None,
            ),
            ("get", "Users/abc", b"", 404, None),
            ("get", "Users/" + "9" * 40, b"", 404, None),
            ("get", "Groups/-1", b"", 404, None),
            ("get", "Schemas/urn:nothing", b"", 404, None),
            ("post", "ServiceProviderConfig", b"{}", 405, None),
        ],
    )
    def test_it_answers_with_a_scim_error(self, world, idp, method, path, raw, status, scim_type):
        user_id = create_user(idp)
        path = path.format(user=user_id, group=create_group(idp, "alpha:viewer", user_id))
        response = idp.get(path) if method == "get" else getattr(idp, method)(path, raw=raw)
        assert_scim_error(response, status, scim_type)
        assert roles_of("dana") == {"alpha": ("viewer", "scim")} and User.objects.get(pk=user_id).is_active

    @pytest.mark.parametrize(
        "query",
        [
            {"filter": "userName co dana"},
            {"filter": 'userName eq "dana" or userName eq "x"'},
            {"filter": 'password eq "x"'},
            {"filter": 'userName eq "\\q"'},
            {"filter": 'userName eq "da\x00na"'},  # a raw control character is no JSON string
            {"filter": 'userName eq "' + "a" * 2000 + '"'},
            {"startIndex": "one"},
        ],
    )
    def test_bad_filters_and_pages_are_a_400(self, db, idp, query):
        response = idp.get("Users", query)
        assert_scim_error(response, 400, "invalidValue" if "startIndex" in query else "invalidFilter")

    def test_a_huge_body_is_a_413(self, db, idp, settings):
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
        assert_scim_error(idp.post("Users", {"userName": "dana", "title": "x" * 2000}), 413)
        assert not User.objects.exists()

    @pytest.mark.parametrize("value", ["da\\u0000na", "\\ud800"])
    def test_unstorable_text_in_a_filter_finds_nothing(self, db, idp, value):
        create_user(idp)
        response = idp.get("Users", {"filter": f'userName eq "{value}"'})
        assert response.status_code == 200 and response.json()["totalResults"] == 0


class TestDiscovery:
    def test_config_types_and_schemas(self, db, idp):
        assert idp.get("ServiceProviderConfig").json()["patch"] == {"supported": True}
        types = idp.get("ResourceTypes").json()["Resources"]
        assert [(t["id"], t["endpoint"]) for t in types] == [("User", "/Users"), ("Group", "/Groups")]
        user_schema = idp.get("Schemas/urn:ietf:params:scim:schemas:core:2.0:User").json()
        assert "userName" in [a["name"] for a in user_schema["attributes"]]


BIG = "9" * 20  # past PostgreSQL's bigint
HOSTILE_PATHS = [
    "Users/%00",
    f"Users/{BIG}",
    "Users?filter=%00",
    'Users?filter=userName%20eq%20"%00"',
    f"Users?startIndex={BIG}&count={BIG}",
    "Users?startIndex=-5&count=-5",
    "Groups?excludedAttributes=%00",
    f"Groups/{BIG}",
    "Groups/%00",
    "Schemas/%00",
    "ResourceTypes/" + "a" * 3000,
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_a_hostile_path_is_never_a_server_error(db, idp, path):
    for method in ("get", "post", "put", "patch", "delete"):
        response = getattr(idp.client, method)(f"/scim/v2/{path}")
        assert response.status_code < 500, (method, response.status_code)
        assert response.json()["schemas"] == [ERROR if response.status_code >= 400 else LIST]


class TestConfiguration:
    def test_a_short_or_unreadable_token_file_stops_startup(self, tmp_path):
        short = tmp_path / "short"
        short.write_text("abc\n")
        result = load_settings(SCIM_BEARER_TOKEN_FILE=str(short))
        assert result.returncode != 0 and "SCIM_BEARER_TOKEN_FILE: the token must be at least 32" in result.stderr
        result = load_settings(SCIM_BEARER_TOKEN_FILE=str(tmp_path / "missing"))
        assert result.returncode != 0 and "SCIM_BEARER_TOKEN_FILE: No such file" in result.stderr

    def test_a_good_token_file_starts(self, tmp_path):
        token = tmp_path / "token"
        token.write_text(TOKEN + "\n")
        assert load_settings(SCIM_BEARER_TOKEN_FILE=str(token)).returncode == 0
