import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from portal.api import token_create


@pytest.fixture(autouse=True)
def _fresh_sign_in_counts():
    cache.clear()  # axes' failed sign-in counts: a wrong token here must not lock out another test
    yield
    cache.clear()


def _with_token(user, scheme: str = "Token") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {token_create(user=user, name='probe')[1]}")
    return client


@pytest.mark.django_db
def test_healthz_answers_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_tells_anonymous_callers_the_verdict_only(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready"}


def test_readyz_gives_platform_admins_the_checks(world):
    admin = world.users["platform_admin"]
    for caller in (world.browser("platform_admin"), _with_token(admin), _with_token(admin, "Bearer")):
        response = caller.get("/readyz")
        assert response.status_code == 200
        assert response.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}
    for caller in (world.browser("tenant_admin"), _with_token(world.users["member"])):
        assert caller.get("/readyz").json() == {"status": "ready"}


def test_readyz_with_a_wrong_token_is_the_anonymous_answer(world):
    guesser = APIClient()
    guesser.credentials(HTTP_AUTHORIZATION="Token llmp_" + "0" * 64)
    response = guesser.get("/readyz")
    assert (response.status_code, response.json()) == (200, {"status": "ready"})


def test_readyz_is_503_when_the_broker_is_down(world, client, settings):
    # A closed port on loopback: the broker is "down" as far as the portal can tell.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get("/readyz")
    assert (response.status_code, response.json()) == (503, {"status": "unavailable"})
    response = world.browser("platform_admin").get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok" and body["checks"]["broker"].startswith("OperationalError")


@pytest.mark.django_db
def test_portal_metrics_need_the_bearer_token(client, settings):
    settings.METRICS_TOKEN = None
    assert client.get("/metrics").status_code == 404
    settings.METRICS_TOKEN = "s3cret-token"
    assert client.get("/metrics").status_code == 401
    client.get("/healthz")
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").content.decode()
    assert "portal_http_requests_total" in body and 'method="GET"' in body
