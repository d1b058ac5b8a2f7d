"""A tenant's write-only credentials (quotas.tenant_secrets): set, rotated and deleted in the API and
the browser by tenant admins and platform admins, written as Secrets in the tenant namespace
through the real `kubernetes` client against the API test server, audited, never shown again, and
used by the tenant's deployments that name no Hugging Face Secret of their own."""

import json
import threading

import pytest

from core.models import AuditEvent
from deployments import services
from deployments.specs import deployment_spec
from quotas.models import Tenant, TenantSecret
from runtime import k8s
from tests.support.factories import draft
from tests.support.world import check_matrix

HF = "/api/v1/tenants/alpha/credentials/hf_token/"
S3 = "/api/v1/tenants/alpha/credentials/s3/"
TOKEN = "hf_SecretTokenValue0123456789abcdWXYZ"
S3_VALUES = {
    "access_key_id": "AKIAEXAMPLEKEYID9876",
    "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY",
    "endpoint": "https://minio.example.com:9000/",
    "region": "eu-west-1",
}


def secret(api, name="llm-portal-hf-token", namespace="alpha"):
    return api.get_object(k8s.SECRET, name, namespace)


def values_of(obj) -> dict:
    """The values the portal wrote (stringData; the test server stores it as sent)."""
    return obj["stringData"]


def shows_nothing_secret(text: str) -> bool:
    secrets = (TOKEN, S3_VALUES["access_key_id"], S3_VALUES["secret_access_key"], TOKEN[:-4], TOKEN[3:12])
    return not any(value in text for value in secrets)


