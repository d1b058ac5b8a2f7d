"""The request form's model picker (issue 33) in Chromium, axe-core clean, with JavaScript (at
1366 and 390 px) and without: search, filter by task and size, read each card's fit per flavor
(TP, GPUs, KV tokens, $/h), pick a model and see the source and revision filled in, request it.

With the script the filters swap the cards (htmx) and picking a card fills the fields
(static/portal/picker.js); without it the filters are a plain GET form and a card's
"Use <model>" link opens the form with the card chosen and the fields filled by the server.
"""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import USERNAMES
from tests.browser.test_portal import expect
from tests.browser.test_walk import WIDTHS, Walk, axe_source, check_document, open_as
from tests.support.world import PASSWORD

pytestmark = pytest.mark.browser
COMMIT = "0123456789abcdef0123456789abcdef01234567"
LLAMA70 = "meta-llama/Meta-Llama-3-70B-Instruct"
GIB = 2**30
# The fit by hand (deployments.sizing): 90 % of 80 GiB less the weights on each GPU (bf16), over
# the KV bytes per token on each GPU (layers × KV heads / TP × head dim × K and V × 2 bytes).
LLAMA70_KV_TP2 = int((0.9 * 80 * GIB - 70_600_000_000 * 2 / 2) // (80 * 8 / 2 * 128 * 2 * 2))
QWEN7_KV_TP1 = int((0.9 * 80 * GIB - 7_620_000_000 * 2) // (28 * 4 * 128 * 2 * 2))


def catalog() -> None:
    """Five rows: two chat models of known size in different buckets, a very large one, an
    embedder and a chat model whose size nobody typed in."""
    from catalog.models import CatalogModel

    facts = dict(task="chat", dtype="bfloat16", head_dim=128, max_context=8192)
    CatalogModel.objects.create(
        name="llama-70b",
        display_name="Llama 3 70B Instruct",
        source=LLAMA70,
        revision=COMMIT,
        licence="llama3",
        parameters=70_600_000_000,
        layers=80,
        kv_heads=8,
        **facts,
    )
    CatalogModel.objects.create(
        name="qwen-7b",
        display_name="Qwen2.5 7B Instruct",
        source="Qwen/Qwen2.5-7B-Instruct",
        revision="v2.5",
        parameters=7_620_000_000,
        layers=28,
        kv_heads=4,
        **facts,
    )
    CatalogModel.objects.create(
        name="llama-405b",
        display_name="Llama 3.1 405B Instruct",
        source="meta-llama/Llama-3.1-405B-Instruct",
        revision=COMMIT,
        parameters=405_000_000_000,
        layers=126,
        kv_heads=8,
        **facts,
    )
    CatalogModel.objects.create(
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
    CatalogModel.objects.create(name="mystery", display_name="Mystery chat", source="acme/mystery", revision="v1")


def filters(page):
    return page.locator("#picker-filter")


def cards(page) -> list[str]:
    return page.locator("#catalog-cards [data-catalog-model]").evaluate_all(
        "(tiles) => tiles.map((t) => t.dataset.catalogModel)"
    )


def shown(page, names: list[str]) -> None:
    """Wait until the cards are `names` (in the catalog's order), then check them exactly."""
    script = "(names) => JSON.stringify([...document.querySelectorAll('#catalog-cards [data-catalog-model]')]"
    script += ".map((t) => t.dataset.catalogModel)) === JSON.stringify(names)"
    try:
        page.wait_for_function(script, arg=names, timeout=10_000)
    except Exception:  # the assertion below says what is shown instead
        pass
    assert cards(page) == names


def fit_lines(page, name: str) -> dict[str, str]:
    lines = page.locator(f'[data-catalog-model="{name}"] li[data-flavor]')
    return lines.evaluate_all("(ls) => Object.fromEntries(ls.map((l) => [l.dataset.flavor, l.innerText]))")


def request(page, name: str) -> None:
    """Finish the request from the picked model: name, the H100 tile, two-way tensor parallel."""
    page.get_by_label("Name", exact=True).fill(name)
    page.locator("label.tile", has_text="H100 SXM5").click()
    page.get_by_label("Tensor parallel").fill("2")
    page.get_by_role("button", name="Request deployment").click()
    page.wait_for_url(re.compile(r"/deployments/\d+/$"))


def requested(name: str) -> tuple[str, str]:
    from deployments.models import ModelDeployment

    dep = ModelDeployment.objects.get(name=name)
    return dep.model_source, dep.model_revision


@pytest.mark.parametrize("width", WIDTHS)
def test_search_filter_read_the_fit_and_pick_with_the_script(portal, width):
    catalog()
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "member", width, walk)
    state["url"] = "/deployments/new/"
    page.goto("/deployments/new/", wait_until="load")
    shown(page, ["llama-405b", "llama-70b", "mystery", "qwen-7b", "tiny-embed"])

    filters(page).get_by_label("Search the catalog").fill("llama")  # htmx swaps the cards alone, the URL stays
    shown(page, ["llama-405b", "llama-70b"])
    filters(page).get_by_label("Search the catalog").fill("")
    shown(page, ["llama-405b", "llama-70b", "mystery", "qwen-7b", "tiny-embed"])
    filters(page).get_by_label("Task").select_option(label="Embedding")
    shown(page, ["tiny-embed"])
    filters(page).get_by_label("Task").select_option(label="Chat")
    shown(page, ["llama-405b", "llama-70b", "mystery", "qwen-7b"])
    filters(page).get_by_label("Size").select_option(label="5–20B")
    shown(page, ["qwen-7b"])
    assert fit_lines(page, "qwen-7b") == {
        "a100-pcie": f"A100 PCIe 80GB: TP 1, 1 GPU, KV for about {QWEN7_KV_TP1} tokens",
        "h100-sxm5": f"H100 SXM5: TP 1, 1 GPU, KV for about {QWEN7_KV_TP1} tokens, $3.90/h",
    }
    filters(page).get_by_label("Size").select_option(label="Over 100B")  # 405B needs more than one node's memory
    shown(page, ["llama-405b"])
    assert set(fit_lines(page, "llama-405b").values()) == {
        "A100 PCIe 80GB: does not fit in one node",
        "H100 SXM5: does not fit in one node",
    }
    filters(page).get_by_label("Size").select_option(label="20–100B")
    shown(page, ["llama-70b"])
    assert page.url == f"{portal.url}/deployments/new/"
    assert fit_lines(page, "llama-70b") == {
        "a100-pcie": f"A100 PCIe 80GB: TP 2, 2 GPUs, KV for about {LLAMA70_KV_TP2} tokens",
        "h100-sxm5": f"H100 SXM5: TP 2, 2 GPUs, KV for about {LLAMA70_KV_TP2} tokens, $7.80/h",
    }
    check_document(page, "/deployments/new/ (cards)", "member", width, walk, run_axe=True, source=source)

    model, revision = page.get_by_label("Model source"), page.get_by_label("Revision", exact=True)
    page.locator('label[for="catalog-model-llama-70b"]').click()
    expect()(model).to_have_value(LLAMA70)
    expect()(revision).to_have_value(COMMIT)
    page.locator('label[for="catalog-model-none"]').click()  # your own source again: the fields as before
    expect()(model).to_have_value("")
    expect()(revision).to_have_value("")
    page.locator('label[for="catalog-model-llama-70b"]').click()
    expect()(model).to_have_value(LLAMA70)
    check_document(page, "/deployments/new/ (picked)", "member", width, walk, run_axe=True, source=source)
    request(page, "picked-70b")
    assert requested("picked-70b") == (LLAMA70, COMMIT)
    assert walk.problems == [], "\n".join(walk.problems)


def test_search_filter_and_pick_without_the_script(portal):
    catalog()
    context = portal.browser.new_context(java_script_enabled=False, base_url=portal.url)
    context.set_default_timeout(15_000)
    portal.contexts.append(context)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(USERNAMES["member"])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{portal.url}/")
    page.goto("/deployments/new/")
    alpha = portal.world.alpha.pk
    shown(page, ["llama-405b", "llama-70b", "mystery", "qwen-7b", "tiny-embed"])

    filters(page).get_by_label("Search the catalog").fill("llama")
    page.get_by_role("button", name="Filter").click()  # a plain GET: the filters are in the address
    page.wait_for_url(f"{portal.url}/deployments/new/?tenant={alpha}&q=llama&task=&size=")
    shown(page, ["llama-405b", "llama-70b"])
    filters(page).get_by_label("Search the catalog").fill("")
    filters(page).get_by_label("Task").select_option(label="Chat")
    filters(page).get_by_label("Size").select_option(label="20–100B")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(f"{portal.url}/deployments/new/?tenant={alpha}&q=&task=chat&size=20-100b")
    shown(page, ["llama-70b"])
    expect()(filters(page).get_by_label("Size")).to_have_value("20-100b")
    assert fit_lines(page, "llama-70b")["h100-sxm5"] == (
        f"H100 SXM5: TP 2, 2 GPUs, KV for about {LLAMA70_KV_TP2} tokens, $7.80/h"
    )

    page.get_by_role("link", name="Use Llama 3 70B Instruct", exact=True).click()
    picked = f"{portal.url}/deployments/new/?tenant={alpha}&task=chat&size=20-100b&catalog_model=llama-70b"
    page.wait_for_url(picked)
    expect()(page.get_by_label("Model source")).to_have_value(LLAMA70)
    expect()(page.get_by_label("Revision", exact=True)).to_have_value(COMMIT)
    assert page.locator("#catalog-model-llama-70b").is_checked()
    filters(page).get_by_label("Size").select_option(label="5–20B")  # filtering on keeps the pick, first
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(f"{portal.url}/deployments/new/?tenant={alpha}&catalog_model=llama-70b&q=&task=chat&size=5-20b")
    shown(page, ["llama-70b", "qwen-7b"])
    assert page.locator("#catalog-model-llama-70b").is_checked()
    expect()(page.get_by_label("Model source")).to_have_value(LLAMA70)
    request(page, "nojs-70b")
    assert requested("nojs-70b") == (LLAMA70, COMMIT)

    # axe cannot run where scripts are off: the same page in a scripted browser, with what the
    # <noscript> elements hold put in their place, as a browser without scripts shows it.
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    scripted, state = open_as(portal, "member", 1366, walk)
    state["url"] = picked
    scripted.goto(picked, wait_until="load")
    scripted.evaluate(
        """() => document.querySelectorAll('noscript').forEach((ns) => {
             const t = document.createElement('template');
             t.innerHTML = ns.textContent;
             ns.replaceWith(t.content);
           })"""
    )
    expect()(scripted.get_by_role("link", name="Use Llama 3 70B Instruct", exact=True)).to_be_visible()
    check_document(scripted, "/deployments/new/ (no script)", "member", 1366, walk, run_axe=True, source=source)
    assert walk.problems == [], "\n".join(walk.problems)
