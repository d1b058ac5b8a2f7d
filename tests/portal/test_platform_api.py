"""Platform administration over the API: from an empty database to a member's deployment that
the tenant's policy approves, with API tokens only; tenants, policy, members and archiving, each
audited; who may do what."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from core.models import AuditEvent
from deployments.models import ModelDeployment
from portal.api import token_create
from quotas.models import GpuFlavor, Membership, Tenant, TenantQuota
from tests.support.world import check_matrix

T = "/api/v1/tenants"


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user=user, name='ops')[1]}")
    return client


L4 = {
    "name": "l4",
    "gpu_model": "NVIDIA L4",
    "accelerator_type": "L4",
    "gpu_memory_gib": 24,
    "gpus_per_node": 4,
    "node_labels": {"node.kubernetes.io/instance-type": "g6.12xlarge"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "price_per_gpu_hour": "0.80",
    "reason": "first GPU pool",
}


def small_model(name: str, replicas: int = 1, flavor: str = "l4", tenant: str = "vision") -> dict:
    return {
        "tenant": tenant,
        "name": name,
        "model_source": "Qwen/Qwen2.5-1.5B-Instruct",
        "served_model_name": name,
        "flavor": flavor,
        "tensor_parallel_size": 1,
        "min_replicas": 1,
        "max_replicas": replicas,
        "max_model_len": 4096,
        "parameter_count_b": 1.5,
        "dtype": "bfloat16",
        "backend": "kuberay",
    }


@pytest.mark.django_db
class TestFromAnEmptyDatabase:
    def test_flavor_tenant_quota_policy_member_then_an_auto_approved_deployment(self):
        """README "Install on a cluster", step 6, over the API."""
        assert not Tenant.objects.exists() and not GpuFlavor.objects.exists()
        root = User.objects.create_superuser("root", "root@example.org", "x-unused-x")  # createsuperuser
        dana = User.objects.create_user("dana", "dana@example.org")  # has signed in once (OIDC)
        admin = token_client(root)

        assert admin.post("/api/v1/flavors/", L4, format="json").status_code == 201
        created = admin.post(f"{T}/", {"slug": "vision", "display_name": "Vision team", "reason": "new team"})
        assert created.status_code == 201, created.json()
        assert created.json()["namespace"] == "vision"
        quota = admin.post("/api/v1/quotas/", {"tenant": "vision", "flavor": "l4", "nominal_gpus": 4}, format="json")
        assert quota.status_code == 201 and quota.json()["nominal_gpus"] == 4
        policy = admin.put(
            f"{T}/vision/policy/",
            {"auto_approve_max_gpus": 2, "max_gpus_per_deployment": 4, "allowed_flavors": ["l4"], "reason": "pilot"},
            format="json",
        )
        assert policy.json() == {
            "auto_approve_max_gpus": 2,
            "max_gpus_per_deployment": 4,
            "allowed_flavors": ["l4"],
            # Settings the PUT left out keep their values (here the defaults).
            "allowed_models": [],
            "allowed_source_patterns": [],
            "allowed_tiers": [],
            "auto_approve_tiers": [],
            "monthly_budget": None,
            "budget_hard_stop": False,
            "idle_warn_hours": 0,
            "idle_stop_hours": 0,
            "serving_schedule": "",
            "wake_timeout_seconds": 120,
            "tokens_per_minute": 0,
            "requests_per_minute": 0,
        }
        added = admin.post(f"{T}/vision/members/", {"user": "dana@EXAMPLE.org", "role": "member"})
        assert added.status_code == 201 and added.json()["username"] == "dana"

        member = token_client(dana)
        response = member.post("/api/v1/deployments/", small_model("qwen"), format="json")
        assert response.status_code == 201, response.json()
        dep = ModelDeployment.objects.get(pk=response.json()["id"])
        assert dep.state == "approved" and dep.reserved_gpus == 1
        assert (response.json()["serving_revision"], response.json()["proposed_revision"]) == (1, None)
        approval = AuditEvent.objects.get(action="deployment.approve", object_id=str(dep.pk))
        assert approval.actor_name == "policy"
        history = member.get(f"/api/v1/deployments/{dep.pk}/revisions/").json()["results"]
        assert [(r["number"], r["decided_by"], r["serving"]) for r in history] == [(1, "policy", True)]
        # Above the auto-approve ceiling but within the policy: waits for a platform admin.
        bigger = member.post("/api/v1/deployments/", small_model("qwen-3", replicas=3), format="json")
        assert bigger.status_code == 201 and bigger.json()["state"] == "pending_approval"
        actions = set(AuditEvent.objects.values_list("action", flat=True))
        assert {"flavor.create", "tenant.create", "quota.set", "tenant.policy", "membership.add"} <= actions


class TestPolicyAtRequestValidation:
    @pytest.fixture
    def policy(self, world):
        world.alpha.max_gpus_per_deployment = 4
        world.alpha.save()
        world.alpha.allowed_flavors.set([world.h100])

    def test_a_flavor_outside_the_policy_is_refused_with_the_field(self, world, policy):
        body = small_model("on-a100", flavor="a100-pcie", tenant="alpha")
        response = world.client("member").post("/api/v1/deployments/", body, format="json")
        assert response.status_code == 400
        assert response.json()["flavor"] == ["Team Alpha may use only these GPU flavors: h100-sxm5."]
        assert not ModelDeployment.objects.exists()

    def test_more_gpus_than_the_policy_allows_per_deployment_is_refused(self, world, policy):
        body = small_model("wide", replicas=5, flavor="h100-sxm5", tenant="alpha")
        response = world.client("member").post("/api/v1/deployments/", body, format="json")
        assert response.status_code == 400
        assert "at most 4 per deployment" in response.json()["max_replicas"][0]
        fits = world.client("member").post(
            "/api/v1/deployments/", {**body, "name": "fits", "max_replicas": 4}, format="json"
        )
        assert fits.status_code == 201

    def test_the_preview_reports_the_policy_too(self, world, policy):
        body = small_model("wide", replicas=5, flavor="h100-sxm5", tenant="alpha")
        preview = world.client("member").post("/api/v1/deployments/preview/", body, format="json").json()
        assert preview["valid"] is False and "max_replicas" in preview["errors"]

    def test_scaling_past_the_policy_is_refused(self, world, policy):
        body = small_model("grow", replicas=2, flavor="h100-sxm5", tenant="alpha")
        dep = world.client("member").post("/api/v1/deployments/", body, format="json").json()
        response = world.client("member").post(
            f"/api/v1/deployments/{dep['id']}/scale/", {"min_replicas": 1, "max_replicas": 6}
        )
        assert response.status_code == 400 and "at most 4 per deployment" in str(response.json())

    def test_the_auto_approve_ceiling_cannot_exceed_the_per_deployment_maximum(self, world):
        response = world.client("platform_admin").put(
            f"{T}/alpha/policy/",
            {"auto_approve_max_gpus": 8, "max_gpus_per_deployment": 4, "allowed_flavors": []},
            format="json",
        )
        assert response.status_code == 400 and "auto_approve_max_gpus" in response.json()


class TestWakeTimeout:
    """The activator's default wait (issue 35): 0 to 900 seconds, stored and read back."""

    BASE = {"auto_approve_max_gpus": 0, "max_gpus_per_deployment": 0, "allowed_flavors": []}

    def test_it_round_trips(self, world):
        admin = world.client("platform_admin")
        assert admin.get(f"{T}/alpha/policy/").json()["wake_timeout_seconds"] == 120
        for value in (300, 0, 900):
            response = admin.put(f"{T}/alpha/policy/", {**self.BASE, "wake_timeout_seconds": value}, format="json")
            assert response.status_code == 200 and response.json()["wake_timeout_seconds"] == value
            assert admin.get(f"{T}/alpha/policy/").json()["wake_timeout_seconds"] == value
            assert Tenant.objects.get(slug="alpha").wake_timeout_seconds == value
        left_out = admin.put(f"{T}/alpha/policy/", self.BASE, format="json")  # a PUT without it keeps it
        assert left_out.json()["wake_timeout_seconds"] == 900

    @pytest.mark.parametrize("value", [901, -1, "x"])
    def test_out_of_range_or_not_a_number_is_400_naming_the_field(self, world, value):
        admin = world.client("platform_admin")
        response = admin.put(f"{T}/alpha/policy/", {**self.BASE, "wake_timeout_seconds": value}, format="json")
        assert response.status_code == 400 and list(response.json()) == ["wake_timeout_seconds"]
        assert Tenant.objects.get(slug="alpha").wake_timeout_seconds == 120


