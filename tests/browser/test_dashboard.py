"""The deployment dashboard and the Cluster page's chart in Chromium, at 1366 and 390 px, axe-core
clean: a new deployment's data fills its charts from the first point; every axis label is
horizontal (one axis style); the replicas chart shows running against target; a coarser window
draws the peak of running requests and KV-cache use beside their mean."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.browser.test_portal import create_deployment, store_samples
from tests.browser.test_walk import WIDTHS, Walk, axe_source, check_document, open_as

pytestmark = pytest.mark.browser
ROTATED = "() => document.querySelectorAll('.xtick text[transform*=rotate], .ytick text[transform*=rotate]').length"


def traces(page, chart: str) -> list[str]:
    return page.evaluate(f"() => document.getElementById('chart-{chart}').data.map((t) => t.name)")


def axis_start(page, chart: str) -> datetime:
    start = page.evaluate(f"() => document.getElementById('chart-{chart}').layout.xaxis.range[0]")
    return datetime.fromisoformat(start.replace(" ", "T")).replace(tzinfo=UTC)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_new_deployments_dashboard(portal, width):
    from metrics.models import MetricSample

    dep = create_deployment(portal.world)
    store_samples(dep, minutes=12)
    MetricSample.objects.filter(deployment=dep).update(replicas_running=1.0, replicas_target=2.0)
    first = MetricSample.objects.filter(deployment=dep).order_by("ts").first().ts
    source, walk = axe_source(), Walk()
    page, state = open_as(portal, "member", width, walk)
    state["url"] = url = f"/deployments/{dep.pk}/"
    page.goto(url, wait_until="load")
    page.locator("#chart-preemptions .main-svg").first.wait_for(timeout=60_000)  # the last chart drawn
    # The 1 h window of a 12-minute-old deployment starts at its first point, not 48 minutes before.
    assert abs((axis_start(page, "tokens") - first).total_seconds()) < 1, (axis_start(page, "tokens"), first)
    assert traces(page, "replicas") == ["running", "target"]
    assert traces(page, "queue") == ["running", "waiting"]  # 15 s points: each is its own peak
    assert page.evaluate(ROTATED) == 0
    check_document(page, url, "member", width, walk, run_axe=True, source=source)

    page.get_by_role("button", name="24h").click()
    page.wait_for_function("() => document.getElementById('chart-note').textContent.includes('peak')")
    # Charts are redrawn one after another (CHARTS order): wait for each one read below.
    page.wait_for_function("() => document.getElementById('chart-queue').data.length === 3")
    page.wait_for_function("() => document.getElementById('chart-kv_cache').data.length === 2")
    assert traces(page, "queue") == ["running", "running, peak", "waiting"]
    assert traces(page, "kv_cache") == ["KV cache", "KV cache, peak"]
    assert page.evaluate(ROTATED) == 0

    # An engine without Ray Serve reports no replicas: no empty chart for them.
    plain = create_deployment(portal.world, name="plain-vllm")
    store_samples(plain, minutes=3)
    assert walk.problems == [], "\n".join(walk.problems)
    # A fresh page (and record): leaving this one cancels its status poll, which is no failure.
    walk = Walk()
    page, state = open_as(portal, "member", width, walk)
    state["url"] = url = f"/deployments/{plain.pk}/"
    page.goto(url, wait_until="load")
    page.locator("#chart-preemptions .main-svg").first.wait_for(timeout=60_000)
    assert page.locator("#chart-replicas").is_hidden() and page.locator("#chart-tokens").is_visible()
    assert walk.problems == [], "\n".join(walk.problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_cluster_chart_keeps_its_labels_horizontal(portal, width):
    source, walk = axe_source(), Walk()
    page, state = open_as(portal, "platform_admin", width, walk)
    state["url"] = url = "/cluster/"
    page.goto(url, wait_until="load")
    page.locator(".xtick text").first.wait_for(timeout=60_000)
    assert page.evaluate(ROTATED) == 0
    check_document(page, url, "platform_admin", width, walk, run_axe=True, source=source)
    assert walk.problems == [], "\n".join(walk.problems)
