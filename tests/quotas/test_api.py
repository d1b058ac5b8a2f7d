"""Quota API: flavors, quotas, quota-change requests with approve/reject, preview, cluster usage."""

import pytest

from core.models import AuditEvent
from quotas.models import GpuFlavor, QuotaChangeRequest, TenantQuota
from tests.support.world import check_matrix

READ_ALL = {
    "anonymous": 401,
    "viewer": 200,
    "member": 200,
    "tenant_admin": 200,
    "platform_admin": 200,
    "other_member": 200,
}


def request_body(**kw):
    return {
        "tenant": "alpha",
        "flavor": "h100-sxm5",
        "nominal_gpus": 16,
        "borrowing_limit_gpus": 2,
        "justification": "70B launch",
        **kw,
    }


class TestFlavors:
    def test_everyone_signed_in_reads_and_only_platform_admins_write(self, world):
        check_matrix(world, lambda c: c.get("/api/v1/flavors/"), READ_ALL)
        counter = iter(range(100))
        check_matrix(
            world,
            lambda c: c.post(
                "/api/v1/flavors/",
                {
                    "name": f"l40s-{next(counter)}",
                    "gpu_model": "L40S",
                    "accelerator_type": "L40S",
                    "gpu_memory_gib": 48,
                    "gpus_per_node": 8,
                },
                format="json",
            ),
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 403,
                "tenant_admin": 403,
                "platform_admin": 201,
                "other_member": 403,
            },
        )

    @pytest.mark.parametrize(
        "field, value",
        [
            ("name", "Bad_Name"),
            ("gpus_per_node", 0),
            ("node_labels", {"k": "bad value\n"}),
            ("tolerations", [{"key": "x", "effect": "Sometimes"}]),
        ],
    )
    def test_bad_flavors_are_400(self, world, field, value):
        body = {
            "name": "l40s",
            "gpu_model": "L40S",
            "accelerator_type": "L40S",
            "gpu_memory_gib": 48,
            "gpus_per_node": 8,
            field: value,
        }
        response = world.client("platform_admin").post("/api/v1/flavors/", body, format="json")
        assert response.status_code == 400 and field in response.json()
        assert not GpuFlavor.objects.filter(gpu_model="L40S").exists()

    # Tolerations the Kueue ResourceFlavor CRD refuses (its CEL rules), refused here first.
    @pytest.mark.parametrize(
        "toleration, message",
        [
            ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": ""}, "effect '' is not one of"),
            ({"key": "nvidia.com/gpu", "effect": "Sometimes"}, "effect 'Sometimes' is not one of"),
            ({"key": "", "operator": "Equal", "value": "x"}, "an empty key matches every taint"),
            ({"value": "x"}, "an empty key matches every taint"),
            ({"key": "gpus", "operator": "Gt", "value": "4"}, "operator 'Gt' is not one of Equal, Exists"),
            ({"key": "nvidia.com/gpu", "operator": "Exists", "value": "yes"}, "leave value empty"),
            ({"key": "k", "tolerationSeconds": 30}, "unknown field(s) 'tolerationSeconds'"),
        ],
    )
    def test_tolerations_the_cluster_would_refuse_are_400_and_nothing_is_written(self, world, toleration, message):
        admin = world.client("platform_admin")
        body = {"name": "l40s", "gpu_model": "L40S", "accelerator_type": "L40S", "gpu_memory_gib": 48}
        response = admin.post(
            "/api/v1/flavors/", {**body, "gpus_per_node": 8, "tolerations": [toleration]}, format="json"
        )
        assert response.status_code == 400
        assert list(response.json()) == ["tolerations"]
        assert any(m.startswith("Toleration 1: ") and message in m for m in response.json()["tolerations"])
        assert not GpuFlavor.objects.filter(name="l40s").exists()
        before = list(GpuFlavor.objects.filter(name="h100-sxm5").values())
        response = admin.patch("/api/v1/flavors/h100-sxm5/", {"tolerations": [toleration]}, format="json")
        assert response.status_code == 400 and "tolerations" in response.json()
        assert list(GpuFlavor.objects.filter(name="h100-sxm5").values()) == before

    def test_each_bad_toleration_gets_its_own_message_and_good_ones_are_saved(self, world):
        admin = world.client("platform_admin")
        bad = [{"key": "a", "operator": "Exists", "effect": ""}, {"operator": "Equal"}]
        response = admin.patch("/api/v1/flavors/h100-sxm5/", {"tolerations": bad}, format="json")
        assert response.status_code == 400
        assert [m.split(":")[0] for m in response.json()["tolerations"]] == ["Toleration 1", "Toleration 2"]
        good = [{"operator": "Exists"}, {"key": "dedicated", "value": "llm", "effect": "NoExecute"}]
        assert admin.patch("/api/v1/flavors/h100-sxm5/", {"tolerations": good}, format="json").status_code == 200
        assert GpuFlavor.objects.get(name="h100-sxm5").tolerations == good