class TestTheApi:
    def test_a_tenant_admin_sets_the_token_and_gets_back_only_who_when_and_its_end(self, world, cluster_api):
        response = world.client("tenant_admin").put(HF, {"token": TOKEN}, format="json")
        assert response.status_code == 200
        assert response.json() == {
            "kind": "hf_token",
            "label": "Hugging Face token",
            "secret_name": "llm-portal-hf-token",
            "set": True,
            "set_at": response.json()["set_at"],
            "set_by": "alpha-tenant_admin",
            "ends_in": "WXYZ",
        }
        obj = secret(cluster_api)
        assert values_of(obj) == {"HF_TOKEN": TOKEN} and obj["type"] == "Opaque"
        assert obj["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "llm-portal",
            "llm-portal.io/tenant": "alpha",
        }
        row = TenantSecret.objects.get(tenant=world.alpha, kind="hf_token")
        assert row.fingerprint == "WXYZ" and row.set_by == world.users["tenant_admin"]
        # Nothing readable in the database: no column of any row holds the value.
        assert shows_nothing_secret(json.dumps(list(TenantSecret.objects.values()), default=str))

    def test_s3_credentials_fill_the_aws_variables_and_keep_only_the_key_ids_end(self, world, cluster_api):
        response = world.client("platform_admin").put(S3, S3_VALUES, format="json")
        assert response.status_code == 200 and response.json()["ends_in"] == "9876"
        assert values_of(secret(cluster_api, "llm-portal-s3")) == {
            "AWS_ACCESS_KEY_ID": S3_VALUES["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": S3_VALUES["secret_access_key"],
            "AWS_ENDPOINT_URL": "https://minio.example.com:9000",
            "AWS_DEFAULT_REGION": "eu-west-1",
        }
        world.client("platform_admin").put(S3, {**S3_VALUES, "endpoint": "", "region": ""}, format="json")
        written = values_of(secret(cluster_api, "llm-portal-s3"))
        assert written["AWS_ENDPOINT_URL"] == "https://s3.us-east-1.amazonaws.com"
        assert written["AWS_DEFAULT_REGION"] == "us-east-1"

    def test_who_may_set_delete_and_see(self, world, cluster_api):
        denied = {"anonymous": (401, 403), "viewer": 403, "member": 403, "other_member": 404}
        check_matrix(
            world,
            lambda c: c.put(HF, {"token": TOKEN}, format="json"),
            {**denied, "tenant_admin": 200, "platform_admin": 200},
        )
        check_matrix(
            world, lambda c: c.put(S3, S3_VALUES, format="json"), {**denied, "tenant_admin": 200, "platform_admin": 200}
        )
        check_matrix(
            world,
            lambda c: c.get("/api/v1/tenants/alpha/credentials/"),
            {
                "anonymous": (401, 403),
                "viewer": 200,
                "member": 200,
                "tenant_admin": 200,
                "platform_admin": 200,
                "other_member": 404,
            },
        )
        check_matrix(world, lambda c: c.delete(HF), {**denied, "tenant_admin": 204, "platform_admin": 204})
        assert secret(cluster_api) is None and secret(cluster_api, "llm-portal-s3") is not None

    @pytest.mark.parametrize(
        ("url", "body", "fields"),
        [
            (HF, {"token": "short"}, {"token"}),
            (HF, {"token": "hf_with space inside"}, {"token"}),
            (HF, {"token": "hf_abcdefgh\nxyz"}, {"token"}),
            (HF, {}, {"token"}),
            (S3, {**S3_VALUES, "endpoint": "ftp://minio", "region": "EU West"}, {"endpoint", "region"}),
            (S3, {**S3_VALUES, "endpoint": "https://user:pw@minio.example.com"}, {"endpoint"}),
            (S3, {"access_key_id": "AK", "secret_access_key": "x y"}, {"access_key_id", "secret_access_key"}),
        ],
    )
    def test_bad_input_is_a_400_with_field_messages_and_writes_nothing(self, world, cluster_api, url, body, fields):
        response = world.client("tenant_admin").put(url, body, format="json")
        assert response.status_code == 400
        assert fields <= set(response.json()) and all(response.json()[f] for f in fields)
        assert "hf_with space inside" not in response.content.decode()
        assert not TenantSecret.objects.exists() and not AuditEvent.objects.filter(action__startswith="tenant_secret")
        assert [p for _, p in cluster_api.proxied_requests() if "/secrets" in p] == []

    def test_an_archived_tenant_takes_no_new_credentials_but_may_drop_them(self, world, cluster_api):
        admin = world.client("platform_admin")
        assert admin.put(HF, {"token": TOKEN}, format="json").status_code == 200
        Tenant.objects.filter(pk=world.alpha.pk).update(archived_at="2026-01-01T00:00:00Z")
        assert admin.put(HF, {"token": TOKEN}, format="json").status_code == 409
        assert admin.delete(HF).status_code == 204 and secret(cluster_api) is None

    def test_when_the_cluster_refuses_nothing_is_recorded_and_no_value_is_echoed(self, world, cluster_api):
        cluster_api.fail_always(403)
        response = world.client("tenant_admin").put(HF, {"token": TOKEN}, format="json")
        cluster_api.clear_faults()
        assert response.status_code == 503 and "HTTP 403" in response.json()["detail"]
        assert shows_nothing_secret(response.content.decode())
        assert not TenantSecret.objects.exists() and not AuditEvent.objects.filter(action__startswith="tenant_secret")

    def test_the_schema_documents_the_endpoints_with_write_only_values(self, world):
        schema = world.client("member").get("/api/schema/", HTTP_ACCEPT="application/json").json()
        hf = schema["paths"]["/api/v1/tenants/{slug}/credentials/hf_token/"]
        assert set(hf) >= {"put", "delete"}
        body = schema["components"]["schemas"]["HfTokenWriteRequest"]
        assert body["properties"]["token"]["writeOnly"] is True


class TestNeverShownAgain:
    def test_the_value_is_in_no_response_page_or_audit_row(self, world, cluster_api):
        admin = world.client("tenant_admin")
        admin.put(HF, {"token": TOKEN}, format="json")
        admin.put(S3, S3_VALUES, format="json")
        for role in ("tenant_admin", "platform_admin"):
            client = world.client(role)
            for url in ("/api/v1/tenants/alpha/credentials/", "/api/v1/tenants/alpha/", "/api/v1/audit/"):
                response = client.get(url)
                assert response.status_code == 200 and shows_nothing_secret(response.content.decode())
            page = world.browser(role).get("/quotas/alpha/")
            assert page.status_code == 200 and shows_nothing_secret(page.content.decode())
        events = AuditEvent.objects.filter(action__startswith="tenant_secret")
        assert shows_nothing_secret(json.dumps([e.as_record() for e in events]))

    def test_a_form_that_comes_back_with_an_error_does_not_render_the_typed_value(self, world, cluster_api):
        typed = {"s3-access_key_id": S3_VALUES["access_key_id"], "s3-secret_access_key": "too short"}
        page = world.browser("tenant_admin").post("/quotas/alpha/credentials/s3/", typed)
        assert page.status_code == 400
        text = page.content.decode()
        assert "letters, digits and punctuation only" in text and 'type="password"' in text
        assert S3_VALUES["access_key_id"] not in text and "too short" not in text


class TestRotationDeletionAudit:
    def test_setting_again_replaces_the_value_and_the_audit_says_who_and_which(self, world, cluster_api):
        admin = world.client("tenant_admin")
        admin.put(HF, {"token": TOKEN}, format="json")
        world.client("platform_admin").put(HF, {"token": "hf_rotatedtoken0000NEW1"}, format="json")
        assert values_of(secret(cluster_api)) == {"HF_TOKEN": "hf_rotatedtoken0000NEW1"}
        row = TenantSecret.objects.get(tenant=world.alpha, kind="hf_token")
        assert row.fingerprint == "NEW1" and row.set_by_name == "platform-admin"
        admin.delete(HF)
        assert secret(cluster_api) is None and not TenantSecret.objects.exists()
        events = list(AuditEvent.objects.filter(action__startswith="tenant_secret").order_by("created", "id"))
        assert [(e.action, e.actor_name, e.tenant_id) for e in events] == [
            ("tenant_secret.set", "alpha-tenant_admin", world.alpha.pk),
            ("tenant_secret.rotate", "platform-admin", world.alpha.pk),
            ("tenant_secret.delete", "alpha-tenant_admin", world.alpha.pk),
        ]
        assert events[1].changes == {
            "kind": "hf_token",
            "secret": "llm-portal-hf-token",
            "from": {"ends_in": "WXYZ"},
            "to": {"ends_in": "NEW1"},
        }

    def test_deleting_what_was_never_set_changes_nothing(self, world, cluster_api):
        assert world.client("tenant_admin").delete(S3).status_code == 204
        assert not AuditEvent.objects.filter(action__startswith="tenant_secret").exists()


class TestDeployments:
    def test_a_deployment_without_its_own_secret_uses_the_tenants_token(self, world, cluster_api):
        member = world.users["member"]
        own = services.deployment_create(
            tenant=world.alpha, user=member, data=draft(world, name="own", hf_token_secret="team-token")
        )
        plain = services.deployment_create(tenant=world.alpha, user=member, data=draft(world, name="plain"))
        assert deployment_spec(plain).hf_token_secret is None
        world.client("tenant_admin").put(HF, {"token": TOKEN}, format="json")
        assert deployment_spec(plain).hf_token_secret == "llm-portal-hf-token"
        assert deployment_spec(own).hf_token_secret == "team-token"
        world.client("tenant_admin").delete(HF)
        assert deployment_spec(plain).hf_token_secret is None


class TestTheBrowser:
    def test_a_tenant_admin_sets_and_deletes_on_the_tenant_page(self, world, cluster_api):
        browser = world.browser("tenant_admin")
        response = browser.post("/quotas/alpha/credentials/hf_token/", {"hf-token": TOKEN})
        assert response.status_code == 302 and response["Location"].endswith("/quotas/alpha/#credentials")
        assert values_of(secret(cluster_api)) == {"HF_TOKEN": TOKEN}
        page = browser.get("/quotas/alpha/").content.decode()
        assert "by alpha-tenant_admin, ends in <code>…WXYZ</code>" in page and shows_nothing_secret(page)
        assert browser.post("/quotas/alpha/credentials/hf_token/delete/").status_code == 302
        assert secret(cluster_api) is None
        assert 'data-credential-state="unset"' in browser.get("/quotas/alpha/").content.decode()

    @pytest.mark.parametrize("role", ["viewer", "member"])
    def test_members_and_viewers_see_the_state_but_no_form_and_may_not_post(self, world, cluster_api, role):
        world.client("tenant_admin").put(HF, {"token": TOKEN}, format="json")
        browser = world.browser(role)
        page = browser.get("/quotas/alpha/").content.decode()
        assert "ends in <code>…WXYZ</code>" in page and 'type="password"' not in page
        assert browser.post("/quotas/alpha/credentials/hf_token/", {"hf-token": "hf_other12345"}).status_code == 403
        assert browser.post("/quotas/alpha/credentials/hf_token/delete/").status_code == 403
        assert values_of(secret(cluster_api)) == {"HF_TOKEN": TOKEN}


@pytest.mark.django_db(transaction=True)
def test_two_sets_at_once_leave_one_secret_and_a_row_that_matches_it(tx_world, k8s_api, settings):
    """Both requests run to the end; the tenant row's lock orders them, so the Secret holds the
    value of the one that wrote last and the row says that value's end."""
    from django.db import connection

    from quotas import tenant_secrets

    settings.KUBERNETES_URL = k8s_api.url
    world, barrier, errors = tx_world, threading.Barrier(2), []
    tokens = {"tenant_admin": "hf_firsttokenvalue0AAAA", "platform_admin": "hf_secondtokenvalueBBBB"}

    def set_token(role: str) -> None:
        try:
            barrier.wait()
            tenant_secrets.secret_set(
                tenant=world.alpha, user=world.users[role], kind="hf_token", data={"token": tokens[role]}
            )
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=set_token, args=(role,)) for role in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    (row,) = TenantSecret.objects.filter(tenant=world.alpha)
    written = values_of(secret(k8s_api))["HF_TOKEN"]
    assert written in tokens.values() and row.fingerprint == written[-4:]
    assert [s["metadata"]["name"] for s in k8s_api.list_objects(k8s.SECRET, "alpha")] == ["llm-portal-hf-token"]
    actions = sorted(AuditEvent.objects.filter(action__startswith="tenant_secret").values_list("action", flat=True))
    assert actions == ["tenant_secret.rotate", "tenant_secret.set"]
