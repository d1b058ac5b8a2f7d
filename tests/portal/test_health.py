import pytest


@pytest.mark.django_db
def test_healthz_answers_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_database_and_broker(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "broker": "ok"}


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_down(client, settings):
    # A closed port on loopback: the broker is "down" as far as the portal can tell.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["database"] == "ok" and body["checks"]["broker"] != "ok"


@pytest.mark.django_db
def test_portal_metrics_need_the_bearer_token(client, settings):
    settings.METRICS_TOKEN = None
    assert client.get("/metrics").status_code == 404
    settings.METRICS_TOKEN = "s3cret-token"
    assert client.get("/metrics").status_code == 401
    client.get("/healthz")
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").content.decode()
    assert "portal_http_requests_total" in body and 'method="GET"' in body
