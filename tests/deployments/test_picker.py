"""The request form's catalog picker (issue 33): the catalog models a tenant's policy allows, as
cards with their fit on each of the tenant's flavors, and `catalog_model` as a form field with
the API's meaning, through the API's code path (catalog.drafts), refused with the API's messages."""

from __future__ import annotations

from decimal import Decimal

import pytest

from catalog.models import CatalogModel
from catalog.sizes import SIZE_CHOICES
from deployments import picker, services, sizing
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


# Rows at and around each bound of catalog.sizes: published sizes, exact bounds, one past them.
SIZED = {
    "llama-3b": 3_210_000_000,  # Llama 3.2 3B: over "3B", still small
    "at-5b": 5_000_000_000,  # a bound belongs to the bucket below it
    "past-5b": 5_000_000_001,
    "qwen-14b": 14_700_000_000,
    "at-20b": 20_000_000_000,
    "llama-70b-ish": 70_600_000_000,
    "at-100b": 100_000_000_000,
    "llama-405b": 405_000_000_000,
    "unknown": None,
}


@pytest.fixture
def sized(db):
    for name, parameters in SIZED.items():
        CatalogModel.objects.create(
            name=name, display_name=name.title(), source=f"acme/{name}", revision="v1", parameters=parameters
        )


class TestSizeFilter:
    def names(self, response) -> list[str]:
        assert response.status_code == 200
        return [card.row.name for card in response.context["picker"]["cards"]]

    def test_each_bucket_holds_the_sizes_between_its_bounds_and_unknown_sizes_none(self, world, sized):
        client = world.browser("member")
        assert self.names(client.get("/deployments/new/?size=up-to-5b")) == ["at-5b", "llama-3b"]
        assert self.names(client.get("/deployments/new/?size=5-20b")) == ["at-20b", "past-5b", "qwen-14b"]
        assert self.names(client.get("/deployments/new/?size=20-100b")) == ["at-100b", "llama-70b-ish"]
        assert self.names(client.get("/deployments/new/?size=over-100b")) == ["llama-405b"]
        assert self.names(client.get("/deployments/new/")) == sorted(SIZED)  # "unknown" only here

    def test_a_size_that_is_not_a_bucket_filters_nothing_and_is_not_an_error(self, world, sized):
        client = world.browser("member")
        for size in ("huge", "5-20", "' OR 1=1 --", "x" * 5000):
            page = client.get("/deployments/new/", {"size": size})
            assert self.names(page) == sorted(SIZED)
            assert page.context["picker"]["size"] == ""

    def test_size_combines_with_task_and_search_as_plain_get_and_htmx(self, world, llama, embedder):
        client = world.browser("member")
        assert self.names(client.get("/deployments/new/?size=up-to-5b")) == ["tiny-embed"]
        assert self.names(client.get("/deployments/new/?size=up-to-5b&task=chat")) == []
        assert self.names(client.get("/deployments/new/?size=20-100b&q=llama")) == ["llama-70b"]
        partial = client.get("/deployments/new/?size=20-100b", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="catalog-cards")
        html = partial.content.decode()
        assert 'value="llama-70b"' in html and 'value="tiny-embed"' not in html and "<html" not in html
        empty = client.get("/deployments/new/?size=over-100b", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="catalog-cards")
        assert "No catalog model matches this search." in empty.content.decode()

    def test_the_chosen_size_is_selected_and_each_cards_link_keeps_the_filters(self, world, llama):
        page = world.browser("member").get("/deployments/new/?size=20-100b&task=chat&q=llama")
        html = page.content.decode()
        assert '<option value="20-100b" selected>20–100B</option>' in html
        tenant = page.context["picker"]["tenant"]
        link = f"?tenant={tenant.pk}&amp;q=llama&amp;task=chat&amp;size=20-100b&amp;catalog_model=llama-70b"
        assert f'<a href="{link}" data-pick="llama-70b">' in html

    def test_the_size_filter_keeps_the_picked_card(self, world, llama, embedder):
        page = world.browser("member").get("/deployments/new/?size=up-to-5b&catalog_model=llama-70b")
        assert self.names(page) == ["llama-70b", "tiny-embed"]


class TestPickingWithoutScript:
    """A card's link (?catalog_model=<name>) opens the form with the card chosen and its source and
    revision filled in; the filter form carries the pick on."""

    def test_the_link_fills_the_source_and_revision_and_checks_the_card(self, world, llama):
        page = world.browser("member").get("/deployments/new/?catalog_model=llama-70b")
        form = page.context["form"]
        assert (form["model_source"].value(), form["model_revision"].value()) == (LLAMA70, COMMIT)
        html = page.content.decode()
        assert 'id="catalog-model-llama-70b" aria-describedby="catalog-fit-llama-70b"' in html
        assert f'data-revision="{COMMIT}" data-task="chat" checked>' in html
        assert '<noscript><input type="hidden" name="catalog_model" value="llama-70b"></noscript>' in html

    def test_a_model_the_policy_does_not_allow_fills_nothing(self, world, llama, embedder):
        allow(world, models=[embedder])
        page = world.browser("member").get(f"/deployments/new/?tenant={world.alpha.pk}&catalog_model=llama-70b")
        form = page.context["form"]
        assert (form["model_source"].value(), form["model_revision"].value()) == (None, None)
        assert [card.row.name for card in page.context["picker"]["cards"]] == ["tiny-embed"]

    def test_the_edit_page_takes_a_picked_card_too(self, world, llama, embedder):
        data = draft(world, model_source=LLAMA70, model_revision=COMMIT, tensor_parallel_size=2, max_replicas=1)
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=data)
        page = world.browser("member").get(f"/deployments/{dep.pk}/edit/?catalog_model=tiny-embed")
        form = page.context["form"]
        assert (form["model_source"].value(), form["model_revision"].value()) == ("acme/tiny-embed", "v1")
        assert page.context["picker"]["selected"] == "tiny-embed"


def test_the_picker_and_the_catalog_api_agree_on_every_size(world, sized):
    """One definition (catalog.sizes): the API's `size` filter lists what the picker shows."""
    client = world.client("member")
    shown = []
    for value, _ in SIZE_CHOICES:
        api = client.get("/api/v1/catalog/models/", {"size": value}).json()["results"]
        assert sorted(r["name"] for r in api) == [row.name for row in picker.allowed_rows(None, size=value)]
        shown += [r["name"] for r in api]
    assert sorted(shown) == sorted(set(SIZED) - {"unknown"})  # every known size in exactly one bucket