class TestTenants:
    def test_the_slug_is_fixed_from_creation_even_before_the_namespace_exists(self, world):
        admin = world.client("platform_admin")
        assert Tenant.objects.get(slug="alpha").namespace_created is None  # never synced: nothing on a cluster
        refused = admin.patch(f"{T}/alpha/", {"slug": "alpha-2", "reason": "typo"})
        assert refused.status_code == 400 and "The slug 'alpha' is fixed" in refused.json()["slug"][0]
        assert list(Tenant.objects.values_list("slug", flat=True)) == ["alpha", "beta"]
        same = admin.patch(f"{T}/alpha/", {"slug": "alpha", "display_name": "Alpha"})  # the current slug: no change
        assert same.status_code == 200 and same.json()["display_name"] == "Alpha"
        entry = AuditEvent.objects.filter(action="tenant.update").first()
        assert entry.changes == {"from": {"display_name": "Team Alpha"}, "to": {"display_name": "Alpha"}}

    @pytest.mark.parametrize(
        "body, field",
        [
            ({"slug": "Bad_Slug", "display_name": "x"}, "slug"),
            ({"slug": "a" * 41, "display_name": "x"}, "slug"),
            ({"slug": "ok", "display_name": ""}, "display_name"),
            ({"slug": "ok", "display_name": "x", "cohort": "no spaces"}, "cohort"),
            ({"slug": "alpha", "display_name": "again"}, "slug"),
            ({"slug": "kuadrant-system", "display_name": "x"}, "slug"),  # API_KEY_NAMESPACE: every key's Secret
            ({"slug": "kube-tenant", "display_name": "x"}, "slug"),
            ({"slug": "default", "display_name": "x"}, "slug"),
        ],
    )
    def test_bad_or_taken_names_are_400_or_409_and_nothing_is_written(self, world, body, field):
        response = world.client("platform_admin").post(f"{T}/", body, format="json")
        assert response.status_code in (400, 409) and field in response.json()
        assert Tenant.objects.count() == 2

    def test_archiving_needs_the_slug_typed_then_stops_everything_and_zeroes_the_quota(self, world):
        from deployments import services
        from tests.support.factories import draft

        member = world.users["member"]
        running = services.deployment_create(tenant=world.alpha, user=member, data=draft(world, name="run"))
        services.deployment_approve(
            deployment_id=running.pk, revision=running.proposed_number, approver=world.users["platform_admin"]
        )
        services.deployment_create(tenant=world.alpha, user=member, data=draft(world, name="wait"))
        earlier = services.deployment_create(tenant=world.alpha, user=member, data=draft(world, name="earlier"))
        services.deployment_approve(
            deployment_id=earlier.pk, revision=earlier.proposed_number, approver=world.users["platform_admin"]
        )
        services.deployment_stop(deployment_id=earlier.pk, user=member)  # a person's stop releases at once
        assert ModelDeployment.objects.get(pk=earlier.pk).reserved_gpus == 0
        # A change waiting beside what runs: archiving still stops it (the state is running).
        services.deployment_update(deployment_id=running.pk, user=member, data={"max_model_len": 4096})
        assert ModelDeployment.objects.get(pk=running.pk).proposed_number == 2
        admin = world.client("platform_admin")
        wrong = admin.post(f"{T}/alpha/archive/", {"confirm": "beta", "reason": "team dissolved"})
        assert wrong.status_code == 400 and "confirm" in wrong.json()
        assert ModelDeployment.objects.get(pk=running.pk).state == "approved"
        done = admin.post(f"{T}/alpha/archive/", {"confirm": "alpha", "reason": "team dissolved"})
        assert done.status_code == 200 and done.json()["archived"] is True
        states = dict(ModelDeployment.objects.values_list("name", "state"))
        assert states == {"run": "stopped", "wait": "cancelled", "earlier": "stopped"}
        assert list(TenantQuota.objects.filter(tenant=world.alpha).values_list("nominal_gpus", "reserved_gpus")) == [
            (0, 0),
            (0, 0),
        ]
        assert AuditEvent.objects.get(action="tenant.archive").reason == "team dissolved"
        again = world.client("member").post(
            "/api/v1/deployments/", small_model("late", flavor="h100-sxm5", tenant="alpha"), format="json"
        )
        assert again.status_code == 400 and "archived" in again.json()["tenant"][0]

    def test_who_may_create_edit_and_archive(self, world):
        admin_only = {
            "anonymous": 401,
            "viewer": 403,
            "member": 403,
            "tenant_admin": 403,
            "platform_admin": 201,
            "other_member": 403,
        }
        names = iter(range(100))
        check_matrix(world, lambda c: c.post(f"{T}/", {"slug": f"t{next(names)}", "display_name": "T"}), admin_only)
        check_matrix(
            world,
            lambda c: c.patch(f"{T}/beta/", {"display_name": "Beta"}),
            {**admin_only, "viewer": 404, "member": 404, "tenant_admin": 404, "platform_admin": 200},
        )


