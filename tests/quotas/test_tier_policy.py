"""A tenant policy's priority tiers (issue 35): which tiers its deployments may use and which the
policy auto-approves, as tier names in the policy API and ticked boxes in the policy form, the
auto-approved ones among the allowed ones, and both said in the policy's words."""

from __future__ import annotations

import re

import pytest

from core.models import AuditEvent
from quotas.models import PriorityTier, Tenant
from quotas.policy import policy_summary, policy_words


@pytest.fixture
def standard(world) -> PriorityTier:
    return PriorityTier.objects.create(name="standard", display_name="Standard", value=100)


@pytest.fixture
def production(world) -> PriorityTier:
    return PriorityTier.objects.create(name="production", display_name="Production", value=1000)


POLICY = "/api/v1/tenants/alpha/policy/"


class TestTenantPolicy:
    def test_the_api_sets_the_tiers_and_the_policy_says_them(self, world, standard, production):
        body = {
            "auto_approve_max_gpus": 2,
            "max_gpus_per_deployment": 0,
            "allowed_flavors": [],
            "allowed_tiers": ["standard", "production"],
            "auto_approve_tiers": ["standard"],
            "reason": "tiers",
        }
        response = world.client("platform_admin").put(POLICY, body, format="json")
        assert response.status_code == 200, response.content
        assert (response.json()["allowed_tiers"], response.json()["auto_approve_tiers"]) == (
            ["production", "standard"],
            ["standard"],
        )
        read = world.client("viewer").get(POLICY).json()
        assert (read["allowed_tiers"], read["auto_approve_tiers"]) == (["production", "standard"], ["standard"])
        words = world.client("member").get("/api/v1/tenants/alpha/").json()["policy_words"]
        assert words.endswith(" · every flavor · tiers: production, standard (auto-approves standard)")
        change = AuditEvent.objects.get(action="tenant.policy")
        assert change.changes["to"]["allowed_tiers"] == ["production", "standard"]
        assert change.changes["to"]["auto_approve_tiers"] == ["standard"]

    def test_a_tier_set_left_out_keeps_its_value(self, world, standard):
        world.alpha.allowed_tiers.set([standard])
        world.alpha.auto_approve_tiers.set([standard])
        body = {"auto_approve_max_gpus": 1, "max_gpus_per_deployment": 0, "allowed_flavors": []}
        assert world.client("platform_admin").put(POLICY, body, format="json").status_code == 200
        summary = policy_summary(Tenant.objects.get(slug="alpha"))
        assert (summary["allowed_tiers"], summary["auto_approve_tiers"]) == (["standard"], ["standard"])

    @pytest.mark.parametrize(
        ("tiers_body", "field"),
        [
            ({"allowed_tiers": ["standard"], "auto_approve_tiers": ["production"]}, "auto_approve_tiers"),
            ({"auto_approve_tiers": ["production"]}, "auto_approve_tiers"),  # against the stored allowed set
            ({"allowed_tiers": ["no-such-tier"]}, "allowed_tiers"),
            ({"allowed_tiers": ["standard"], "auto_approve_tiers": ["nope"]}, "auto_approve_tiers"),
            ({"allowed_tiers": ["nul\x00"]}, "allowed_tiers"),
            ({"allowed_tiers": ["Bad_Name"]}, "allowed_tiers"),
            ({"allowed_tiers": ["x" * 10_000]}, "allowed_tiers"),
            ({"allowed_tiers": "standard"}, "allowed_tiers"),
            ({"allowed_tiers": ["standard"] * 101}, "allowed_tiers"),
        ],
    )
    def test_bad_tier_sets_are_a_400_on_their_field_and_change_nothing(
        self, world, standard, production, tiers_body, field
    ):
        world.alpha.allowed_tiers.set([standard])
        before = policy_summary(world.alpha)
        body = {"auto_approve_max_gpus": 3, "max_gpus_per_deployment": 0, "allowed_flavors": [], **tiers_body}
        response = world.client("platform_admin").put(POLICY, body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()[field], response.json()
        assert policy_summary(Tenant.objects.get(slug="alpha")) == before
        assert not AuditEvent.objects.filter(action="tenant.policy").exists()

    def test_the_policy_form_sets_the_tiers_and_refuses_an_auto_approved_one_not_allowed(
        self, world, standard, production
    ):
        admin = world.browser("platform_admin")
        page = admin.get("/platform/tenants/alpha/").content.decode()
        assert "Allowed priority tiers" in page and "Auto-approved priority tiers" in page
        form = {
            "form": "policy",
            "policy-auto_approve_max_gpus": 2,
            "policy-max_gpus_per_deployment": 4,
            "policy-allowed_tiers": [standard.pk],
            "policy-auto_approve_tiers": [production.pk],
        }
        refused = admin.post("/platform/tenants/alpha/", form)
        assert refused.status_code == 200
        assert re.search(r'id="id_policy-auto_approve_tiers_error">Only allowed tiers', refused.content.decode())
        assert not Tenant.objects.get(slug="alpha").allowed_tiers.exists()
        saved = admin.post("/platform/tenants/alpha/", {**form, "policy-auto_approve_tiers": [standard.pk]})
        assert saved.status_code == 302
        alpha = Tenant.objects.get(slug="alpha")
        assert (policy_summary(alpha)["allowed_tiers"], policy_summary(alpha)["auto_approve_tiers"]) == (
            ["standard"],
            ["standard"],
        )
        # No box ticked is an empty set, not "keep".
        cleared = {k: v for k, v in form.items() if not k.endswith("_tiers")}
        assert admin.post("/platform/tenants/alpha/", cleared).status_code == 302
        assert not Tenant.objects.get(slug="alpha").allowed_tiers.exists()

    def test_the_words_name_auto_approved_tiers_only_when_auto_approval_is_on(self, world, standard):
        world.alpha.allowed_tiers.set([standard])
        world.alpha.auto_approve_tiers.set([standard])
        assert (
            policy_words(world.alpha) == "No auto-approval · no per-deployment limit · every flavor · tiers: standard"
        )
        world.alpha.auto_approve_max_gpus = 1
        assert policy_words(world.alpha).endswith(" · tiers: standard (auto-approves standard)")
        world.alpha.allowed_tiers.clear()
        assert "tiers" not in policy_words(world.alpha)
