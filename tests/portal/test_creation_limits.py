"""Bounds on rows people create (core.limits): API tokens per user, endpoint keys per user and
deployments per tenant. At the limit: a 400 naming the limit over the API, an error in the page,
nothing written; concurrent creations never pass the limit together."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from access.models import ApiKey
from core.exceptions import DomainError
from deployments.models import ModelDeployment
from portal.api import ApiToken, token_create
from tests.support.factories import api_draft


def refused(response) -> str:
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "limit_reached"
    return next(v[0] for k, v in response.json().items() if k != "code")


class TestApiTokens:
    def test_the_limit_is_a_400_and_a_page_error_and_expired_ones_do_not_count(self, world, settings):
        settings.MAX_API_TOKENS_PER_USER = 2
        client = world.client("member")
        for name in ("one", "two"):
            assert client.post("/api/v1/tokens/", {"name": name}, format="json").status_code == 201
        message = refused(client.post("/api/v1/tokens/", {"name": "three"}, format="json"))
        assert "the most allowed is 2" in message
        page = world.browser("member").post("/tokens/", {"name": "three"}, follow=True)
        assert "the most allowed is 2" in page.content.decode()
        assert ApiToken.objects.filter(user=world.users["member"]).count() == 2

        ApiToken.objects.filter(name="one").update(expiry=timezone.now() - timedelta(seconds=1))
        assert client.post("/api/v1/tokens/", {"name": "three"}, format="json").status_code == 201
        assert world.client("tenant_admin").post("/api/v1/tokens/", {"name": "x"}, format="json").status_code == 201


class TestEndpointKeys:
    def test_the_limit_is_a_400_and_a_form_error_and_revoked_ones_do_not_count(self, world, settings):
        settings.MAX_API_KEYS_PER_USER = 2
        client = world.client("member")
        first = client.post("/api/v1/keys/", {"tenant": "alpha", "name": "a"}, format="json")
        assert first.status_code == 201
        assert client.post("/api/v1/keys/", {"tenant": "alpha", "name": "b"}, format="json").status_code == 201
        assert "the most allowed is 2" in refused(
            client.post("/api/v1/keys/", {"tenant": "alpha", "name": "c"}, format="json")
        )
        page = world.browser("member").post("/keys/new/", {"tenant": "alpha", "name": "c", "expires_in_days": 7})
        assert page.status_code == 200 and "the most allowed is 2" in page.content.decode()
        assert ApiKey.objects.count() == 2

        revoked = client.post(f"/api/v1/keys/{first.json()['id']}/revoke/", {"reason": "old"}, format="json")
        assert revoked.status_code == 200
        assert client.post("/api/v1/keys/", {"tenant": "alpha", "name": "c"}, format="json").status_code == 201


class TestDeployments:
    def test_the_limit_per_tenant_is_a_400_on_tenant_and_a_form_error(self, world, settings):
        settings.MAX_DEPLOYMENTS_PER_TENANT = 2
        client = world.client("member")
        for name in ("one", "two"):
            body = api_draft(world, name=name, max_replicas=1)
            assert client.post("/api/v1/deployments/", body, format="json").status_code == 201
        response = client.post("/api/v1/deployments/", api_draft(world, name="three", max_replicas=1), format="json")
        assert "deployments in alpha already: the most allowed is 2" in refused(response)
        assert "tenant" in response.json()
        form = {**api_draft(world, name="three", max_replicas=1), "tenant": world.alpha.pk, "flavor": world.h100.pk}
        page = world.browser("member").post("/deployments/new/", form)
        assert page.status_code == 200 and "the most allowed is 2" in page.content.decode()
        assert ModelDeployment.objects.count() == 2
        # Other tenants have their own count.
        other = world.client("other_member").post(
            "/api/v1/deployments/", api_draft(world, name="one", tenant="beta", max_replicas=1), format="json"
        )
        assert other.status_code == 201


@pytest.mark.django_db(transaction=True)
def test_concurrent_token_creations_never_pass_the_limit(tx_world, settings):
    settings.MAX_API_TOKENS_PER_USER = 3
    user, results, barrier = tx_world.users["member"], [], threading.Barrier(6)

    def create(i: int) -> None:
        try:
            barrier.wait()
            token_create(user=user, name=f"t{i}")
            results.append("created")
        except DomainError as error:
            results.append(error.code)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["created"] * 3 + ["limit_reached"] * 3
    assert ApiToken.objects.filter(user=user).count() == 3
