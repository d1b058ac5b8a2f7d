"""Revisions in a real Chromium (issue 30): a member proposes a change to a running deployment,
sees it waiting beside what serves, withdraws it after a confirmation, and what runs is untouched."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser


def expect():
    from playwright.sync_api import expect as _expect

    return _expect


def running(world):
    """Revision 1 approved and observed Ready, with its 2 H100s reserved."""
    from deployments import services
    from tests.support.factories import draft

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    dep.refresh_from_db()
    services.deployment_observe(
        deployment_id=dep.pk,
        generation=dep.generation,
        state="ready",
        conditions=[{"type": "Ready", "status": "True", "reason": "ServeRunning"}],
        observed_generation=dep.generation,
    )
    dep.refresh_from_db()
    assert (dep.state, dep.reserved_gpus) == ("ready", 2)
    return dep


def test_a_member_withdraws_a_change_after_confirming_and_what_runs_stays(portal):
    from deployments.models import ModelDeployment

    dep = running(portal.world)
    member = portal.page("member")
    member.goto(f"/deployments/{dep.pk}/")
    member.get_by_role("link", name="Edit spec").click()
    member.get_by_label("Max model length").fill("4096")
    member.get_by_role("button", name="Propose change").click()
    member.wait_for_url(f"{portal.url}/deployments/{dep.pk}/")
    expect()(member.locator(".messages")).to_contain_text(
        "Revision 2 waits for a platform admin's approval; revision 1 keeps running meanwhile."
    )
    panel = member.locator("#proposed-change")
    expect()(panel.get_by_role("heading")).to_have_text("Proposed change: revision 2")
    expect()(panel.locator("tr[data-field='max_model_len']")).to_contain_text(re.compile(r"8192\s*→\s*4096"))
    expect()(member.locator("#actions").get_by_role("button", name="Stop")).to_be_visible()

    panel.get_by_role("button", name="Withdraw change").click()
    member.wait_for_url(re.compile(rf"/deployments/{dep.pk}/withdraw/\?revision=2$"))
    expect()(member.get_by_role("heading", level=1)).to_have_text("Withdraw revision 2 of llama-chat?")
    assert ModelDeployment.objects.get(pk=dep.pk).proposed_number == 2  # asking changed nothing
    member.get_by_role("button", name="Yes, withdraw revision 2").click()

    member.wait_for_url(f"{portal.url}/deployments/{dep.pk}/")
    expect()(member.locator(".messages")).to_contain_text("Withdrew revision 2; revision 1 keeps running, untouched.")
    expect()(member.locator("#proposed-change")).to_have_count(0)
    expect()(member.locator("#head-badge [data-state]")).to_have_attribute("data-state", "ready")
    expect()(member.locator("#spec-reserved")).to_have_text("2")
    dep.refresh_from_db()
    assert (dep.state, dep.reserved_gpus, dep.serving_revision.number, dep.proposed_number) == ("ready", 2, 1, None)
    assert dep.max_model_len == 8192


def test_an_admin_approves_the_change_from_the_approvals_page(portal):
    from deployments import services

    world = portal.world
    dep = running(world)
    services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data={"max_replicas": 3})
    admin = portal.page("platform_admin")
    admin.goto("/approvals/")
    proposal = admin.locator(f"article[data-deployment='{dep.pk}'][data-revision='2']")
    expect()(proposal.locator("tr[data-field='max_replicas']")).to_contain_text(re.compile(r"2\s*→\s*3"))
    expect()(proposal.locator("[data-gpu-delta]")).to_have_text("2 → 3 (+1)")
    proposal.get_by_role("button", name="Approve revision 2").click()
    expect()(admin.locator(".messages")).to_contain_text("Approved revision 2")
    expect()(admin.locator("#no-proposals")).to_be_visible()
    dep.refresh_from_db()
    assert (dep.serving_revision.number, dep.max_replicas, dep.reserved_gpus) == (2, 3, 3)