class TestMembers:
    def test_tenant_admins_manage_their_own_members_but_not_a_platform_admins(self, world):
        admin = world.client("tenant_admin")
        User.objects.create_user("erin", "erin@example.org")
        assert admin.post(f"{T}/alpha/members/", {"user": "erin@example.org", "role": "viewer"}).status_code == 201
        assert admin.patch(f"{T}/alpha/members/erin/", {"role": "member"}).json()["role"] == "member"
        assert admin.delete(f"{T}/alpha/members/erin/").status_code == 204
        assert not Membership.objects.filter(user__username="erin").exists()
        # A platform admin's membership is out of their reach, whether adding or changing it.
        refused = admin.post(f"{T}/alpha/members/", {"user": "platform-admin", "role": "viewer"})
        assert refused.status_code == 403
        Membership.objects.create(user=world.users["platform_admin"], tenant=world.alpha, role="member")
        assert admin.patch(f"{T}/alpha/members/platform-admin/", {"role": "viewer"}).status_code == 403
        assert admin.delete(f"{T}/alpha/members/platform-admin/").status_code == 403
        # Another tenant is not theirs to see.
        assert admin.post(f"{T}/beta/members/", {"user": "erin", "role": "viewer"}).status_code == 404
        entries = list(AuditEvent.objects.filter(action__startswith="membership.").values_list("action", "changes__to"))
        assert ("membership.add", "viewer") in entries and ("membership.remove", None) in entries

    def test_unknown_people_and_duplicates_are_field_errors(self, world):
        admin = world.client("platform_admin")
        unknown = admin.post(f"{T}/alpha/members/", {"user": "nobody@example.org"})
        assert unknown.status_code == 400 and unknown.json()["code"] == "no_account"
        assert "invite them first" in unknown.json()["user"][0]
        asked = world.client("tenant_admin").post(f"{T}/alpha/members/", {"user": "nobody@example.org"})
        assert asked.status_code == 400 and "a platform admin invites them" in asked.json()["user"][0]
        duplicate = admin.post(f"{T}/alpha/members/", {"user": "alpha-member", "role": "viewer"})
        assert duplicate.status_code == 409
        assert admin.patch(f"{T}/alpha/members/nobody/", {"role": "viewer"}).status_code == 404
        assert admin.patch(f"{T}/alpha/members/alpha-member/", {"role": "owner"}).status_code == 400

    def test_members_and_viewers_cannot_manage_members(self, world):
        for role in ("viewer", "member"):
            client = world.client(role)
            assert client.post(f"{T}/alpha/members/", {"user": "beta-member"}).status_code == 403
            assert client.delete(f"{T}/alpha/members/alpha-viewer/").status_code == 403
        assert Membership.objects.count() == 4


