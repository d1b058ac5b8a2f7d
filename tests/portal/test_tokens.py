"""API tokens: hashed at rest, named, listed, revocable, expiring."""

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import AuditEvent
from portal.api import token_create
from portal.models import ApiToken


@pytest.fixture(autouse=True)
def _fresh_sign_in_counts():
    cache.clear()  # axes' failed sign-in counts: refused tokens here must not lock out another test
    yield
    cache.clear()


def bearer(secret: str, scheme: str = "Token") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {secret}")
    return client


class TestTokens:
    def test_a_token_authenticates_and_only_its_digest_is_stored(self, world):
        _, secret = token_create(user=world.users["member"], name="ci")
        assert bearer(secret).get("/api/v1/me/").json()["username"] == "alpha-member"
        with connection.cursor() as cursor:
            cursor.execute("SELECT digest, token_key FROM portal_apitoken")
            rows = cursor.fetchall()
        assert len(rows) == 1 and secret not in rows[0][0] and len(rows[0][0]) == 128
        assert secret.startswith(rows[0][1])  # only the public prefix is kept in clear

    @pytest.mark.parametrize("scheme", ["Bearer", "bearer"])
    def test_openai_style_bearer_works_beside_token(self, world, scheme):
        _, secret = token_create(user=world.users["member"], name="openai-client")
        me = bearer(secret, scheme).get("/api/v1/me/")
        assert (me.status_code, me.json()["username"]) == (200, "alpha-member")
        assert bearer(secret[:-4] + "beef", scheme).get("/api/v1/me/").status_code == 401

    def test_a_token_that_is_not_utf8_is_401_not_a_server_error(self, world):
        assert bearer("llmp_\xff\xfe").get("/api/v1/me/").status_code == 401

    def test_revoked_token_is_refused(self, world):
        client = world.client("member")
        created = client.post("/api/v1/tokens/", {"name": "laptop"}, format="json").json()
        assert bearer(created["token"]).get("/api/v1/me/").status_code == 200
        assert client.delete(f"/api/v1/tokens/{created['id']}/").status_code == 204
        assert bearer(created["token"]).get("/api/v1/me/").status_code == 401
        assert AuditEvent.objects.filter(action="token.revoke", object_id=created["id"]).exists()

    def test_expired_token_is_refused(self, world):
        instance, secret = token_create(user=world.users["member"], name="old", expires_in_days=1)
        ApiToken.objects.filter(pk=instance.pk).update(expiry=timezone.now() - timedelta(seconds=1))
        assert bearer(secret).get("/api/v1/me/").status_code == 401

    def test_tokens_are_listed_by_name_and_never_shown_again(self, world):
        client = world.client("member")
        client.post("/api/v1/tokens/", {"name": "one"}, format="json")
        listed = client.get("/api/v1/tokens/").json()["results"]
        assert [t["name"] for t in listed] == ["one"] and "token" not in listed[0]
        assert world.client("viewer").get("/api/v1/tokens/").json()["results"] == []

    @pytest.mark.parametrize("name", ["", "x" * 101, "bad\nname", "<script>"])
    def test_bad_names_are_400(self, world, name):
        response = world.client("member").post("/api/v1/tokens/", {"name": name}, format="json")
        assert response.status_code == 400 and "name" in response.json()
        assert not ApiToken.objects.exists()
