"""The flavor page with a Karpenter pool, in Chromium: a platform admin provisions a flavor
through the form (no topology levels: a flavor has a pool or a topology, quotas.provisioning),
the page then shows the pool (GPU limit, NodePool as applied); at 1366 and 390 px it stays
within the window and axe-core finds nothing serious."""

from __future__ import annotations

import pytest

from quotas.models import GpuFlavor
from tests.browser.test_walk import WIDTHS, Walk, axe_source, check_document, open_as


@pytest.fixture
def aws(settings):
    settings.KARPENTER_PLATFORM = "aws"
    settings.KARPENTER_NODE_ROLE = "KarpenterNodeRole-test"
    settings.KARPENTER_SUBNET_TAGS = {"karpenter.sh/discovery": "test"}
    settings.KARPENTER_SECURITY_GROUP_TAGS = {"karpenter.sh/discovery": "test"}
    settings.KARPENTER_AMI_ALIAS = "al2023@v20240807"


def test_an_admin_provisions_a_flavor_and_sees_its_pool(portal, aws):
    source = axe_source()
    walk = Walk()
    page, state = open_as(portal, "platform_admin", WIDTHS[0], walk)
    state["url"] = url = "/platform/flavors/h100-sxm5/"
    page.goto(url)
    page.get_by_label("Provision nodes with Karpenter").check()
    page.get_by_label("Capacity").select_option("spot,on-demand")
    page.get_by_role("button", name="Save flavor").click()
    page.wait_for_url(f"{portal.url}/platform/")
    flavor = GpuFlavor.objects.get(name="h100-sxm5")
    assert flavor.provisioning["capacity_types"] == ["spot", "on-demand"]
    for width in WIDTHS:
        page, state = open_as(portal, "platform_admin", width, walk)
        state["url"] = url
        page.goto(url, wait_until="load")
        assert page.locator("[data-gpu-limit]").get_attribute("data-gpu-limit") == "16"
        assert "kind: NodePool" in page.locator("#nodepool-manifest").inner_text()
        check_document(page, url, "platform_admin", width, walk, run_axe=True, source=source)
    assert walk.problems == [], "\n".join(walk.problems)
