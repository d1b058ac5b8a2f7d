"""The API's paging bounds (core.pagination): numbers PostgreSQL cannot hold never reach it."""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.test import APIClient

from core.pagination import MAX_LIMIT, MAX_OFFSET

pytestmark = pytest.mark.django_db

HUGE = "95224889717072550360388730880"  # past bigint: schemathesis found it on /flavors/


@pytest.fixture
def admin(world) -> APIClient:
    client = APIClient()
    client.force_authenticate(world.users["platform_admin"])
    return client


def test_a_limit_past_the_bound_is_cut_to_a_full_page(admin):
    response = admin.get(f"/api/v1/flavors/?limit={HUGE}")
    assert response.status_code == 200
    assert response.json()["count"] == len(response.json()["results"]) > 0
    assert f"limit={MAX_LIMIT}" in (response.json()["next"] or f"limit={MAX_LIMIT}")


@pytest.mark.parametrize("offset", [HUGE, str(MAX_OFFSET + 1)])
def test_an_offset_past_the_bound_is_a_field_error_and_the_transaction_lives_on(admin, offset):
    response = admin.get(f"/api/v1/deployments/?offset={offset}")
    assert response.status_code == 400
    assert response.json() == {"offset": [f"At most {MAX_OFFSET}."], "code": "invalid"}
    # Nothing reached the database: the test's own transaction still takes queries.
    assert not connection.needs_rollback
    assert admin.get("/api/v1/flavors/").status_code == 200


def test_the_largest_offset_allowed_is_an_empty_page(admin):
    response = admin.get(f"/api/v1/deployments/?offset={MAX_OFFSET}")
    assert response.status_code == 200 and response.json()["results"] == []