class TestQuotas:
    def test_quotas_are_visible_per_tenant(self, world):
        assert world.client("viewer").get("/api/v1/quotas/").json()["count"] == 2
        assert world.client("other_member").get("/api/v1/quotas/").json()["count"] == 1
        assert world.client("platform_admin").get("/api/v1/quotas/").json()["count"] == 3

    def test_set_is_platform_admin_only(self, world):
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        check_matrix(
            world,
            lambda c: c.post(f"/api/v1/quotas/{quota.pk}/set/", {"nominal_gpus": 10}, format="json"),
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 403,
                "tenant_admin": 403,
                "platform_admin": 200,
                "other_member": 404,
            },
        )
        quota.refresh_from_db()
        assert quota.nominal_gpus == 10

    def test_a_value_left_out_keeps_its_current_value(self, world):
        """A new nominal alone leaves borrowing and lending as they are (it used to reset them)."""
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        TenantQuota.objects.filter(pk=quota.pk).update(borrowing_limit_gpus=8, lending_limit_gpus=3)
        admin = world.client("platform_admin")
        assert admin.post(f"/api/v1/quotas/{quota.pk}/set/", {"nominal_gpus": 10}, format="json").status_code == 200
        quota.refresh_from_db()
        assert (quota.nominal_gpus, quota.borrowing_limit_gpus, quota.lending_limit_gpus) == (10, 8, 3)
        body = {"tenant": "alpha", "flavor": "h100-sxm5", "borrowing_limit_gpus": 2}
        assert admin.post("/api/v1/quotas/", body, format="json").status_code == 201
        quota.refresh_from_db()
        assert (quota.nominal_gpus, quota.borrowing_limit_gpus, quota.lending_limit_gpus) == (10, 2, 3)
        # null is a value: lending all unused quota.
        admin.post(f"/api/v1/quotas/{quota.pk}/set/", {"lending_limit_gpus": None}, format="json")
        quota.refresh_from_db()
        assert (quota.nominal_gpus, quota.borrowing_limit_gpus, quota.lending_limit_gpus) == (10, 2, None)
        change = AuditEvent.objects.filter(action="quota.set").latest("pk").changes
        assert change["from"]["lending_limit_gpus"] == 3 and change["to"]["borrowing_limit_gpus"] == 2

    def test_a_new_quota_needs_its_nominal(self, world):
        body = {"tenant": "beta", "flavor": "a100-pcie", "borrowing_limit_gpus": 2}
        response = world.client("platform_admin").post("/api/v1/quotas/", body, format="json")
        assert response.status_code == 400
        assert response.json()["nominal_gpus"] == ["A new quota needs its nominal GPUs."]
        assert not TenantQuota.objects.filter(tenant=world.beta, flavor=world.a100).exists()

    def test_preview(self, world):
        url = "/api/v1/quota-preview/?tenant=alpha&flavor=h100-sxm5&gpus=10"
        check_matrix(world, lambda c: c.get(url), {**READ_ALL, "other_member": 404})
        assert world.client("member").get(url).json()["fit"] == "borrowing"
        assert world.client("member").get(url.replace("gpus=10", "gpus=-1")).status_code == 400

    def test_cluster_usage_is_for_platform_admins(self, world):
        check_matrix(
            world,
            lambda c: c.get("/api/v1/cluster/usage/"),
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 403,
                "tenant_admin": 403,
                "platform_admin": 200,
                "other_member": 403,
            },
        )


