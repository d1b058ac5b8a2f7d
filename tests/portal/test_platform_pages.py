"""Platform administration pages: every page × every role, the forms' happy paths and refusals
(field errors, nothing half-written), and tenant admins on their own members page."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from core.models import AuditEvent
from quotas.models import GpuFlavor, Membership, Tenant, TenantQuota
from tests.support.world import ROLES

LOGIN = 302
ADMIN_ONLY = {"anonymous": LOGIN, "viewer": 403, "member": 403, "tenant_admin": 403, "platform_admin": 200}


def pages() -> dict[str, dict[str, int]]:
    return {
        "/platform/": {**ADMIN_ONLY, "other_member": 403},
        "/platform/tenants/new/": {**ADMIN_ONLY, "other_member": 403},
        "/platform/tenants/alpha/": {**ADMIN_ONLY, "other_member": 403},
        "/platform/tenants/alpha/archive/": {**ADMIN_ONLY, "other_member": 403},
        "/platform/flavors/new/": {**ADMIN_ONLY, "other_member": 403},
        "/platform/flavors/h100-sxm5/": {**ADMIN_ONLY, "other_member": 403},
        # Tenant admins manage their own tenant's members; another tenant's page does not exist for them.
        "/tenants/alpha/members/": {**ADMIN_ONLY, "tenant_admin": 200, "other_member": 404},
    }


class TestPagePermissions:
    def test_every_page_for_every_role(self, world):
        failures = []
        for url, expected in pages().items():
            assert set(expected) == set(ROLES), url
            for role in ROLES:
                got = world.browser(role).get(url).status_code
                if got != expected[role]:
                    failures.append(f"{url} as {role}: {got} != {expected[role]}")
        assert not failures, "\n".join(failures)

    def test_posts_follow_the_same_rules(self, world):
        for role in ("viewer", "member", "tenant_admin", "other_member"):
            client = world.browser(role)
            assert client.post("/platform/tenants/new/", {"slug": "x", "display_name": "X"}).status_code == 403
            assert client.post("/platform/flavors/new/", {"name": "x"}).status_code == 403
        assert not Tenant.objects.filter(slug="x").exists()
        change = "/tenants/alpha/members/alpha-viewer/"
        assert world.browser("member").post(change, {"role": "tenant_admin"}).status_code == 403
        assert world.browser("other_member").post(change, {"role": "tenant_admin"}).status_code == 404
        assert Membership.objects.get(user__username="alpha-viewer").role == "viewer"

    def test_the_navigation_offers_the_platform_page_to_platform_admins_only(self, world):
        assert 'href="/platform/"' in world.browser("platform_admin").get("/").content.decode()
        assert 'href="/platform/"' not in world.browser("tenant_admin").get("/").content.decode()


class TestTenantPages:
    def test_create_then_quota_and_policy_are_saved_and_audited(self, world):
        admin = world.browser("platform_admin")
        created = admin.post(
            "/platform/tenants/new/", {"slug": "vision", "display_name": "Vision", "reason": "new team"}
        )
        assert created.status_code == 302 and created["Location"] == "/platform/tenants/vision/"
        quota = {
            "form": "quota",
            "quota-flavor": world.h100.pk,
            "quota-nominal_gpus": 4,
            "quota-borrowing_limit_gpus": 0,
        }
        assert admin.post("/platform/tenants/vision/", quota).status_code == 302
        policy = {
            "form": "policy",
            "policy-auto_approve_max_gpus": 2,
            "policy-max_gpus_per_deployment": 4,
            "policy-allowed_flavors": [world.h100.pk],
            "policy-reason": "pilot",
        }
        assert admin.post("/platform/tenants/vision/", policy).status_code == 302
        vision = Tenant.objects.get(slug="vision")
        assert (vision.auto_approve_max_gpus, vision.max_gpus_per_deployment) == (2, 4)
        assert list(vision.allowed_flavors.all()) == [world.h100]
        assert TenantQuota.objects.get(tenant=vision).nominal_gpus == 4
        page = admin.get("/platform/tenants/vision/").content.decode()
        assert 'data-action="tenant.policy"' in page and "pilot" in page

    def test_the_quota_form_opens_on_the_current_values(self, world):
        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(lending_limit_gpus=3)
        page = world.browser("platform_admin").get("/platform/tenants/alpha/?flavor=h100-sxm5")
        form = page.context["forms"]["quota"]
        assert form.initial == {
            "flavor": world.h100.pk,
            "nominal_gpus": 8,
            "borrowing_limit_gpus": 4,
            "lending_limit_gpus": 3,
        }
        html = page.content.decode()
        assert 'name="quota-borrowing_limit_gpus" value="4"' in html and 'id="current-quota"' in html

    def test_a_quota_value_the_form_leaves_out_keeps_its_current_value(self, world):
        admin = world.browser("platform_admin")
        posted = {"form": "quota", "quota-flavor": world.h100.pk, "quota-nominal_gpus": 10, "quota-reason": "more"}
        assert admin.post("/platform/tenants/alpha/", posted).status_code == 302
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        assert (quota.nominal_gpus, quota.borrowing_limit_gpus, quota.lending_limit_gpus) == (10, 4, None)
        # Sent empty is not left out: a borrowing limit is a number, the lending limit may be "all".
        posted.update({"quota-borrowing_limit_gpus": "", "quota-lending_limit_gpus": ""})
        response = admin.post("/platform/tenants/alpha/", posted)
        assert response.status_code == 200 and response.context["forms"]["quota"].errors == {
            "borrowing_limit_gpus": ["This field is required."]
        }

    def test_a_refused_policy_is_a_field_error_and_changes_nothing(self, world):
        admin = world.browser("platform_admin")
        policy = {"form": "policy", "policy-auto_approve_max_gpus": 8, "policy-max_gpus_per_deployment": 4}
        response = admin.post("/platform/tenants/alpha/", policy)
        assert response.status_code == 200
        assert "cannot exceed the maximum GPUs per deployment" in response.content.decode()
        world.alpha.refresh_from_db()
        assert (world.alpha.auto_approve_max_gpus, world.alpha.max_gpus_per_deployment) == (0, 0)

    def test_the_slug_field_of_an_existing_tenant_is_disabled(self, world):
        assert world.alpha.namespace_created is None  # fixed from creation, not from the first sync
        admin = world.browser("platform_admin")
        page = admin.get("/platform/tenants/alpha/").content.decode()
        assert 'name="tenant-slug"' in page and "Fixed: it names the tenant" in page
        # A forged value for the disabled field is ignored; the display name still changes.
        response = admin.post(
            "/platform/tenants/alpha/", {"form": "tenant", "tenant-slug": "hijack", "tenant-display_name": "Alpha"}
        )
        assert response.status_code == 302
        assert Tenant.objects.filter(slug="alpha", display_name="Alpha").exists()

    def test_archive_needs_the_slug_typed(self, world):
        admin = world.browser("platform_admin")
        wrong = admin.post("/platform/tenants/alpha/archive/", {"confirm": "alpah", "reason": "gone"})
        assert wrong.status_code == 200 and "to confirm" in wrong.content.decode()
        assert not Tenant.objects.get(pk=world.alpha.pk).archived
        done = admin.post("/platform/tenants/alpha/archive/", {"confirm": "alpha", "reason": "gone"})
        assert done.status_code == 302 and Tenant.objects.get(pk=world.alpha.pk).archived


class TestFlavorPages:
    def test_labels_and_tolerations_are_typed_like_kubectl_and_round_trip(self, world):
        admin = world.browser("platform_admin")
        body = {
            "name": "l4",
            "gpu_model": "NVIDIA L4",
            "accelerator_type": "L4",
            "gpu_memory_gib": 24,
            "gpus_per_node": 4,
            "cpu_per_gpu": 8,
            "memory_gib_per_gpu": 32,
            "node_labels": "node.kubernetes.io/instance-type=g6.12xlarge\n",
            "tolerations": "nvidia.com/gpu:NoSchedule\ndedicated=ml:NoExecute",
            "price_per_gpu_hour": "0.80",
            "active": "on",
        }
        assert admin.post("/platform/flavors/new/", body).status_code == 302
        l4 = GpuFlavor.objects.get(name="l4")
        assert l4.node_labels == {"node.kubernetes.io/instance-type": "g6.12xlarge"}
        assert l4.tolerations == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
        ]
        page = admin.get("/platform/flavors/l4/").content.decode()
        assert "nvidia.com/gpu:NoSchedule\ndedicated=ml:NoExecute" in page
        assert AuditEvent.objects.filter(action="flavor.create", object_id=str(l4.pk)).exists()

    @pytest.mark.parametrize(
        "tolerations, message",
        [
            ("nvidia.com/gpu:NoSchedul", "effect &#x27;NoSchedul&#x27; is not one of"),
            ("=x:NoSchedule", "an empty key matches every taint"),
        ],
    )
    def test_a_toleration_kueue_would_refuse_is_a_form_error(self, world, tolerations, message):
        body = {
            "name": "l4",
            "gpu_model": "L4",
            "accelerator_type": "L4",
            "gpu_memory_gib": 24,
            "gpus_per_node": 4,
            "cpu_per_gpu": 8,
            "memory_gib_per_gpu": 32,
            "tolerations": tolerations,
        }
        response = world.browser("platform_admin").post("/platform/flavors/new/", body)
        assert response.status_code == 200 and message in response.content.decode()
        assert not GpuFlavor.objects.filter(name="l4").exists()


class TestMembersPage:
    def test_a_tenant_admin_adds_by_e_mail_changes_a_role_and_removes(self, world):
        User.objects.create_user("erin", "erin@example.org")
        admin = world.browser("tenant_admin")
        added = admin.post("/tenants/alpha/members/", {"member-user": "erin@example.org", "member-role": "viewer"})
        assert added.status_code == 302
        assert admin.post("/tenants/alpha/members/erin/", {"role": "member"}).status_code == 302
        assert Membership.objects.get(user__username="erin").role == "member"
        asked = admin.post("/tenants/alpha/members/erin/", {"remove": "1", "role": "member"})
        assert asked.status_code == 200 and "Remove erin from Team Alpha?" in asked.content.decode()
        assert Membership.objects.filter(user__username="erin").exists()  # asking changed nothing
        assert admin.post("/tenants/alpha/members/erin/", {"remove": "1", "confirm": "1"}).status_code == 302
        assert not Membership.objects.filter(user__username="erin").exists()

    def test_a_tenant_admin_cannot_touch_a_platform_admins_membership(self, world):
        Membership.objects.create(user=world.users["platform_admin"], tenant=world.alpha, role="member")
        admin = world.browser("tenant_admin")
        response = admin.post("/tenants/alpha/members/platform-admin/", {"role": "viewer"}, follow=True)
        assert "Only platform admins manage a platform admin" in response.content.decode()
        assert Membership.objects.get(user=world.users["platform_admin"]).role == "member"

    def test_an_unknown_person_is_a_field_error(self, world):
        response = world.browser("tenant_admin").post(
            "/tenants/alpha/members/", {"member-user": "nobody", "member-role": "viewer"}
        )
        assert response.status_code == 200 and "has an account" in response.content.decode()
        assert Membership.objects.count() == 4

    def test_a_person_without_an_account_leads_a_platform_admin_to_the_invitation(self, world):
        admin = world.browser("platform_admin")
        response = admin.post("/tenants/alpha/members/", {"member-user": "erin@example.org", "member-role": "viewer"})
        body = response.content.decode()
        assert response.status_code == 200 and "invite them first" in body
        assert 'href="/platform/invite/?email=erin%40example.org"' in body
        invite = admin.get("/platform/invite/?email=erin%40example.org").content.decode()
        assert 'value="erin@example.org"' in invite

    def test_a_tenant_admin_is_told_to_ask_a_platform_admin(self, world):
        response = world.browser("tenant_admin").post(
            "/tenants/alpha/members/", {"member-user": "erin", "member-role": "viewer"}
        )
        body = response.content.decode()
        assert "a platform admin invites them" in body and "/platform/invite/" not in body
        assert world.browser("tenant_admin").get("/platform/invite/").status_code == 403
