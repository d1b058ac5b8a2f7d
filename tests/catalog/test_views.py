"""The catalog's platform pages, without a browser: list with filters, create, edit, deactivate,
import facts; platform admins only."""

from __future__ import annotations

import pytest

from catalog.models import CatalogModel
from tests.catalog.conftest import COMMIT
from tests.catalog.test_api import tiny_model

LIST = "/platform/catalog/"


@pytest.mark.parametrize("role", ["viewer", "member", "tenant_admin", "other_member"])
def test_the_pages_are_for_platform_admins_only(world, llama, role):
    browser = world.browser(role)
    assert browser.get(LIST).status_code == 403
    assert browser.get(f"{LIST}new/").status_code == 403
    assert browser.post(f"{LIST}new/", {"name": "x"}).status_code == 403
    assert browser.post(f"{LIST}{llama.name}/deactivate/").status_code == 403
    llama.refresh_from_db()
    assert llama.active


def test_the_list_filters_by_task_and_search(world, llama):
    CatalogModel.objects.create(
        name="bge", display_name="BGE small", source="BAAI/bge-small-en", revision="main", task="embedding"
    )
    browser = world.browser("platform_admin")
    page = browser.get(LIST, {"task": "embedding"}).content.decode()
    assert 'data-catalog-model="bge"' in page and 'data-catalog-model="llama-3-8b"' not in page
    page = browser.get(LIST, {"search": "llama"}).content.decode()
    assert 'data-catalog-model="llama-3-8b"' in page and 'data-catalog-model="bge"' not in page
    assert browser.get(LIST, {"task": "nope"}).status_code == 200  # a bad filter is a form error, not a 500


def test_create_shows_the_rules_as_field_errors_then_saves(world):
    browser = world.browser("platform_admin")
    form = {
        "name": "qwen",
        "display_name": "Qwen",
        "source": "Qwen/Qwen2.5-7B",
        "task": "chat",
        "token_source": "tenant",
    }
    page = browser.post(f"{LIST}new/", form)
    assert page.status_code == 200 and "follow the default branch" in page.content.decode()
    assert not CatalogModel.objects.exists()
    response = browser.post(f"{LIST}new/", form | {"revision": COMMIT, "reason": "offered"})
    assert response.status_code == 302 and response["Location"] == f"{LIST}qwen/"
    assert CatalogModel.objects.get().revision == COMMIT


def test_edit_deactivate_and_import_facts(world, llama, settings, tmp_path):
    settings.LOCAL_MODEL_ROOT = tmp_path
    directory = tiny_model(tmp_path)
    browser = world.browser("platform_admin")
    page = browser.get(f"{LIST}{llama.name}/").content.decode()
    assert "never contacts the Hugging Face hub" in page
    response = browser.post(f"{LIST}{llama.name}/import-facts/", {"path": str(directory)}, follow=True)
    assert "Facts of llama-3-8b imported." in response.content.decode()
    llama.refresh_from_db()
    assert (llama.layers, llama.kv_heads, llama.head_dim) == (2, 2, 64)
    response = browser.post(f"{LIST}{llama.name}/import-facts/", {"path": "/etc"}, follow=True)
    assert "Facts not imported" in response.content.decode()
    browser.post(f"{LIST}{llama.name}/deactivate/")
    llama.refresh_from_db()
    assert not llama.active
