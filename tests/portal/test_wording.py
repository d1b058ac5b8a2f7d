"""Issue 32, "Confirmation and wording" on the platform pages: a tenant's request policy in words
(no "auto-approve ≤ 0 GPUs · max any"), the same sentence in the tenants API, and the tenant page's
audit trail in words (no "nominal_gpus: 8 →", no "quota_change.request")."""

from __future__ import annotations

import re
from html import unescape

import pytest

from quotas import services as quota_services


def policy_cell(world, slug: str) -> str:
    page = world.browser("platform_admin").get("/platform/").content.decode()
    row = re.search(rf'<tr data-tenant="{slug}">.*?</tr>', page, re.S).group(0)
    return unescape(re.search(r"<td class=\"small\" data-policy>(.*?)</td>", row, re.S).group(1))


class TestPolicyWords:
    @pytest.mark.parametrize(
        "ceiling, limit, expected",
        [
            (0, 0, "No auto-approval · no per-deployment limit · every flavor"),
            (1, 1, "Auto-approves up to 1 GPU within nominal quota · at most 1 GPU per deployment · every flavor"),
            (2, 8, "Auto-approves up to 2 GPUs within nominal quota · at most 8 GPUs per deployment · every flavor"),
        ],
    )
    def test_the_settings_in_words(self, world, ceiling, limit, expected):
        from quotas.policy import policy_words

        world.alpha.auto_approve_max_gpus, world.alpha.max_gpus_per_deployment = ceiling, limit
        assert policy_words(world.alpha) == expected

    def test_allowed_flavors_are_named(self, world):
        from quotas.policy import policy_words

        world.alpha.allowed_flavors.set([world.h100, world.a100])
        assert policy_words(world.alpha).endswith(" · only a100-pcie, h100-sxm5")

    def test_the_platform_page_and_the_api_say_the_same(self, world):
        world.beta.auto_approve_max_gpus, world.beta.max_gpus_per_deployment = 4, 0
        world.beta.save()
        assert policy_cell(world, "alpha") == "No auto-approval · no per-deployment limit · every flavor"
        beta = "Auto-approves up to 4 GPUs within nominal quota · no per-deployment limit · every flavor"
        assert policy_cell(world, "beta") == beta
        api = world.client("platform_admin").get("/api/v1/tenants/beta/").json()
        assert api["policy_words"] == beta


class TestAuditTrailWords:
    def test_the_tenant_page_names_actions_and_fields_in_words(self, world):
        quota_services.quota_change_request_create(
            tenant=world.alpha,
            user=world.users["tenant_admin"],
            flavor=world.h100,
            nominal_gpus=12,
            borrowing_limit_gpus=4,
            lending_limit_gpus=None,
            justification="More traffic.",
        )
        page = world.browser("platform_admin").get("/platform/tenants/alpha/").content.decode()
        trail = re.search(r'id="audit-h".*?</section>', page, re.S).group(0)
        assert '<strong data-action="quota_change.request">Quota change requested</strong>' in trail
        assert "Nominal GPUs:" in trail and "nominal_gpus" not in re.sub(r'data-action="[^"]*"', "", trail)
