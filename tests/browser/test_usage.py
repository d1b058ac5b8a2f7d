"""The usage page in Chromium with figures in it (the walk sees it with an empty ledger): every
role that has one, at 1366 and 390 px, with a budget banner and an unpriced tenant, no console
error, nothing wider than the window, axe-core serious/critical clean; sorting by a column
heading reorders the rows."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from django.utils import timezone

from deployments.models import ModelDeployment
from tests.browser.test_walk import Walk, axe_source, check_document, open_as
from usage.models import UsageMonth

pytestmark = pytest.mark.browser
NOV = date(2026, 11, 1)


def seed(world) -> None:
    """November 2026 for the page; the same figures this month for the overview's banner."""
    world.alpha.monthly_budget = Decimal("500")
    world.alpha.save()
    for k, (tenant, flavor, cost) in enumerate(
        [(world.alpha, world.h100, "390"), (world.alpha, world.h100, "60"), (world.beta, world.a100, None)]
    ):
        dep = ModelDeployment.objects.create(
            tenant=tenant, name=f"model-{k}", model_source="m", served_model_name=f"model-{k}", flavor=flavor
        )
        for month in {NOV, timezone.localdate().replace(day=1)}:
            UsageMonth.objects.create(
                deployment=dep,
                tenant=tenant,
                month=month,
                reserved_gpu_hours=Decimal(100 - k),
                serving_gpu_hours=Decimal(50 + k),
                generation_tokens=1_000_000 * (k + 1),
                cost=None if cost is None else Decimal(cost),
                note="Never served this month: GPUs were reserved but the deployment was never Ready."
                if k == 1
                else "",
            )


def test_the_usage_page_as_every_role_at_both_widths(portal):
    source = axe_source()
    seed(portal.world)
    walk = Walk()
    for width in (1366, 390):
        for who in ("viewer", "tenant_admin", "other_member", "platform_admin"):
            page, state = open_as(portal, who, width, walk)
            for url in ("/usage/?month=2026-11", "/"):  # the overview shows this month's figure and banner
                state["url"] = url
                page.goto(url, wait_until="load")
                check_document(page, url, who, width, walk, run_axe=True, source=source)
    assert walk.problems == [], "\n".join(walk.problems)


def test_a_column_heading_sorts_the_rows(portal):
    seed(portal.world)
    page, _ = open_as(portal, "platform_admin", 1366, Walk())
    page.goto("/usage/?month=2026-11")
    rows = page.locator("#h-deps ~ .table-wrap tbody tr td:nth-child(2)")
    assert [t.split()[0] for t in rows.all_inner_texts()] == ["model-0", "model-1", "model-2"]  # cost, high first
    page.get_by_role("link", name="Reserved GPU-h").click()
    page.wait_for_url("**sort=-reserved**")
    page.get_by_role("link", name="Reserved GPU-h").click()  # again: low first
    page.wait_for_url("**sort=reserved**")
    assert [t.split()[0] for t in rows.all_inner_texts()] == ["model-2", "model-1", "model-0"]
    assert page.get_by_text("Team Alpha has used 90 % of its monthly budget").is_visible()
