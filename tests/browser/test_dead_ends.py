"""Dead ends (issue 32), in Chromium at 1366 and 390 px, axe-core clean:

1. A viewer sees only what a viewer can do, and a short line says why the rest is absent: no
   "Mint a key" (the key list, the deployment's Endpoint panel, the mint page itself), no "Show
   logs", no "New deployment" on the overview. The server still refuses (tests/access).
2. Minting from the navigation: a one-tenant member finds the tenant chosen; a deployment chosen
   alone mints in its tenant.
3. Adding a person who has no account leads a platform admin to the invitation page, filled in.
4. "API keys" and "API tokens" say which is which, on each page and in the navigation.
5. Removing a member and revoking a key or an API token ask first, on a page of their own, with
   JavaScript turned off.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import USERNAMES
from tests.browser.test_portal import create_deployment
from tests.browser.test_walk import WIDTHS, Walk, axe_source, check_document, open_as
from tests.support.world import PASSWORD

pytestmark = pytest.mark.browser


def visit(page, state, url: str, who: str, width: int, walk: Walk, source: str) -> None:
    state["url"] = url
    page.goto(url, wait_until="load")
    check_document(page, url, who, width, walk, run_axe=True, source=source)


def no_script_page(portal, who: str, width: int):
    """A page signed in as `who` in a browser context with JavaScript turned off."""
    context = portal.browser.new_context(
        viewport={"width": width, "height": 900}, base_url=portal.url, java_script_enabled=False
    )
    context.set_default_timeout(10_000)
    portal.contexts.append(context)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(USERNAMES[who])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{portal.url}/")
    return page


@pytest.mark.parametrize("width", WIDTHS)
def test_a_viewer_sees_only_what_a_viewer_can_do_and_why(portal, width):
    dep = create_deployment(portal.world)
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "viewer", width, walk)

    visit(page, state, "/", "viewer", width, walk, source)
    assert page.get_by_role("link", name="New deployment").count() == 0
    assert "a member or tenant admin of Team Alpha requests deployments" in page.locator("main").inner_text()

    visit(page, state, "/keys/", "viewer", width, walk, source)
    assert page.get_by_role("link", name="Mint a key").count() == 0
    note = page.locator("#mint-note")
    assert note.is_visible() and "a member or tenant admin of the tenant mints keys" in note.inner_text()

    visit(page, state, f"/deployments/{dep.pk}/", "viewer", width, walk, source)
    assert page.get_by_role("button", name="Show logs").count() == 0
    assert page.get_by_role("link", name="Download").count() == 0
    assert "only the tenant's members and tenant admins read them" in page.locator("#logs-absent").inner_text()
    assert page.locator("#endpoint-panel").get_by_role("link", name="Mint a key").count() == 0
    assert "mints keys" in page.locator("#key-mint-note").inner_text()

    # Typed or bookmarked, the mint page says why instead of offering a form with empty lists.
    visit(page, state, "/keys/new/", "viewer", width, walk, source)
    assert page.locator("main form").count() == 0
    assert "a member or tenant admin of the tenant mints keys" in page.locator("#mint-refusal").inner_text()

    # A member of the same tenant has every one of these controls.
    member, member_state = open_as(portal, "member", width, walk)
    visit(member, member_state, f"/deployments/{dep.pk}/", "member", width, walk, source)
    assert member.get_by_role("button", name="Show logs").is_visible()
    assert member.locator("#endpoint-panel").get_by_role("link", name="Mint a key").is_visible()
    assert member.locator("#logs-absent").count() == 0
    assert walk.problems == [], "\n".join(walk.problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_minting_from_the_navigation_with_a_deployment_alone(portal, width):
    from access.models import ApiKey

    dep = create_deployment(portal.world)
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "member", width, walk)
    state["url"] = "/keys/"
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API keys").click()
    page.get_by_role("link", name="Mint a key").click()
    state["url"] = "/keys/new/"
    check_document(page, "/keys/new/", "member", width, walk, run_axe=True, source=source)
    # The member's one tenant is chosen already: there is nothing else to choose.
    assert page.get_by_label("Tenant").input_value() == "alpha"
    assert page.get_by_label("Tenant").locator("option").all_inner_texts() == ["Team Alpha"]
    page.get_by_label("Deployment").select_option(label=f"alpha / {dep.name}")
    page.get_by_label("Name").fill("laptop")
    page.get_by_role("button", name="Mint key").click()
    page.get_by_role("heading", name="Your new API key").wait_for()
    key = ApiKey.objects.get()
    assert (key.tenant_id, key.deployment_id) == (portal.world.alpha.pk, dep.pk)

    # A platform admin mints in any tenant: the deployment alone says which.
    admin, admin_state = open_as(portal, "platform_admin", width, walk)
    visit(admin, admin_state, "/keys/new/", "platform_admin", width, walk, source)
    assert admin.get_by_label("Tenant").input_value() == ""
    admin.get_by_label("Deployment").select_option(label=f"alpha / {dep.name}")
    admin.get_by_label("Name").fill("ops")
    admin.get_by_role("button", name="Mint key").click()
    admin.get_by_role("heading", name="Your new API key").wait_for()
    assert ApiKey.objects.get(name="ops").tenant_id == portal.world.alpha.pk
    assert walk.problems == [], "\n".join(walk.problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_adding_a_person_without_an_account_leads_to_the_invitation(portal, width):
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "platform_admin", width, walk)
    visit(page, state, "/tenants/alpha/members/", "platform_admin", width, walk, source)
    form = page.get_by_role("form", name="Add a person")
    form.get_by_label("Username or e-mail").fill("erin@example.org")
    form.get_by_role("button", name="Add member").click()
    page.locator("#invite-hint").wait_for()
    check_document(
        page, "/tenants/alpha/members/ (refused)", "platform_admin", width, walk, run_axe=True, source=source
    )
    assert "invite them first" in form.inner_text()
    page.get_by_role("link", name="Invite them").click()
    page.wait_for_url("**/platform/invite/**")
    state["url"] = "/platform/invite/"
    check_document(page, "/platform/invite/", "platform_admin", width, walk, run_axe=True, source=source)
    assert page.get_by_label("Email").input_value() == "erin@example.org"

    # A tenant admin cannot invite: the refusal says whom to ask, and there is no link.
    admin, admin_state = open_as(portal, "tenant_admin", width, walk)
    visit(admin, admin_state, "/tenants/alpha/members/", "tenant_admin", width, walk, source)
    form = admin.get_by_role("form", name="Add a person")
    form.get_by_label("Username or e-mail").fill("erin")
    form.get_by_role("button", name="Add member").click()
    admin.locator(".field.has-error").wait_for()
    assert "a platform admin invites them" in form.inner_text()
    assert admin.get_by_role("link", name="Invite them").count() == 0
    assert walk.problems == [], "\n".join(walk.problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_api_keys_and_api_tokens_say_which_is_which(portal, width):
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "member", width, walk)
    nav = page.get_by_role("navigation", name="Main")
    assert nav.get_by_role("link", name="API keys").get_attribute("title") == "Keys that call the model endpoints"
    assert nav.get_by_role("link", name="API tokens").get_attribute("title") == "Tokens that call the portal's REST API"
    visit(page, state, "/keys/", "member", width, walk, source)
    assert "API keys call the model endpoints" in page.locator("#keys-vs-tokens").inner_text()
    visit(page, state, "/tokens/", "member", width, walk, source)
    assert "API tokens call the portal's REST API" in page.locator("#keys-vs-tokens").inner_text()
    assert walk.problems == [], "\n".join(walk.problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_remove_and_revoke_ask_first_without_javascript(portal, width):
    from access.models import ApiKey
    from access.services import key_mint
    from portal.api import ApiToken, token_create
    from quotas.models import Membership

    world = portal.world
    key, _ = key_mint(user=world.users["member"], tenant=world.alpha, name="laptop")
    token_create(user=world.users["tenant_admin"], name="ci", expires_in_days=7)
    page = no_script_page(portal, "tenant_admin", width)
    width_ok = "() => document.documentElement.scrollWidth <= window.innerWidth + 1"

    page.goto("/keys/")
    page.get_by_role("link", name="Revoke laptop").click()
    page.get_by_role("heading", name="Revoke key laptop?").wait_for()
    assert page.evaluate(width_ok)
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None  # asking changed nothing
    page.get_by_role("button", name="Revoke laptop").click()
    page.wait_for_url(f"{portal.url}/keys/")
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None

    page.goto("/tokens/")
    page.get_by_role("link", name="Revoke ci").click()
    page.get_by_role("heading", name="Revoke API token ci?").wait_for()
    assert page.evaluate(width_ok)
    assert ApiToken.objects.filter(user=world.users["tenant_admin"]).count() == 1
    page.get_by_role("button", name="Revoke ci").click()
    page.wait_for_url(f"{portal.url}/tokens/")
    assert not ApiToken.objects.filter(user=world.users["tenant_admin"]).exists()

    page.goto("/tenants/alpha/members/")
    page.locator('tr[data-member="alpha-viewer"]').get_by_role("button", name="Remove").click()
    page.get_by_role("heading", name="Remove alpha-viewer from Team Alpha?").wait_for()
    assert page.evaluate(width_ok)
    assert Membership.objects.filter(user=world.users["viewer"]).exists()
    page.get_by_role("button", name="Remove alpha-viewer").click()
    page.wait_for_url(f"{portal.url}/tenants/alpha/members/")
    assert not Membership.objects.filter(user=world.users["viewer"]).exists()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_confirmation_pages_are_axe_clean(portal, width):
    from access.services import key_mint
    from portal.api import token_create

    world = portal.world
    key, _ = key_mint(user=world.users["member"], tenant=world.alpha, name="laptop")
    token, _ = token_create(user=world.users["tenant_admin"], name="ci", expires_in_days=7)
    source, walk = axe_source(), Walk(allowed=tuple(USERNAMES.values()))
    page, state = open_as(portal, "tenant_admin", width, walk)
    for url in (f"/keys/{key.pk}/revoke/", f"/tokens/{token.token_key}/revoke/"):
        visit(page, state, url, "tenant_admin", width, walk, source)
    page.goto("/tenants/alpha/members/")
    page.locator('tr[data-member="alpha-viewer"]').get_by_role("button", name="Remove").click()
    page.get_by_role("heading", name="Remove alpha-viewer from Team Alpha?").wait_for()
    check_document(page, "member remove", "tenant_admin", width, walk, run_axe=True, source=source)
    assert walk.problems == [], "\n".join(walk.problems)
