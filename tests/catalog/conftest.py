from __future__ import annotations

import pytest

from catalog.models import CatalogModel
from tests.support.world import build_world

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def world(db):
    return build_world()


@pytest.fixture
def llama(db) -> CatalogModel:
    """A pinned, ungated Hugging Face row."""
    return CatalogModel.objects.create(
        name="llama-3-8b",
        display_name="Llama 3 8B Instruct",
        source="meta-llama/Meta-Llama-3-8B-Instruct",
        revision=COMMIT,
        task="chat",
        parameters=8_030_261_248,
    )
