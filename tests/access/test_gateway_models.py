"""The tenant endpoint's GET /v1/models (issue 34), answered by the portal for the key presented:
a tenant-wide key lists the tenant's running deployments by served name, a deployment's key only
its own; any other key (another tenant's, revoked, unknown, none) is OpenAI's 401."""

from __future__ import annotations

from datetime import datetime

import pytest
from rest_framework.test import APIClient

from access.services import key_mint, key_revoke
from deployments import services
from deployments.models import ModelDeployment
from tests.support.factories import draft

URL = "/api/v1/gateway/{tenant}/models"


@pytest.fixture
def deployed(world) -> dict[str, ModelDeployment]:
    """alpha: two running (one served under a name with a '/'), one stopped; beta: one running."""
    made = {}
    for tenant, name, served, state in (
        (world.alpha, "chat", "llama3-8b", "ready"),
        (world.alpha, "embed", "acme/e5-small", "provisioning"),
        (world.alpha, "old", "old", "stopped"),
        (world.beta, "beta-chat", "beta-model", "ready"),
    ):
        user = world.users["member" if tenant == world.alpha else "other_member"]
        dep = services.deployment_create(
            tenant=tenant, user=user, data=draft(world, name=name, served_model_name=served)
        )
        ModelDeployment.objects.filter(pk=dep.pk).update(state=state)
        made[name] = ModelDeployment.objects.get(pk=dep.pk)
    return made


def get(path: str, key: str | None):
    client = APIClient()
    if key is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.get(path)


def mint(world, tenant, deployment=None) -> str:
    role = "tenant_admin" if tenant == world.alpha else "platform_admin"
    return key_mint(user=world.users[role], tenant=tenant, name="k", deployment_id=deployment and deployment.pk)[1]


def test_a_tenant_key_lists_every_running_deployment_by_served_name(world, deployed):
    response = get(URL.format(tenant="alpha"), mint(world, world.alpha))
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == ["acme/e5-small", "llama3-8b"]
    chat = body["data"][1]
    assert chat == {
        "id": "llama3-8b",
        "object": "model",
        "created": int(deployed["chat"].created.timestamp()),
        "owned_by": "alpha",
    }
    assert abs(datetime.now().timestamp() - chat["created"]) < 600


def test_a_deployment_key_lists_its_own_model_only(world, deployed):
    key = mint(world, world.alpha, deployed["embed"])
    assert [m["id"] for m in get(URL.format(tenant="alpha"), key).json()["data"]] == ["acme/e5-small"]
    assert get(URL.format(tenant="alpha") + "/acme/e5-small", key).json()["id"] == "acme/e5-small"
    other = get(URL.format(tenant="alpha") + "/llama3-8b", key)
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("case", ["foreign", "revoked", "unknown", "none", "basic", "huge"])
def test_any_other_key_is_openais_401(world, deployed, case):
    key = {
        "foreign": lambda: mint(world, world.beta),
        "revoked": lambda: _revoked(world),
        "unknown": lambda: "sk-portal-" + "x" * 43,
        "none": lambda: None,
        "basic": lambda: None,
        "huge": lambda: "k" * 5000,
    }[case]()
    client = APIClient()
    if case == "basic":
        client.credentials(HTTP_AUTHORIZATION="Basic YWxwaGE6cGFzcw==")
    response = client.get(URL.format(tenant="alpha")) if case == "basic" else get(URL.format(tenant="alpha"), key)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key" and "llama3-8b" not in response.content.decode()


def _revoked(world) -> str:
    key = mint(world, world.alpha)
    from access.models import ApiKey

    key_revoke(user=world.users["tenant_admin"], key_id=ApiKey.objects.latest("id").pk)
    return key


def test_a_key_of_one_tenant_on_another_tenants_path_is_a_401_not_a_listing(world, deployed):
    assert get(URL.format(tenant="beta"), mint(world, world.alpha)).status_code == 401
    assert [m["id"] for m in get(URL.format(tenant="beta"), mint(world, world.beta)).json()["data"]] == ["beta-model"]


def test_an_unknown_tenant_is_a_401_too(world, deployed):
    assert get(URL.format(tenant="nobody"), mint(world, world.alpha)).status_code == 401
