"""The catalog in the Django admin: saved through catalog.services (checked, audited with the
reason "Django admin"), never deleted, the name fixed once created."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from catalog.models import CatalogModel
from core.models import AuditEvent
from tests.catalog.conftest import COMMIT

ADD = "/admin/catalog/catalogmodel/add/"
FORM = {
    "name": "qwen",
    "display_name": "Qwen",
    "source": "Qwen/Qwen2.5-7B-Instruct",
    "revision": COMMIT,
    "task": "chat",
    "token_source": "tenant",
    "licence": "",
    "token_secret": "",
    "notes": "",
    "active": "on",
}


@pytest.fixture
def staff(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.org", "unused-password"))
    return client


def test_an_admin_add_is_audited_and_a_bad_row_is_refused(staff):
    page = staff.post(ADD, FORM | {"revision": "--evil"})
    assert page.status_code == 200 and not CatalogModel.objects.exists()
    assert staff.post(ADD, FORM).status_code == 302
    row = CatalogModel.objects.get()
    assert row.revision == COMMIT and row.created_by.username == "root"
    assert AuditEvent.objects.get(action="catalog.create").reason == "Django admin"


def test_rows_are_not_deleted_in_the_admin(staff, llama):
    assert staff.post(f"/admin/catalog/catalogmodel/{llama.pk}/delete/", {"post": "yes"}).status_code == 403
    assert CatalogModel.objects.filter(pk=llama.pk).exists()
