"""Hostile paths, query strings and headers: never a server error, on the API or in the browser."""

from __future__ import annotations

import pytest
from django.test import Client

BIG = "9" * 20  # past PostgreSQL's bigint
PATHS = [
    f"/deployments/{BIG}/",
    f"/deployments/{BIG}/status/",
    f"/deployments/{BIG}/charts/",
    f"/deployments/{BIG}/stop/",
    "/deployments/1/charts/?window=%00",
    "/quotas/%00/",
    "/quotas/" + "a" * 300 + "/",
    "/tokens/%00/revoke/",
    f"/quota-requests/{BIG}/approve/",
    "/deployments/?state=%00&search=%00",
    "/deployments/?tenant=%00",
    f"/api/v1/deployments/{BIG}/",
    "/api/v1/tenants/%00/",
    "/api/v1/deployments/?state=%00",
    f"/api/v1/deployments/?limit={BIG}",
    "/api/v1/deployments/?offset=-1",
    "/api/v1/deployments/?ordering=%00",
    "/api/v1/audit/?object_id=%00",
    "/api/v1/audit/export/jsonl/?since=%00&until=" + BIG,
    "/api/v1/audit/export/csv/?since=9999-12-31T23:59:59-01:00&until=0000-00-00",
    "/api/v1/audit/export/jsonl/?since=%EF%BC%92026-01-01",  # a fullwidth digit
    "/api/v1/deployments/?tenant=%00",
    "/api/v1/deployments/?search=%00",
    "/api/v1/deployments/1/metrics/?window=%00",
    f"/api/v1/deployments/{BIG}/revisions/",
    f"/api/v1/deployments/1/revisions/{BIG}/",
    f"/api/v1/deployments/1/revisions/{BIG}/approve/",
    "/api/v1/deployments/1/revisions/%00/rollback/",
    "/api/v1/deployments/%00/revisions/1/withdraw/",
    f"/api/v1/deployments/1/revisions/diff/?from=%00&to={BIG}",
    "/api/v1/deployments/1/revisions/?limit=%00&offset=-1",
    "/api/v1/tokens/%00/",
    "/keys/?tenant=%00&deployment=%00&status=%00",
    f"/keys/?deployment={BIG}",
    f"/keys/{BIG}/revoke/",
    "/keys/new/?tenant=%00&deployment=%00",
    f"/api/v1/keys/{BIG}/",
    f"/api/v1/keys/{BIG}/revoke/",
    "/api/v1/keys/?tenant=%00&deployment=%00&status=%00",
    "/api/v1/keys/?tenant=" + "a" * 300,
]


@pytest.mark.parametrize("path", PATHS)
def test_a_hostile_path_is_never_a_server_error(world, path):
    for role in ("member", "platform_admin"):
        client = world.browser(role)
        for method in ("get", "post"):
            response = getattr(client, method)(path)
            assert response.status_code < 500, (role, method, response.status_code)


def test_a_nul_byte_in_a_browser_path_is_a_400_naming_the_problem(world):
    response = world.browser("member").post("/tokens/%00/revoke/")
    assert response.status_code == 400 and b"cannot be stored or looked up" in response.content


HEADERS = [
    {"HTTP_AUTHORIZATION": "Token \x00"},
    {"HTTP_AUTHORIZATION": "Bearer"},
    {"HTTP_AUTHORIZATION": "Token " + "a" * 10_000},
    {"HTTP_AUTHORIZATION": "Token a b"},
    {"HTTP_AUTHORIZATION": "Basic Zm9vOmJhcg=="},
    {"HTTP_AUTHORIZATION": "Token é"},
    {"HTTP_ACCEPT": "application/x-evil"},
    {"HTTP_HOST": "evil..com"},
    {"HTTP_X_FORWARDED_FOR": "not-an-ip"},
    {"HTTP_HX_REQUEST": "true", "HTTP_HX_CURRENT_URL": "javascript:x"},
    {"HTTP_ACCEPT_LANGUAGE": "\x00" * 50},
    {"HTTP_COOKIE": "sessionid=\x00; csrftoken=" + "x" * 5000},
]


@pytest.mark.parametrize("headers", HEADERS, ids=range(len(HEADERS)))
def test_a_hostile_header_is_never_a_server_error(world, headers):
    for path in ("/api/v1/deployments/", "/api/v1/me/", "/deployments/", "/readyz", "/accounts/login/"):
        assert Client().get(path, **headers).status_code < 500, path
        assert Client().post(path, "{}", content_type="application/json", **headers).status_code < 500, path


SUFFIXED = [
    "metrics",
    "summary",
    "advice",
    "events",
    "approve",
    "stop",
    "start",
    "cancel",
    "scale",
    "reject",
    "withdraw",
    "revisions",
]


def test_format_suffixed_urls_are_404_not_a_server_error(world):
    """`/api/v1/deployments/1/metrics.json` reached an action that takes no `format`: a 500."""
    from deployments.models import ModelDeployment

    dep = ModelDeployment.objects.create(
        tenant=world.alpha, name="x", model_source="a/b", served_model_name="x", flavor=world.h100
    )
    client = world.client("platform_admin")
    client.raise_request_exception = False
    paths = [f"/api/v1/deployments/{dep.pk}/{name}{suffix}" for name in SUFFIXED for suffix in (".json", ".api")]
    paths += [f"/api/v1/deployments/{dep.pk}.json", "/api/v1/deployments.json", "/api/v1/tenants.json", "/api/v1/.json"]
    for path in paths:
        for method in ("get", "post"):
            assert getattr(client, method)(path).status_code == 404, (method, path)


def test_options_on_every_api_operation_is_never_a_server_error(world):
    """DRF answers OPTIONS with metadata built from the view's serializer: an action without one
    was a 500 (found by the slow schema-coverage phase on .../objectives/)."""
    from drf_spectacular.generators import SchemaGenerator

    from deployments import services
    from tests.support.factories import draft

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    values = {"id": dep.pk, "pk": dep.pk, "slug": world.alpha.slug, "username": "alpha-member", "name": "h100"}
    paths = SchemaGenerator().get_schema(public=True)["paths"]
    checked = 0
    for template in paths:
        path = template
        for key, value in values.items():
            path = path.replace("{" + key + "}", str(value))
        if "{" in path:
            continue  # a parameter this world has no value for
        for role in ("member", "platform_admin"):
            response = world.client(role).options(path)
            assert response.status_code < 500, (role, path, response.status_code)
        checked += 1
    assert checked >= 40