class TestQuotaCreate:
    def test_platform_admins_create_a_quota_for_any_flavor_and_it_is_audited(self, world):
        admin = world.client("platform_admin")
        body = {"tenant": "beta", "flavor": "a100-pcie", "nominal_gpus": 2, "reason": "pilot"}
        assert admin.post("/api/v1/quotas/", body, format="json").status_code == 201
        quota = TenantQuota.objects.get(tenant=world.beta, flavor=world.a100)
        assert quota.nominal_gpus == 2
        entry = AuditEvent.objects.get(action="quota.set", object_id=str(quota.pk))
        assert entry.reason == "pilot" and entry.changes["to"]["nominal_gpus"] == 2
        assert world.client("tenant_admin").post("/api/v1/quotas/", {**body, "tenant": "alpha"}).status_code == 403


class TestFlavorsAreAudited:
    def test_create_edit_retire_write_before_and_after(self, world):
        admin = world.client("platform_admin")
        assert admin.post("/api/v1/flavors/", L4, format="json").status_code == 201
        patch = admin.patch("/api/v1/flavors/l4/", {"price_per_gpu_hour": "0.95", "reason": "new contract"})
        assert patch.status_code == 200
        entry = AuditEvent.objects.get(action="flavor.update")
        assert entry.changes == {"from": {"price_per_gpu_hour": "0.80"}, "to": {"price_per_gpu_hour": "0.95"}}
        assert entry.reason == "new contract"
        assert admin.delete("/api/v1/flavors/l4/").status_code == 204
        assert GpuFlavor.objects.get(name="l4").active is False
        assert AuditEvent.objects.filter(action="flavor.update").count() == 2

    def test_a_toleration_kueue_would_refuse_is_a_field_error(self, world):
        bad = {**L4, "tolerations": [{"key": "", "operator": "Equal", "effect": "NoSchedule"}]}
        response = world.client("platform_admin").post("/api/v1/flavors/", bad, format="json")
        assert response.status_code == 400 and "tolerations" in response.json()
        assert not GpuFlavor.objects.filter(name="l4").exists()
