"""A platform admin's everyday pages in Chromium, at 1366 and 390 px, axe-core clean:

1. The "Set quota" form opens on the current values and follows the flavor chosen, so a new
   nominal alone leaves the borrowing limit as it was (it used to send 0, unseen).
2. The navigation fits one row at a laptop width on every admin page.
"""

from __future__ import annotations

import pytest

from tests.browser.test_walk import WIDTHS, Walk, axe_source, check_document, open_as

pytestmark = pytest.mark.browser
ADMIN_PAGES = ("/", "/platform/", "/platform/tenants/alpha/", "/approvals/", "/cluster/", "/usage/", "/keys/")


def quota_field(page, label: str):
    return page.get_by_role("form", name="Set quota").get_by_label(label, exact=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_quota_form_changes_only_what_the_admin_edits(portal, width):
    from core.models import AuditEvent
    from quotas.models import TenantQuota

    world = portal.world
    TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(borrowing_limit_gpus=8)
    source, walk = axe_source(), Walk()
    page, state = open_as(portal, "platform_admin", width, walk)
    state["url"] = url = "/platform/tenants/alpha/"
    page.goto(url, wait_until="load")
    values = ("Nominal GPUs", "Borrowing limit", "Lending limit")
    # The tenant's first quota (by flavor name) is shown with its values.
    assert quota_field(page, "GPU flavor").input_value() == str(world.a100.pk)
    assert [quota_field(page, name).input_value() for name in values] == ["4", "0", ""]
    quota_field(page, "GPU flavor").select_option(str(world.h100.pk))
    assert [quota_field(page, name).input_value() for name in values] == ["8", "8", ""]
    check_document(page, url, "platform_admin", width, walk, run_axe=True, source=source)
    quota_field(page, "Nominal GPUs").fill("10")
    quota_field(page, "Reason").fill("launch")
    page.get_by_role("form", name="Set quota").get_by_role("button", name="Set quota").click()
    page.wait_for_url(f"{portal.url}{url}")
    quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
    assert (quota.nominal_gpus, quota.borrowing_limit_gpus, quota.lending_limit_gpus) == (10, 8, None)
    change = AuditEvent.objects.filter(action="quota.set").latest("pk").changes
    assert change["from"]["borrowing_limit_gpus"] == change["to"]["borrowing_limit_gpus"] == 8
    assert walk.problems == [], "\n".join(walk.problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_navigation_is_one_row_on_every_admin_page(portal, width):
    """At 1366 px every link fits beside the brand and the account controls; at 390 px the row
    scrolls sideways instead of wrapping."""
    from quotas import services as quota_services

    world = portal.world
    quota_services.quota_change_request_create(  # a count beside "Approvals", as on a busy day
        tenant=world.alpha,
        user=world.users["tenant_admin"],
        flavor=world.h100,
        nominal_gpus=12,
        borrowing_limit_gpus=4,
        lending_limit_gpus=None,
        justification="More traffic.",
    )
    source, walk = axe_source(), Walk()
    page, state = open_as(portal, "platform_admin", width, walk)
    for url in ADMIN_PAGES:
        state["url"] = url
        page.goto(url, wait_until="load")
        tops = page.evaluate(
            "() => Array.from(document.querySelectorAll('header.top nav a'), (a) => a.getBoundingClientRect().top)"
        )
        assert len(tops) >= 9 and max(tops) - min(tops) < 1, f"{url} at {width}px: nav link tops {tops}"
        if width >= 1024:  # every link in view, and the header one row: brand, links, account
            spare = page.evaluate(
                """() => { const nav = document.querySelector('header.top nav');
                     const used = Array.from(nav.children).reduce((w, a) => w + a.getBoundingClientRect().width, 0);
                     return nav.clientWidth - used; }"""
            )
            assert spare >= 0, f"{url}: the nav's links need {-spare}px more than the row has"
            middles = page.evaluate(
                """() => Array.from(document.querySelectorAll('header.top > *'),
                     (e) => { const r = e.getBoundingClientRect(); return r.top + r.height / 2; })"""
            )
            assert max(middles) - min(middles) < 2, f"{url}: the header is not one row: {middles}"
        check_document(page, url, "platform_admin", width, walk, run_axe=url == ADMIN_PAGES[0], source=source)
    assert walk.problems == [], "\n".join(walk.problems)
