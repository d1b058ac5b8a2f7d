"""A deployment's priority tier (issue 35): held to the tenant's policy (allowed tiers) in the API
and the form alike, carried by its revisions (a change of tier is a change that needs approval),
approved by the policy only for a tier the policy auto-approves, and rendered as its workload's
Kueue priority class."""

from __future__ import annotations

import pytest

from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.specs import deployment_spec
from quotas.models import PriorityTier
from tests.deployments.test_integrity import API, approve, audit_actions, request_one
from tests.support.factories import api_draft


@pytest.fixture
def tiers(world):
    production = PriorityTier.objects.create(name="production", display_name="Production", value=1000)
    experiment = PriorityTier.objects.create(name="experiment", display_name="Experiment", value=10)
    other = PriorityTier.objects.create(name="batch", display_name="Batch", value=1)
    world.alpha.allowed_tiers.set([production, experiment])
    world.alpha.auto_approve_tiers.set([experiment])
    return {"production": production, "experiment": experiment, "batch": other}


def test_a_tier_outside_the_policy_is_a_400_on_the_field(world, tiers):
    for name in ("batch", "no-such-tier"):
        response = world.client("member").post(f"{API}/", api_draft(world, priority_tier=name), format="json")
        assert response.status_code == 400
        assert response.json()["priority_tier"] == [
            "Team Alpha may use only these priority tiers: experiment, production (or none)."
        ]
    world.alpha.allowed_tiers.clear()
    response = world.client("member").post(f"{API}/", api_draft(world, priority_tier="production"), format="json")
    assert response.json()["priority_tier"] == [
        "Team Alpha may not choose a priority tier: leave it empty (Kueue's default priority)."
    ]
    assert not ModelDeployment.objects.exists()


def test_the_tier_reaches_the_revision_and_the_workloads_priority_class(world, tiers):
    body = request_one(world, priority_tier="production")
    dep = ModelDeployment.objects.get(pk=body["id"])
    assert body["priority_tier"] == "production" and dep.revisions.get().spec["priority_tier"] == "production"
    assert deployment_spec(dep).priority_class == "llm-portal-production"
    untiered = request_one(world, name="plain")
    assert deployment_spec(ModelDeployment.objects.get(pk=untiered["id"])).priority_class is None


def test_the_policy_approves_only_a_tier_it_auto_approves(world, tiers):
    world.alpha.auto_approve_max_gpus = 4
    world.alpha.save()
    assert request_one(world, name="exp", priority_tier="experiment")["state"] == State.APPROVED
    assert request_one(world, name="none")["state"] == State.APPROVED
    prod = request_one(world, name="prod", priority_tier="production")
    assert prod["state"] == State.PENDING_APPROVAL  # a person decides who may preempt whom
    assert ("deployment.approve", "policy") not in audit_actions(prod["id"])


def test_a_change_of_tier_is_a_proposed_revision_and_what_serves_keeps_its_tier(world, tiers):
    body = approve(world, request_one(world, priority_tier="experiment"))
    member = world.client("member")
    response = member.patch(f"{API}/{body['id']}/", {"priority_tier": "production"}, format="json")
    assert response.status_code == 200, response.content
    dep = ModelDeployment.objects.get(pk=body["id"])
    assert dep.priority_tier == "experiment"  # serving: unchanged until approved
    assert dep.proposed_revision.spec["priority_tier"] == "production"
    approve(world, response.json())
    dep.refresh_from_db()
    assert dep.priority_tier == "production" and deployment_spec(dep).priority_class == "llm-portal-production"


def test_the_form_offers_the_tenants_tiers_and_refuses_another(world, tiers):
    browser = world.browser("member")
    page = browser.get("/deployments/new/").content.decode()
    assert 'value="production"' in page and 'value="experiment"' in page and 'value="batch"' not in page
    assert "None (Kueue&#x27;s default priority)" in page
