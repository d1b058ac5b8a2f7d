"""API keys over HTTP: mint (shown once, stored as a digest), list, revoke, who may do which;
publishing to the gateway's key namespace (the real `kubernetes` client against the API test
server) and to the local engine's key files; expiry; the pages."""

from __future__ import annotations

import hashlib
import stat
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from access.models import ApiKey
from access.services import key_lookup, key_mint, keys_expire
from core.models import AuditEvent
from deployments import services as deployment_services
from runtime import k8s
from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.keys import keys_for
from tests.runtime.test_local import make_spec
from tests.runtime.test_local_keys import VllmStandIn
from tests.support.factories import draft
from tests.support.processes import wait_for

K = "/api/v1/keys/"


@pytest.fixture
def eager(monkeypatch):
    """Tasks run in this process when their commit hook fires (as a worker would run them)."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)


@pytest.fixture
def gateway(settings, tmp_path):
    settings.GATEWAY_PUBLIC_URL = "https://llm.example.com"
    settings.API_KEY_NAMESPACE = "kuadrant-system"
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
    return settings


def mint(world, role="member", **body):
    return world.client(role).post(K, {"tenant": "alpha", "name": "ci", **body}, format="json")


def dep(world, tenant=None, name="chat"):
    user = world.users["member" if tenant is None else "other_member"]
    return deployment_services.deployment_create(
        tenant=tenant or world.alpha, user=user, data=draft(world, name=name, max_replicas=1)
    )


class TestMint:
    def test_the_key_is_shown_once_and_only_its_digest_is_kept(self, world):
        response = mint(world, expires_in_days=30)
        assert response.status_code == 201, response.content
        body = response.json()
        plaintext = body["key"]
        assert plaintext.startswith("llmp_") and len(plaintext) > 40
        row = ApiKey.objects.get(pk=body["id"])
        assert row.key_hash == hashlib.sha256(plaintext.encode()).hexdigest()
        assert plaintext not in str(ApiKey.objects.filter(pk=row.pk).values().first())
        assert body["prefix"] == plaintext[: len(body["prefix"])] and body["scope"] == "tenant"
        assert 29 <= (row.expires_at - timezone.now()).days <= 30
        listed = world.client("member").get(K).json()["results"]
        assert [k["id"] for k in listed] == [row.pk] and "key" not in listed[0]
        assert "key" not in world.client("member").get(f"{K}{row.pk}/").json()
        assert key_lookup(plaintext) == row and key_lookup(plaintext + "x") is None
        assert AuditEvent.objects.filter(action="apikey.mint", object_id=str(row.pk)).exists()

    def test_a_key_scoped_to_a_deployment(self, world):
        d = dep(world)
        response = mint(world, deployment=d.pk)
        assert response.status_code == 201 and response.json()["scope"] == "deployment"
        assert response.json()["deployment"] == d.pk

    def test_another_tenants_deployment_is_refused_with_the_field(self, world):
        other = dep(world, tenant=world.beta, name="beta-chat")
        response = mint(world, deployment=other.pk)
        assert response.status_code == 400 and "deployment" in response.json()
        assert not ApiKey.objects.exists()

    def test_a_deployment_alone_names_its_tenant(self, world):
        d = dep(world)
        response = world.client("member").post(K, {"deployment": d.pk, "name": "ci"}, format="json")
        assert response.status_code == 201, response.content
        assert (response.json()["tenant"], response.json()["deployment"]) == ("alpha", d.pk)

    def test_a_deployment_of_another_tenant_than_the_one_named_is_a_400_on_the_field(self, world):
        other = dep(world, tenant=world.beta, name="beta-chat")
        response = world.client("platform_admin").post(
            K, {"tenant": "alpha", "deployment": other.pk, "name": "x"}, format="json"
        )
        assert response.status_code == 400
        assert response.json()["deployment"] == ["That deployment belongs to beta, not alpha."]
        assert not ApiKey.objects.exists()

    def test_neither_tenant_nor_deployment_is_a_400_on_the_tenant(self, world):
        response = world.client("member").post(K, {"name": "x"}, format="json")
        assert response.status_code == 400 and "tenant" in response.json()
        assert not ApiKey.objects.exists()

    def test_a_viewer_naming_only_a_deployment_is_still_refused(self, world):
        d = dep(world)
        assert world.client("viewer").post(K, {"deployment": d.pk, "name": "x"}, format="json").status_code == 403
        assert world.client("other_member").post(K, {"deployment": d.pk, "name": "x"}, format="json").status_code == 400
        assert not ApiKey.objects.exists()

    @pytest.mark.parametrize(
        "body, field",
        [
            ({"name": "no/slashes"}, "name"),
            ({"name": ""}, "name"),
            ({"name": "x" * 101}, "name"),
            ({"expires_in_days": 0}, "expires_in_days"),
            ({"expires_in_days": 366}, "expires_in_days"),
            ({"tenant": "Alpha!"}, "tenant"),
            ({"deployment": "one"}, "deployment"),
            ({"deployment": 2**40}, "deployment"),
        ],
    )
    def test_bad_input_is_a_400_naming_the_field_and_nothing_is_written(self, world, body, field):
        response = mint(world, **body)
        assert response.status_code == 400 and field in response.json(), response.content
        assert not ApiKey.objects.exists()

    def test_viewers_may_not_mint_and_other_tenants_do_not_see_the_tenant(self, world):
        assert mint(world, "viewer").status_code == 403
        assert mint(world, "other_member").status_code == 404
        assert mint(world, "anonymous").status_code == 401
        assert not ApiKey.objects.exists()

    def test_an_archived_tenant_mints_no_keys(self, world):
        type(world.alpha).objects.filter(pk=world.alpha.pk).update(archived_at=timezone.now())
        assert mint(world, "platform_admin").status_code == 409


class TestRevoke:
    def revoke(self, world, role, key_id):
        return world.client(role).post(f"{K}{key_id}/revoke/", {"reason": "rotated"}, format="json")

    def test_members_revoke_their_own_keys_and_tenant_admins_any(self, world):
        own = mint(world).json()["id"]
        admins = mint(world, "tenant_admin").json()["id"]
        assert self.revoke(world, "viewer", own).status_code == 403
        assert self.revoke(world, "other_member", own).status_code == 404
        assert self.revoke(world, "member", admins).status_code == 403
        assert self.revoke(world, "member", own).status_code == 200
        assert self.revoke(world, "tenant_admin", mint(world).json()["id"]).status_code == 200
        assert self.revoke(world, "platform_admin", admins).status_code == 200
        assert ApiKey.objects.filter(revoked_at__isnull=True).count() == 0

    def test_a_second_revoke_is_a_conflict_and_the_key_stops_working(self, world):
        body = mint(world).json()
        assert self.revoke(world, "member", body["id"]).json()["status"] == "revoked"
        assert self.revoke(world, "member", body["id"]).status_code == 409
        assert key_lookup(body["key"]) is None
        assert AuditEvent.objects.filter(action="apikey.revoke", object_id=str(body["id"])).count() == 1

    def test_the_list_says_who_may_revoke_and_filters_by_status(self, world):
        own = mint(world).json()["id"]
        admins = mint(world, "tenant_admin").json()["id"]
        listed = {k["id"]: k["can_revoke"] for k in world.client("member").get(K).json()["results"]}
        assert listed == {own: True, admins: False}
        viewer = world.client("viewer").get(K).json()["results"]
        assert {k["can_revoke"] for k in viewer} == {False}
        self.revoke(world, "member", own)
        active = world.client("member").get(K, {"status": "active"}).json()["results"]
        assert [k["id"] for k in active] == [admins]
        assert world.client("other_member").get(K).json()["results"] == []


class TestPublishing:
    def test_a_minted_key_becomes_a_labelled_secret_in_the_key_namespace_and_revoking_deletes_it(
        self, world, cluster_api, gateway, eager, django_capture_on_commit_callbacks
    ):
        d = dep(world)
        with django_capture_on_commit_callbacks(execute=True):
            body = mint(world, deployment=d.pk).json()
        secret = cluster_api.get_object(k8s.SECRET, f"llm-portal-key-{body['id']}", "kuadrant-system")
        assert secret is not None
        labels = secret["metadata"]["labels"]
        assert labels["llm-portal.io/deployment-id"] == str(d.pk) and labels["llm-portal.io/tenant"] == "alpha"
        assert labels["authorino.kuadrant.io/managed-by"] == "authorino"
        assert ApiKey.objects.get(pk=body["id"]).gateway_state == "published"
        # The local engines' copy, readable by the portal's user only.
        files = list((gateway.LOCAL_RUNTIME_DIR / "keys" / "alpha").glob("*.json"))
        assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600
        assert keys_for(gateway.LOCAL_RUNTIME_DIR, "alpha", d.pk) == [body["key"]]
        assert keys_for(gateway.LOCAL_RUNTIME_DIR, "alpha", d.pk + 1) == []
        with django_capture_on_commit_callbacks(execute=True):
            world.client("member").post(f"{K}{body['id']}/revoke/", {}, format="json")
        assert cluster_api.get_object(k8s.SECRET, f"llm-portal-key-{body['id']}", "kuadrant-system") is None
        assert keys_for(gateway.LOCAL_RUNTIME_DIR, "alpha", d.pk) == []
        assert ApiKey.objects.get(pk=body["id"]).gateway_state == "withdrawn"

    def test_a_tenant_key_is_accepted_by_every_deployment_of_the_tenant_only(
        self, world, gateway, eager, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            key = mint(world).json()["key"]
        assert keys_for(gateway.LOCAL_RUNTIME_DIR, "alpha", 1) == keys_for(gateway.LOCAL_RUNTIME_DIR, "alpha", 99)
        assert keys_for(gateway.LOCAL_RUNTIME_DIR, "alpha", 1) == [key]
        assert keys_for(gateway.LOCAL_RUNTIME_DIR, "beta", 1) == []

    def test_the_plaintext_never_reaches_the_broker_in_clear(self, world, gateway, django_capture_on_commit_callbacks):
        from access import tasks

        sent = []
        original = tasks.publish_key_task.delay
        tasks.publish_key_task.delay = lambda *args: sent.append(args)
        try:
            with django_capture_on_commit_callbacks(execute=True):
                key = mint(world).json()["key"]
        finally:
            tasks.publish_key_task.delay = original
        assert len(sent) == 1 and key not in repr(sent) and key[5:] not in repr(sent)

    def test_an_expired_key_is_withdrawn_by_the_sweep(
        self, world, cluster_api, gateway, eager, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            body = mint(world).json()
        ApiKey.objects.filter(pk=body["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
        with django_capture_on_commit_callbacks(execute=True):
            assert keys_expire() == [body["id"]]
        assert cluster_api.get_object(k8s.SECRET, f"llm-portal-key-{body['id']}", "kuadrant-system") is None
        assert keys_for(gateway.LOCAL_RUNTIME_DIR, "alpha", 1) == []
        assert keys_expire() == []  # once

    def test_a_revoked_key_whose_withdrawal_was_lost_is_withdrawn_again(
        self, world, cluster_api, gateway, eager, django_capture_on_commit_callbacks
    ):
        """A revocation whose withdraw task the broker lost (a restart, a restore) leaves the key's
        gateway Secret open; the every-minute sweep sends the withdrawal again after the grace."""
        with django_capture_on_commit_callbacks(execute=True):
            body = mint(world).json()
        name = f"llm-portal-key-{body['id']}"
        assert cluster_api.get_object(k8s.SECRET, name, "kuadrant-system") is not None
        revoked = timezone.now() - timedelta(minutes=1)
        ApiKey.objects.filter(pk=body["id"]).update(revoked_at=revoked)  # revoked; its task lost
        assert keys_expire() == []  # within the grace its own task may still be running
        ApiKey.objects.filter(pk=body["id"]).update(revoked_at=revoked - timedelta(minutes=5))
        assert keys_expire() == [body["id"]]
        assert cluster_api.get_object(k8s.SECRET, name, "kuadrant-system") is None
        assert ApiKey.objects.get(pk=body["id"]).gateway_state == "withdrawn"
        assert keys_expire() == []  # once

    def test_a_deleted_deployments_keys_are_revoked_and_withdrawn_by_the_sweep(
        self, world, gateway, eager, django_capture_on_commit_callbacks
    ):
        d = dep(world)
        with django_capture_on_commit_callbacks(execute=True):
            scoped = mint(world, deployment=d.pk).json()
            tenant_wide = mint(world).json()
        type(d).objects.filter(pk=d.pk).update(state="deleted")
        with django_capture_on_commit_callbacks(execute=True):
            assert keys_expire() == [scoped["id"]]
        assert ApiKey.objects.get(pk=scoped["id"]).status == "revoked"
        assert ApiKey.objects.get(pk=tenant_wide["id"]).status == "active"
        assert keys_for(gateway.LOCAL_RUNTIME_DIR, "alpha", d.pk) == [tenant_wide["key"]]
        event = AuditEvent.objects.get(action="apikey.revoke", object_id=str(scoped["id"]))
        assert event.actor_name == "system" and "deleted" in event.reason


class TestPages:
    def test_mint_page_shows_the_key_once_and_the_list_never(self, world):
        browser = world.browser("member")
        assert browser.get("/keys/new/").status_code == 200
        response = browser.post("/keys/new/", {"tenant": "alpha", "name": "laptop", "expires_in_days": 7})
        assert response.status_code == 200 and "no-store" in response.get("Cache-Control", "")
        key = ApiKey.objects.get()
        html = response.content.decode()
        assert "not shown again" in html and key.prefix in html
        listing = browser.get("/keys/").content.decode()
        assert key.prefix in listing and html.split('id="new-key"')[1].split(">")[1].split("<")[0] not in listing

    def test_bad_input_is_a_form_error_and_viewers_are_refused(self, world):
        response = world.browser("member").post("/keys/new/", {"tenant": "alpha", "name": "a/b", "expires_in_days": 7})
        assert response.status_code == 200 and not ApiKey.objects.exists()
        assert "letters, digits" in response.content.decode().lower()
        world.browser("viewer").post("/keys/new/", {"tenant": "alpha", "name": "x", "expires_in_days": 7})
        assert not ApiKey.objects.exists()

    def test_revoke_from_the_list_asks_first(self, world):
        key, _ = key_mint(user=world.users["member"], tenant=world.alpha, name="old")
        admin = world.browser("tenant_admin")
        for asked in (admin.get(f"/keys/{key.pk}/revoke/"), admin.post(f"/keys/{key.pk}/revoke/")):
            assert asked.status_code == 200 and 'name="confirm"' in asked.content.decode()
        key.refresh_from_db()
        assert key.revoked_at is None  # asking changed nothing
        response = admin.post(f"/keys/{key.pk}/revoke/", {"confirm": "1"})
        assert response.status_code == 302
        key.refresh_from_db()
        assert key.revoked_at is not None
        assert world.browser("other_member").post(f"/keys/{key.pk}/revoke/", {"confirm": "1"}).status_code == 404

    def test_who_may_not_revoke_is_told_who_may_and_nothing_changes(self, world):
        key, _ = key_mint(user=world.users["tenant_admin"], tenant=world.alpha, name="admins")
        for role in ("viewer", "member"):
            response = world.browser(role).post(f"/keys/{key.pk}/revoke/", {"confirm": "1"})
            body = response.content.decode()
            assert response.status_code == 403 and "a tenant admin revokes any key" in body
            assert 'name="confirm"' not in body
        key.refresh_from_db()
        assert key.revoked_at is None


class TestMintForm:
    """The mint page: only the tenants and deployments the user may mint for; one tenant is
    preselected; a deployment alone names its tenant."""

    def test_a_one_tenant_member_finds_the_tenant_chosen(self, world):
        html = world.browser("member").get("/keys/new/").content.decode()
        select = html.split('name="tenant"')[1].split("</select>")[0]
        assert '<option value="alpha" selected>' in select and "---------" not in select and "beta" not in select

    def test_a_deployment_alone_mints_in_its_tenant(self, world):
        d = dep(world)
        response = world.browser("member").post("/keys/new/", {"deployment": d.pk, "name": "ci", "expires_in_days": 7})
        assert response.status_code == 200 and "not shown again" in response.content.decode()
        key = ApiKey.objects.get()
        assert (key.tenant, key.deployment) == (world.alpha, d)

    def test_a_platform_admin_lists_every_tenant_and_a_deployment_picks_it(self, world):
        other = dep(world, tenant=world.beta, name="beta-chat")
        admin = world.browser("platform_admin")
        html = admin.get("/keys/new/").content.decode()
        assert "The chosen deployment&#x27;s tenant" in html and "beta / beta-chat" in html
        admin.post("/keys/new/", {"deployment": other.pk, "name": "ops", "expires_in_days": 7})
        assert ApiKey.objects.get().tenant == world.beta

    def test_a_deployment_of_another_tenant_than_the_one_chosen_is_a_field_error(self, world):
        other = dep(world, tenant=world.beta, name="beta-chat")
        response = world.browser("platform_admin").post(
            "/keys/new/", {"tenant": "alpha", "deployment": other.pk, "name": "x", "expires_in_days": 7}
        )
        assert response.status_code == 200 and "belongs to beta, not alpha" in response.content.decode()
        assert not ApiKey.objects.exists()

    def test_neither_tenant_nor_deployment_is_a_field_error(self, world):
        User = type(world.users["member"])
        two = User.objects.create_user("two-tenants")
        world.alpha.memberships.create(user=two, role="member")
        world.beta.memberships.create(user=two, role="member")
        client = world.browser("anonymous")
        client.force_login(two)
        response = client.post("/keys/new/", {"name": "x", "expires_in_days": 7})
        assert response.status_code == 200 and "Choose a tenant, or a deployment" in response.content.decode()
        assert not ApiKey.objects.exists()

    def test_a_viewer_is_told_why_instead_of_shown_empty_lists(self, world):
        response = world.browser("viewer").get("/keys/new/")
        body = response.content.decode()
        assert response.status_code == 403 and "<form" not in body.split("<main")[1]
        assert "Viewers can read keys&#x27; names, dates and status; a member or tenant admin" in body
        assert world.browser("viewer").post("/keys/new/", {"tenant": "alpha", "name": "x"}).status_code == 403
        assert not ApiKey.objects.exists()

    def test_the_deployment_page_links_to_minting_only_for_those_who_may_mint(self, world):
        d = dep(world)
        link = f"/keys/new/?tenant=alpha&amp;deployment={d.pk}"
        for role, offered in (("viewer", False), ("member", True), ("tenant_admin", True), ("platform_admin", True)):
            html = world.browser(role).get(f"/deployments/{d.pk}/").content.decode()
            assert (link in html) is offered and ('id="key-mint-note"' in html) is not offered, role

    def test_the_list_says_why_a_viewer_has_no_mint_button(self, world):
        viewer = world.browser("viewer").get("/keys/").content.decode()
        member = world.browser("member").get("/keys/").content.decode()
        assert 'id="mint-note"' in viewer and "/keys/new/" not in viewer
        assert 'id="mint-note"' not in member and "/keys/new/" in member


class TestHostileForms:
    @pytest.mark.parametrize(
        "body",
        [
            {"tenant": "\x00", "name": "x", "expires_in_days": 7},
            {"tenant": "alpha", "deployment": "\x00", "name": "x", "expires_in_days": 7},
            {"tenant": "alpha", "deployment": "9" * 20, "name": "x", "expires_in_days": 7},
            {"tenant": "alpha", "name": "x\x00", "expires_in_days": 7},
            {"tenant": "alpha", "name": "x", "expires_in_days": "9" * 30},
            {"tenant": ["alpha", "beta"], "name": "x", "expires_in_days": 7},
        ],
    )
    def test_a_hostile_mint_form_is_refused_without_a_server_error(self, world, body):
        response = world.browser("member").post("/keys/new/", body)
        assert response.status_code == 200 and not ApiKey.objects.exists()
        assert b'class="error"' in response.content  # the form again, with the field's error

    @pytest.mark.parametrize(
        "body",
        [
            {"tenant": "alpha", "name": "x", "deployment": True},
            {"tenant": "alpha", "name": ["x"]},
            {"tenant": {"slug": "alpha"}, "name": "x"},
            {"tenant": "alpha", "name": "x", "expires_in_days": 1.5},
            {"tenant": "alpha", "name": "x", "expires_in_days": None},
        ],
    )
    def test_a_hostile_json_mint_is_a_400(self, world, body):
        response = world.client("member").post(K, body, format="json")
        assert response.status_code == 400 and not ApiKey.objects.exists(), response.content


class TestTheRunningLocalEngine:
    """Minting and revoking reach a running local engine (a stand-in posing as vLLM, wrapped in
    the real EngineKeyCheck) by the time the task ends, without restarting it."""

    @pytest.fixture
    def engine(self, world, gateway, monkeypatch):
        d = dep(world)
        type(d).objects.filter(pk=d.pk).update(state="ready", backend="local")
        backend = LocalBackend(
            gateway.LOCAL_RUNTIME_DIR,
            engine=VllmStandIn(),
            stop_timeout=5,
            model_root=Path("/models"),
            key_seed=gateway.SECRET_KEY,
        )
        monkeypatch.setattr(LocalBackend, "_instance", backend)  # what get_backend("local") returns
        spec = make_spec(d.pk, tenant_slug="alpha")
        backend.ensure(spec)
        wait_for(lambda: backend.observe(spec).state == "ready", timeout=30, what="the stand-in to serve")
        yield d, backend
        backend.remove(spec)

    def test_a_minted_key_works_at_once_and_a_revoked_one_is_refused_at_once_by_the_same_engine(
        self, world, engine, eager, django_capture_on_commit_callbacks
    ):
        d, backend = engine
        before = backend.load_state(d.pk)
        models = f"http://127.0.0.1:{before.ports[0]}/v1/models"

        def status(key):
            return requests.get(models, headers={"Authorization": f"Bearer {key}"}, timeout=5).status_code

        with django_capture_on_commit_callbacks(execute=True):
            body = mint(world, deployment=d.pk).json()
        assert status(body["key"]) == 200  # the publishing task has ended: no wait, no restart

        with django_capture_on_commit_callbacks(execute=True):
            assert world.client("member").post(f"{K}{body['id']}/revoke/", {}, format="json").status_code == 200
        assert status(body["key"]) == 401

        after = backend.load_state(d.pk)
        assert (after.pid, after.start_time, after.ports) == (before.pid, before.start_time, before.ports)
