"""Operating a deployment in a real Chromium: a provisioning deployment's startup phases and the
Kubernetes Events of its objects on its page, and the cluster readiness page with one failing
check and its fix. Cluster: the Kubernetes API test server, with KubeRay, Kueue, the scheduler
and the kubelet simulated by writing what they would write."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.browser.conftest import screenshot
from tests.support import operators
from tests.support.http_stubs import base_url, serve
from tests.support.k8s.readiness import set_up_for_the_portal
from tests.support.k8s.startup import put_event, put_pod, vllm_line

pytestmark = pytest.mark.browser


def expect():
    from playwright.sync_api import expect as _expect

    return _expect


@pytest.fixture
def provisioning(portal, cluster_api):
    """A kuberay deployment admitted by Kueue whose worker pod is loading weights, after one
    failed scheduling attempt."""
    from deployments import services
    from deployments.reconcile import reconcile
    from quotas.kueue import sync_kueue
    from runtime import k8s
    from tests.support.factories import draft

    world = portal.world
    sync_kueue()
    dep = services.deployment_create(
        tenant=world.alpha, user=world.users["member"], data=draft(world, name="chat-8b", max_replicas=1)
    )
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )
    dep.refresh_from_db()
    rayservice = cluster_api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
    operators.workload_for(cluster_api, rayservice, {"QuotaReserved": True, "Admitted": True})
    now = datetime.now(UTC)
    pod = f"{dep.resource_name}-raycluster-abcde-worker-0"
    put_event(
        cluster_api,
        "alpha",
        ("Pod", pod),
        "FailedScheduling",
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        now,
        type_="Warning",
        count=3,
    )
    put_pod(cluster_api, "alpha", pod, dep.pk, scheduled=now, started=now)
    put_event(cluster_api, "alpha", ("Pod", pod), "Pulled", "Successfully pulled image rayproject/ray-llm", now)
    cluster_api.set_pod_log("alpha", pod, "ray-worker", vllm_line(now, "Starting to load model meta-llama/x..."))
    reconcile(dep)
    dep.refresh_from_db()
    assert dep.state == "provisioning"
    return dep


def test_a_provisioning_deployment_shows_its_phases_and_cluster_events(portal, provisioning):
    page = portal.page("member")
    page.goto(f"/deployments/{provisioning.pk}/")
    phases = page.locator("#phases")
    for label in (
        "Approved, waiting for the runtime",
        "Queued in Kueue",
        "Admitted",
        "Pods scheduled",
        "Image pulled",
        "Weights loading",
    ):
        expect()(phases).to_contain_text(label)
    expect()(phases.locator('[data-phase="weights_loading"]')).to_have_attribute("aria-current", "step")
    expect()(phases.locator('[data-phase="ready"]')).to_have_count(0)

    timeline = page.locator("#timeline")
    # The reconcile that saw it provisioning kept the Events it read: shown without a cluster call.
    expect()(timeline.locator('tr[data-source="kubernetes"][data-reason="FailedScheduling"]')).to_be_visible()
    page.get_by_role("button", name="Fetch cluster events").click()
    warning = page.locator('#timeline tr[data-reason="FailedScheduling"]')
    expect()(warning).to_contain_text("Insufficient nvidia.com/gpu")
    expect()(warning).to_have_class("warning")
    expect()(page.locator('#timeline tr[data-source="kubernetes"][data-reason="Pulled"]')).to_be_visible()
    expect()(page.locator('#timeline tr[data-source="portal"][data-reason="Approved"]')).to_be_visible()

    page.get_by_role("button", name="Show logs").click()
    expect()(page.locator("#logs pre.log")).to_contain_text("Starting to load model")
    screenshot(page, "operating-provisioning")


def test_the_readiness_page_shows_the_failing_check_and_its_fix(portal, cluster_api, settings):
    prometheus = serve(lambda method, path, body: (200, "text/plain", b"Prometheus is Ready.\n"))
    try:
        set_up_for_the_portal(cluster_api, portal.world, settings, base_url(prometheus))
        portal.world.h100.tolerations = []  # its nodes' GPU taint is no longer tolerated
        portal.world.h100.save()
        page = portal.page("platform_admin")
        page.goto("/cluster/")
        page.get_by_role("link", name="Is the cluster ready for the portal?").click()
        expect()(page.locator("h1 .badge")).to_have_text("red")
        failing = page.locator('tr[data-status="red"]')
        expect()(failing).to_have_count(1)
        expect()(failing).to_have_attribute("data-check", "flavor:h100-sxm5")
        expect()(failing).to_contain_text("nvidia.com/gpu=present:NoSchedule")
        expect()(failing).to_contain_text("Add the toleration to the flavor")
        expect()(page.locator('tr[data-status="amber"]')).to_have_count(0)
        screenshot(page, "cluster-readiness")
    finally:
        prometheus.shutdown()
