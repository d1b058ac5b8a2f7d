"""The request form's catalog picker (issue 33): the catalog models a tenant's policy allows, as
cards with their fit on each of the tenant's flavors, and `catalog_model` as a form field with
the API's meaning, through the API's code path (catalog.drafts), refused with the API's messages."""

from __future__ import annotations

from decimal import Decimal

import pytest

from catalog.models import CatalogModel
from deployments import services, sizing
from deployments.catalog import facts_for
from deployments.models import ModelDeployment
from quotas import tenants
from tests.support.factories import api_draft, draft

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LLAMA70 = "meta-llama/Meta-Llama-3-70B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
D = "/api/v1/deployments"


@pytest.fixture
def llama(db) -> CatalogModel:
    """A pinned 70B row with its facts typed in (published config: 80 layers, 8 KV heads of 128)."""
    return CatalogModel.objects.create(
        name="llama-70b",
        display_name="Llama 3 70B Instruct",
        source=LLAMA70,
        revision=COMMIT,
        task="chat",
        licence="llama3",
        parameters=70_600_000_000,
        dtype="bfloat16",
        layers=80,
        kv_heads=8,
        head_dim=128,
        max_context=8192,
    )


@pytest.fixture
def embedder(db) -> CatalogModel:
    return CatalogModel.objects.create(
        name="tiny-embed",
        display_name="Tiny embedder",
        source="acme/tiny-embed",
        revision="v1",
        task="embedding",
        parameters=30_000_000,
        layers=4,
        kv_heads=4,
        head_dim=64,
        max_context=512,
    )


def allow(world, *, models=(), patterns=()):
    tenants.tenant_policy_set(
        tenant_id=world.alpha.pk,
        actor=world.users["platform_admin"],
        allowed_flavors=[],
        allowed_models=list(models),
        allowed_source_patterns=list(patterns),
    )
    world.alpha.refresh_from_db()


def form_post(world, **changes) -> dict:
    """A new request as the browser form posts it (every field, empty where left empty)."""
    data = {
        "tenant": world.alpha.pk,
        "name": "picked",
        "backend": "kuberay",
        "catalog_model": "",
        "model_source": "",
        "model_revision": "",
        "served_model_name": "",
        "hf_token_secret": "",
        "flavor": world.h100.pk,
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "min_replicas": 1,
        "max_replicas": 1,
        "target_ongoing_requests": 16,
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.9,
        "enable_chunked_prefill": "on",
        "max_num_batched_tokens": "",
        "quantization": "",
        "dtype": "auto",
        "kv_cache_dtype": "auto",
        "parameter_count_b": "",
    }
    return data | changes


def field_errors(response, name: str) -> list[str]:
    form = response.context["form"]
    return list(form.errors.get(name, []))


class TestPickingInTheForm:
    def test_a_picked_catalog_model_is_created_at_its_pinned_revision(self, world, llama):
        response = world.browser("member").post("/deployments/new/", form_post(world, catalog_model="llama-70b"))
        assert response.status_code == 302, response.context["form"].errors
        dep = ModelDeployment.objects.get(name="picked")
        assert (dep.model_source, dep.model_revision) == (LLAMA70, COMMIT)
        assert dep.parameter_count_b == 70.6  # filled as the API fills it

    def test_a_pin_only_policy_lets_the_picker_through_and_refuses_the_free_text_source_as_the_api(self, world, llama):
        allow(world, models=[llama])
        client = world.browser("member")
        typed = client.post("/deployments/new/", form_post(world, model_source=LLAMA70))
        api = world.client("member").post(f"{D}/", api_draft(world, model_source=LLAMA70, name="typed"))
        assert api.status_code == 400
        assert field_errors(typed, "model_source") == api.json()["model_source"]
        assert "only at " + COMMIT in api.json()["model_source"][0]
        assert not ModelDeployment.objects.exists()
        picked = client.post("/deployments/new/", form_post(world, catalog_model="llama-70b"))
        assert picked.status_code == 302
        assert ModelDeployment.objects.get(name="picked").model_revision == COMMIT

    def test_a_gated_model_without_a_token_is_refused_on_the_token_field_as_the_api(self, world, llama):
        llama.gated = True
        llama.save()
        page = world.browser("member").post("/deployments/new/", form_post(world, catalog_model="llama-70b"))
        body = api_draft(world, catalog_model="llama-70b", name="gated", tensor_parallel_size=2)
        del body["model_source"]
        api = world.client("member").post(f"{D}/", body)
        assert api.status_code == 400 and page.status_code == 200
        assert field_errors(page, "hf_token_secret") == api.json()["hf_token_secret"]
        assert "is gated on Hugging Face" in api.json()["hf_token_secret"][0]

    def test_a_catalog_model_and_another_source_is_the_apis_refusal(self, world, llama):
        page = world.browser("member").post(
            "/deployments/new/", form_post(world, catalog_model="llama-70b", model_source=QWEN)
        )
        api = world.client("member").post(f"{D}/", api_draft(world, catalog_model="llama-70b", model_source=QWEN))
        assert field_errors(page, "model_source") == api.json()["model_source"]
        assert not ModelDeployment.objects.exists()

    def test_an_unknown_catalog_model_is_a_field_error_not_a_500(self, world):
        page = world.browser("member").post("/deployments/new/", form_post(world, catalog_model="../nope"))
        assert page.status_code == 200 and field_errors(page, "catalog_model")


