"""The request form (issue 32, "The form") in Chromium, at 1366 and 390 px, axe-core clean:

1. The fit panel lists every problem at once, each on its own line (a memory problem no longer
   hides that the hardware has no quota), with the price per hour.
2. Hardware the chosen tenant has no quota for is marked "No quota" (still selectable), and the
   marks follow the tenant as it is chosen.
3. The serving profile comes before the fields it fills.
4. The edit page's panel shows the fit of the values it opens with.
5. Each row of the approvals page shows its price per hour.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.browser.conftest import USERNAMES
from tests.browser.test_portal import create_deployment, expect
from tests.browser.test_walk import WIDTHS, Walk, axe_source, check_document, open_as

pytestmark = pytest.mark.browser
BIG = "meta-llama/Meta-Llama-3-70B-Instruct"


def visit(page, state, url, who, width, walk, source):
    state["url"] = url
    page.goto(url, wait_until="load")
    check_document(page, url, who, width, walk, run_axe=True, source=source)


def tile(page, gpu_model: str):
    return page.locator("label.tile", has_text=gpu_model)


def above(page, first: str, second: str) -> bool:
    """Whether the field labelled `first` sits above the one labelled `second` on the page."""
    return page.get_by_label(first).bounding_box()["y"] < page.get_by_label(second).bounding_box()["y"]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_panel_lists_every_problem_and_the_hardware_without_quota_is_marked(portal, width):
    from quotas.models import GpuFlavor, Membership

    world = portal.world
    GpuFlavor.objects.create(
        name="l4-4",
        gpu_model="L4",
        accelerator_type="L4",
        gpu_memory_gib=24,
        gpus_per_node=4,
        price_per_gpu_hour=Decimal("0.70"),
    )
    Membership.objects.create(user=world.users["member"], tenant=world.beta, role="member")  # two tenants to choose
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "member", width, walk)
    visit(page, state, "/deployments/new/", "member", width, walk, source)
    assert above(page, "Serving profile", "Tensor parallel") and above(page, "Serving profile", "Max replicas")
    assert above(page, "Serving profile", "Max batched tokens")

    page.get_by_label("Tenant").select_option(label="Team Alpha")
    page.get_by_label("Name", exact=True).fill("big")
    page.get_by_label("Model source").fill(BIG)
    tile(page, "L4").click()
    panel = page.locator("#preview")
    expect()(panel.locator("[data-fit]")).to_have_attribute("data-fit", "no_fit")
    expect()(panel.locator("[data-memory]")).to_have_attribute("data-memory", "does_not_fit")
    problems = panel.locator("#fit-problems li")
    expect()(problems).to_have_count(2)
    assert problems.nth(0).inner_text().startswith("Hardware: Team Alpha has no quota for L4 (l4-4).")
    assert problems.nth(1).inner_text().startswith("Tensor parallel: Needs about")
    expect()(panel.locator("[data-price-per-hour]")).to_have_text("Price: $0.70/h (1 GPU × $0.70/GPU-h)")
    expect()(tile(page, "L4").locator(".no-quota")).to_have_text("No quota")
    expect()(tile(page, "A100").locator(".no-quota")).to_have_text("")
    assert page.get_by_role("radio", name="L4").is_enabled()
    check_document(page, "/deployments/new/ (filled)", "member", width, walk, run_axe=True, source=source)

    page.get_by_label("Tenant").select_option(label="Team Beta")  # beta has H100 quota only
    expect()(tile(page, "A100").locator(".no-quota")).to_have_text("No quota")
    expect()(tile(page, "H100").locator(".no-quota")).to_have_text("")

    # Fixed on the panel's word: an H100 holds the model split over 4 GPUs, and beta has quota.
    tile(page, "H100").click()
    page.get_by_label("Tensor parallel").fill("4")
    expect()(panel.locator("[data-fit]")).to_have_attribute("data-fit", "nominal")
    expect()(panel.locator("[data-memory]")).to_have_attribute("data-memory", "fits")
    expect()(panel.locator("#fit-problems")).to_have_count(0)
    expect()(panel.locator("[data-price-per-hour]")).to_have_text("Price: $15.60/h (4 GPUs × $3.90/GPU-h)")
    assert walk.problems == [], "\n".join(walk.problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_edit_page_shows_the_fit_of_what_it_opens_with(portal, width):
    dep = create_deployment(portal.world)
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "member", width, walk)
    visit(page, state, f"/deployments/{dep.pk}/edit/", "member", width, walk, source)
    panel = page.locator("#preview")
    assert "Fill in the model and hardware" not in panel.inner_text()
    expect()(panel.locator("[data-fit]")).to_have_attribute("data-fit", "nominal")
    expect()(panel.locator("[data-memory]")).to_have_attribute("data-memory", "fits")
    expect()(panel.locator("[data-price-per-hour]")).to_have_text("Price: $7.80/h (2 GPUs × $3.90/GPU-h)")
    assert above(page, "Serving profile", "Tensor parallel") and above(page, "Serving profile", "Quantization")
    assert walk.problems == [], "\n".join(walk.problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_each_approvals_row_shows_its_price_per_hour(portal, width):
    dep = create_deployment(portal.world)
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "platform_admin", width, walk)
    visit(page, state, "/approvals/", "platform_admin", width, walk, source)
    row = page.locator(f'article.proposal[data-deployment="{dep.pk}"]')
    expect()(row.locator("[data-price-per-hour]")).to_have_text("$7.80/h")
    assert row.locator("[data-price-per-hour]").is_visible()
    assert walk.problems == [], "\n".join(walk.problems)
