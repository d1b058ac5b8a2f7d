"""Issue 32, "Confirmation and wording", in a real Chromium at a laptop (1366 px) and a phone
(390 px) width: stop asks first and works with scripts turned off; a stopped deployment says it
does not serve, why, and how to start it, with its last run as history; a local deployment shows
no Kubernetes controls; the snippets include streaming; the usage sort menu is in words."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import USERNAMES
from tests.support.world import PASSWORD

pytestmark = pytest.mark.browser

WIDTHS = (1366, 390)
URL = "http://llama-chat.alpha.svc:8000/v1"


def expect():
    from playwright.sync_api import expect as _expect

    return _expect


def running(world, **overrides):
    """Revision 1 approved and observed Ready, serving at URL (2 H100s reserved)."""
    from deployments import services
    from tests.support.factories import draft

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, **overrides))
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    dep.refresh_from_db()
    services.deployment_observe(
        deployment_id=dep.pk,
        generation=dep.generation,
        state="ready",
        conditions=[{"type": "Ready", "status": "True", "reason": "ServeRunning"}],
        observed_generation=dep.generation,
        endpoint_url=URL,
        message=f"Serving on {URL}.",
    )
    dep.refresh_from_db()
    return dep


def without_scripts(portal, role: str, width: int):
    """A page signed in as `role` with JavaScript turned off (the sign-in form needs none)."""
    context = portal.browser.new_context(
        viewport={"width": width, "height": 900}, base_url=portal.url, java_script_enabled=False
    )
    portal.contexts.append(context)
    page = context.new_page()
    page.goto(portal.login_path)
    page.get_by_label("Username").fill(USERNAMES[role])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{portal.url}/")
    return page


def fits(page) -> None:
    wide = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide[0] <= wide[1] + 1, wide


@pytest.mark.parametrize("width", WIDTHS)
def test_stop_asks_first_without_scripts_then_says_why_it_does_not_serve(portal, width):
    from deployments.models import ModelDeployment

    dep = running(portal.world)
    page = without_scripts(portal, "member", width)
    page.goto(f"/deployments/{dep.pk}/")
    expect()(page.locator("#endpoint-url")).to_have_text(URL)
    page.locator("#actions").get_by_role("button", name="Stop").click()
    page.wait_for_url(re.compile(rf"/deployments/{dep.pk}/stop/\??$"))  # a GET form: no query
    expect()(page.get_by_role("heading", level=1)).to_have_text("Stop llama-chat?")
    fits(page)
    page.get_by_role("link", name="Keep it running").click()
    page.wait_for_url(f"{portal.url}/deployments/{dep.pk}/")
    assert ModelDeployment.objects.get(pk=dep.pk).state == "ready"  # asking changed nothing

    page.locator("#actions").get_by_role("button", name="Stop").click()
    page.get_by_role("button", name="Yes, stop it").click()
    page.wait_for_url(f"{portal.url}/deployments/{dep.pk}/")
    assert ModelDeployment.objects.get(pk=dep.pk).state == "stopped"
    notice = page.locator("#not-serving")
    expect()(notice).to_contain_text(re.compile(r"Not serving: stopped by alpha-member, \d+\s+minutes? ago\."))
    expect()(page.locator("#serve-again")).to_contain_text("Start it again with Start at the top of the page")
    expect()(page.locator("#endpoint-url")).to_have_count(0)
    expect()(page.locator("#status-message")).to_have_count(0)
    expect()(page.locator("table.conditions.history caption")).to_have_text("Last run")
    expect()(page.locator("#actions").get_by_role("button", name="Start")).to_be_visible()
    fits(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_local_deployment_shows_no_kubernetes_controls(portal, width):
    from deployments.models import ModelDeployment

    dep = running(portal.world)
    ModelDeployment.objects.filter(pk=dep.pk).update(backend="local")
    page = portal.page("member", width=width)
    page.goto(f"/deployments/{dep.pk}/")
    expect()(page.locator("#timeline table.events")).to_be_visible()  # the timeline loaded
    expect()(page.get_by_role("button", name="Fetch cluster events")).to_have_count(0)
    expect()(page.locator("#kueue-story")).to_have_count(0)
    expect()(page.locator("#timeline")).not_to_contain_text("Cluster events")
    fits(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_streaming_snippets_copy_like_the_plain_ones(portal, width):
    dep = running(portal.world)
    page = portal.page("viewer", width=width)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=portal.url)
    page.goto(f"/deployments/{dep.pk}/")
    expect()(page.get_by_role("heading", name="curl, streaming")).to_be_visible()
    curl = page.locator("#snippet-curl-stream").inner_text()
    assert curl.startswith(f"curl -N {URL}/chat/completions") and '"stream": true' in curl
    page.locator("[data-copy='snippet-curl-stream']").click()
    assert page.evaluate("() => navigator.clipboard.readText()") == curl
    python = page.locator("#snippet-python-stream").inner_text()
    assert "stream=True" in python and "for chunk in stream:" in python
    fits(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_usage_sort_menu_is_in_words(portal, width):
    page = portal.page("member", width=width)
    page.goto("/usage/?sort=cost_per_mtok")
    menu = page.get_by_label("Sort by")
    expect()(menu.locator("option:checked")).to_have_text("$ / 1M tokens (low first)")
    labels = menu.locator("option").all_inner_texts()
    assert len(labels) == 16 and not [label for label in labels if "_" in label], labels
    fits(page)
