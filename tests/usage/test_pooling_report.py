"""An embedding or score deployment in the usage report: it generates no tokens, so its row counts
and prices its input tokens, the same in the API, the page and the CSV."""

from __future__ import annotations

import csv
import io
from datetime import date
from decimal import Decimal

import pytest

from deployments.models import ModelDeployment
from usage.models import UsageMonth

NOV = date(2026, 11, 1)


def month_row(world, name: str, task: str, *, prompt: int, generation: int, cost: str) -> ModelDeployment:
    dep = ModelDeployment.objects.create(
        tenant=world.alpha, name=name, model_source="m", served_model_name=name, flavor=world.h100, task=task
    )
    UsageMonth.objects.create(
        deployment=dep,
        tenant=dep.tenant,
        month=NOV,
        reserved_gpu_hours=Decimal("10"),
        serving_gpu_hours=Decimal("10"),
        prompt_tokens=prompt,
        generation_tokens=generation,
        cost=Decimal(cost),
    )
    return dep


@pytest.fixture
def rows(world):
    """A chat deployment ($39, 500 k output tokens of 1M prompt tokens) and an embedding one ($20,
    4M input tokens; vLLM counts its generation tokens as 0)."""
    month_row(world, "chat", "chat", prompt=1_000_000, generation=500_000, cost="39")
    month_row(world, "embed", "embedding", prompt=4_000_000, generation=0, cost="20")


class TestPoolingRows:
    def test_the_api_counts_input_tokens_for_an_embedding_deployment(self, world, rows):
        body = world.client("member").get("/api/v1/usage/", {"month": "2026-11", "sort": "deployment"}).json()
        chat, embed = body["results"]
        assert (chat["task"], chat["tokens_counted"], chat["tokens"], chat["generation_tokens"]) == (
            "chat",
            "output",
            500_000,
            500_000,
        )
        assert chat["cost_per_mtok"] == "78.0000"  # 39 / 0.5M output tokens
        assert (embed["task"], embed["tokens_counted"], embed["tokens"], embed["generation_tokens"]) == (
            "embedding",
            "input",
            4_000_000,
            None,
        )
        assert embed["cost_per_mtok"] == "5.0000"  # 20 / 4M input tokens, not "no tokens"

    def test_sorting_by_tokens_and_cost_per_token_uses_the_counted_tokens(self, world, rows):
        client = world.client("member")
        by_tokens = client.get("/api/v1/usage/", {"month": "2026-11", "sort": "-tokens"}).json()
        assert [r["deployment"] for r in by_tokens["results"]] == ["embed", "chat"]
        by_price = client.get("/api/v1/usage/", {"month": "2026-11", "sort": "cost_per_mtok"}).json()
        assert [r["deployment"] for r in by_price["results"]] == ["embed", "chat"]

    def test_page_and_csv_say_the_same(self, world, rows):
        page = world.browser("member").get("/usage/", {"month": "2026-11", "sort": "deployment"}).content.decode()
        assert '<td>4000000 <span class="muted small">input</span></td>' in page
        assert '<td>500000 <span class="muted small">output</span></td>' in page
        text = b"".join(world.client("member").get("/api/v1/usage/csv/", {"month": "2026-11"}).streaming_content)
        lines = {r["deployment"]: r for r in csv.DictReader(io.StringIO(text.decode()))}
        assert (lines["embed"]["task"], lines["embed"]["tokens_counted"], lines["embed"]["generation_tokens"]) == (
            "embedding",
            "input",
            "",
        )
        assert lines["embed"]["cost_per_mtok"].startswith("5.0")