class TestEditing:
    @pytest.fixture
    def pinned(self, world, llama):
        data = draft(world, model_source=LLAMA70, model_revision=COMMIT, tensor_parallel_size=2, max_replicas=1)
        return services.deployment_create(tenant=world.alpha, user=world.users["member"], data=data)

    def edit(self, world, dep, **changes):
        from tests.deployments.test_ui_parity import form_data

        data = form_data(dep, model_revision=dep.model_revision, catalog_model="") | changes
        return world.browser("member").post(f"/deployments/{dep.pk}/edit/", data)

    def test_a_new_source_drops_the_old_revision_as_patch_does(self, world, pinned):
        assert self.edit(world, pinned, model_source=QWEN).status_code == 302
        pinned.refresh_from_db()
        assert (pinned.model_source, pinned.model_revision) == (QWEN, "")

    def test_an_untouched_source_keeps_its_revision(self, world, pinned):
        assert self.edit(world, pinned, max_model_len=4096).status_code == 302
        pinned.refresh_from_db()
        assert (pinned.model_source, pinned.model_revision, pinned.max_model_len) == (LLAMA70, COMMIT, 4096)

    def test_picking_a_catalog_model_sets_its_source_and_revision(self, world, pinned, embedder):
        assert self.edit(world, pinned, catalog_model="tiny-embed").status_code == 302
        pinned.refresh_from_db()
        assert (pinned.model_source, pinned.model_revision) == ("acme/tiny-embed", "v1")


class TestCards:
    def cards(self, response) -> dict:
        return {card.row.name: card for card in response.context["picker"]["cards"]}

    def test_each_card_shows_the_smallest_tp_that_fits_with_the_sizing_numbers(self, world, llama):
        page = world.browser("member").get("/deployments/new/")
        card = self.cards(page)["llama-70b"]
        fits = {fit.flavor.name: fit for fit in card.fits}
        h100 = fits["h100-sxm5"]
        common = dict(
            model_source=LLAMA70,
            parameter_count_b=None,
            dtype="auto",
            quantization="",
            pipeline_parallel_size=1,
            max_model_len=None,
            gpu_memory_gib=80,
            gpu_memory_utilization=0.9,
        )
        assert sizing.estimate(tensor_parallel_size=1, **common).verdict == "does_not_fit"
        at_two = sizing.estimate(tensor_parallel_size=2, **common)
        assert (h100.tp, h100.gpus, h100.kv_tokens) == (2, 2, at_two.kv_tokens)
        # By hand: 72 GiB budget less 70.6e9 × 2 bytes / 2 GPUs, over 80 layers × 4 KV heads × 128 × 2 × 2 bytes.
        assert h100.kv_tokens == int((0.9 * 80 * 2**30 - 70.6e9) // (80 * 4 * 128 * 4))
        assert h100.price_per_hour == Decimal("7.80")
        assert fits["a100-pcie"].tp == 2 and fits["a100-pcie"].price_per_hour is None
        html = page.content.decode()
        assert f'data-kv-tokens="{h100.kv_tokens}"' in html and "$7.80/h" in html

    def test_only_the_models_the_policy_allows_and_only_its_flavors(self, world, llama, embedder):
        allow(world, models=[embedder])
        tenants.tenant_policy_set(
            tenant_id=world.alpha.pk, actor=world.users["platform_admin"], allowed_flavors=[world.a100]
        )
        page = world.browser("member").get("/deployments/new/")
        cards = self.cards(page)
        assert list(cards) == ["tiny-embed"]
        assert [fit.flavor.name for fit in cards["tiny-embed"].fits] == ["a100-pcie"]

    def test_search_and_task_filter_as_plain_get_and_htmx(self, world, llama, embedder):
        client = world.browser("member")
        assert list(self.cards(client.get("/deployments/new/?task=embedding"))) == ["tiny-embed"]
        assert list(self.cards(client.get("/deployments/new/?q=70B"))) == ["llama-70b"]
        partial = client.get("/deployments/new/?q=tiny", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="catalog-cards")
        html = partial.content.decode()
        assert partial.status_code == 200
        assert 'value="tiny-embed"' in html and 'value="llama-70b"' not in html and "<html" not in html

    def test_a_gated_card_says_it_needs_a_token(self, world, llama):
        llama.gated = True
        llama.save()
        html = world.browser("member").get("/deployments/new/").content.decode()
        assert "gated: needs a token" in html


def test_the_sizing_reads_a_catalog_rows_facts(world, embedder):
    facts = facts_for("acme/tiny-embed")
    assert (facts.parameters, facts.layers, facts.kv_heads, facts.head_dim) == (30_000_000, 4, 4, 64)
    assert facts_for("acme/not-in-the-catalog") is None