class TestQuotaChangeRequests:
    def test_a_limit_left_out_of_a_request_keeps_its_current_value(self, world):
        """A request for more nominal GPUs alone does not ask for borrowing 8 -> 0 (approving it
        used to apply the 0); null lending is still a value: all unused quota."""
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        TenantQuota.objects.filter(pk=quota.pk).update(borrowing_limit_gpus=8, lending_limit_gpus=3)
        body = {"tenant": "alpha", "flavor": "h100-sxm5", "nominal_gpus": 12, "justification": "more"}
        created = world.client("tenant_admin").post("/api/v1/quota-requests/", body, format="json")
        assert created.status_code == 201, created.content
        assert (created.json()["borrowing_limit_gpus"], created.json()["lending_limit_gpus"]) == (8, 3)
        approved = world.client("platform_admin").post(
            f"/api/v1/quota-requests/{created.json()['id']}/approve/", {"comment": "ok"}, format="json"
        )
        assert approved.status_code == 200, approved.content
        quota.refresh_from_db()
        assert (quota.nominal_gpus, quota.borrowing_limit_gpus, quota.lending_limit_gpus) == (12, 8, 3)
        body = {**body, "flavor": "a100-pcie", "nominal_gpus": 4, "lending_limit_gpus": None}
        created = world.client("tenant_admin").post("/api/v1/quota-requests/", body, format="json").json()
        assert created["lending_limit_gpus"] is None

    def test_only_tenant_admins_request(self, world):
        check_matrix(
            world,
            lambda c: c.post("/api/v1/quota-requests/", request_body(), format="json"),
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 403,
                "tenant_admin": 201,
                "platform_admin": (201, 409),
                "other_member": 400,
            },
        )

    def test_approve_and_reject_with_audit(self, world):
        created = world.client("tenant_admin").post("/api/v1/quota-requests/", request_body(), format="json").json()
        url = f"/api/v1/quota-requests/{created['id']}/"
        check_matrix(
            world,
            lambda c: c.post(url + "approve/", {"comment": "ok"}, format="json"),
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 403,
                "tenant_admin": 403,
                "platform_admin": 200,
                "other_member": 404,
            },
        )
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        assert (quota.nominal_gpus, quota.borrowing_limit_gpus) == (16, 2)
        assert (
            world.client("platform_admin").post(url + "reject/", {"comment": "late"}, format="json").status_code == 409
        )
        audit = world.client("tenant_admin").get("/api/v1/audit/?action=quota_change.approve").json()["results"]
        assert audit[0]["actor"] == "platform-admin" and audit[0]["changes"]["to"]["nominal_gpus"] == 16

    def test_reject_requires_a_comment_the_tenant_admin_reads(self, world):
        created = world.client("tenant_admin").post("/api/v1/quota-requests/", request_body(), format="json").json()
        url = f"/api/v1/quota-requests/{created['id']}/reject/"
        assert world.client("platform_admin").post(url, {}, format="json").status_code == 400
        world.client("platform_admin").post(url, {"comment": "Use A100s"}, format="json")
        mine = world.client("tenant_admin").get(f"/api/v1/quota-requests/{created['id']}/").json()
        assert mine["status"] == "rejected" and mine["decision_comment"] == "Use A100s"
        assert AuditEvent.objects.filter(action="quota_change.reject", reason="Use A100s").exists()

    @pytest.mark.parametrize(
        "body",
        [
            request_body(nominal_gpus=-1),
            request_body(nominal_gpus="many"),
            request_body(justification=""),
            request_body(flavor="nope"),
            request_body(lending_limit_gpus=99),
            request_body(nominal_gpus=10**9),
        ],
    )
    def test_bad_requests_are_400_and_nothing_is_written(self, world, body):
        response = world.client("tenant_admin").post("/api/v1/quota-requests/", body, format="json")
        assert response.status_code == 400
        assert not QuotaChangeRequest.objects.exists()
