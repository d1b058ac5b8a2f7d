"""The flavor page and the flavor API: a platform admin sets a flavor's Karpenter pool and
topology levels, sees the pool (its GPU limit from the quotas, the NodePool as applied), and a
bad value is a field error (400 / form error), never a 500 or a half-saved flavor."""

from __future__ import annotations

import pytest

from quotas.models import GpuFlavor

FORM = {
    "name": "h100-sxm5",
    "gpu_model": "H100 SXM5",
    "accelerator_type": "H100",
    "gpu_memory_gib": 80,
    "gpus_per_node": 8,
    "cpu_per_gpu": 12,
    "memory_gib_per_gpu": 120,
    "node_labels": "node.kubernetes.io/instance-type=p5.48xlarge",
    "tolerations": "nvidia.com/gpu:NoSchedule",
    "active": "on",
}


@pytest.fixture
def aws(settings):
    settings.KARPENTER_PLATFORM = "aws"
    settings.KARPENTER_NODE_ROLE = "KarpenterNodeRole-test"
    settings.KARPENTER_SUBNET_TAGS = {"karpenter.sh/discovery": "test"}
    settings.KARPENTER_SECURITY_GROUP_TAGS = {"karpenter.sh/discovery": "test"}


class TestFlavorPage:
    def test_an_admin_provisions_the_flavor_and_the_page_shows_the_pool(self, world, aws):
        admin = world.browser("platform_admin")
        body = {
            **FORM,
            "provision": "on",
            "capacity_types": "spot,on-demand",
            "instance_types": "p5.48xlarge",
            "consolidate_after": "10m",
            "expire_after": "336h",
            "topology_levels": "cloud.example.com/block\nkubernetes.io/hostname\n",
        }
        assert admin.post("/platform/flavors/h100-sxm5/", body).status_code == 302
        flavor = GpuFlavor.objects.get(name="h100-sxm5")
        assert flavor.provisioning["capacity_types"] == ["spot", "on-demand"]
        assert flavor.provisioning["instance_types"] == ["p5.48xlarge"]
        assert flavor.topology_levels == ["cloud.example.com/block", "kubernetes.io/hostname"]
        page = admin.get("/platform/flavors/h100-sxm5/").content.decode()
        assert 'data-gpu-limit="16"' in page  # alpha 8 + beta 8 nominal
        assert "kind: NodePool" in page and "consolidateAfter: 10m" in page
        assert "cloud.example.com/block → kubernetes.io/hostname" in page

    def test_unticking_provision_clears_the_pool(self, world, aws):
        admin = world.browser("platform_admin")
        admin.post("/platform/flavors/h100-sxm5/", {**FORM, "provision": "on", "capacity_types": "on-demand"})
        assert GpuFlavor.objects.get(name="h100-sxm5").provisioning
        assert admin.post("/platform/flavors/h100-sxm5/", FORM).status_code == 302
        assert GpuFlavor.objects.get(name="h100-sxm5").provisioning == {}
        assert "Not provisioned by the portal" in admin.get("/platform/flavors/h100-sxm5/").content.decode()

    def test_a_bad_duration_is_a_form_error_and_nothing_is_saved(self, world):
        body = {**FORM, "provision": "on", "capacity_types": "on-demand", "consolidate_after": "soon"}
        response = world.browser("platform_admin").post("/platform/flavors/h100-sxm5/", body)
        assert response.status_code == 200 and "consolidate_after: a duration" in response.content.decode()
        assert GpuFlavor.objects.get(name="h100-sxm5").provisioning == {}

    def test_a_host_level_not_last_is_a_field_error(self, world):
        body = {**FORM, "topology_levels": "kubernetes.io/hostname\ncloud.example.com/block"}
        response = world.browser("platform_admin").post("/platform/flavors/h100-sxm5/", body)
        assert response.status_code == 200 and "must be kubernetes.io/hostname" in response.content.decode()


class TestFlavorApi:
    def test_the_api_mirrors_the_page(self, world, aws):
        admin = world.client("platform_admin")
        body = {"provisioning": {"capacity_types": ["spot"]}, "topology_levels": ["kubernetes.io/hostname"]}
        response = admin.patch("/api/v1/flavors/h100-sxm5/", body, format="json")
        assert response.status_code == 200, response.content
        pool = response.json()["node_pool"]
        assert pool["gpu_limit"] == 16 and pool["capacity_types"] == ["spot"]
        assert pool["manifest"]["kind"] == "NodePool"
        # Members read flavors, not the node role and subnet tags the manifest names.
        member_view = world.client("member").get("/api/v1/flavors/h100-sxm5/").json()["node_pool"]
        assert member_view["gpu_limit"] == 16 and "manifest" not in member_view

    @pytest.mark.parametrize(
        "body",
        [
            {"provisioning": {"capacity_types": ["spot"] * 10_000}},
            {"provisioning": {"instance_types": [{"a": {"b": {"c": [1, 2, 3]}}}]}},
            {"provisioning": {"consolidate_after": "5m\n  taints: [{key: x}]"}},
            {"provisioning": {"node_class": {"name": "x"}}},
            {"provisioning": {"x" * 5000: 1}},
            {"provisioning": "spot"},
            {"provisioning": None},
            {"topology_levels": {"block": "kubernetes.io/hostname"}},
            {"topology_levels": ["a\nb", "kubernetes.io/hostname"]},
            {"topology_levels": None},
            {
                "tolerations": [{"key": "nvidia.com/gpu", "value": "x\n- key: y", "effect": "NoSchedule"}],
                "provisioning": {"capacity_types": ["spot"]},
            },
        ],
    )
    def test_hostile_bodies_are_400_and_nothing_changes(self, world, body):
        response = world.client("platform_admin").patch("/api/v1/flavors/h100-sxm5/", body, format="json")
        assert response.status_code == 400, response.content
        flavor = GpuFlavor.objects.get(name="h100-sxm5")
        assert flavor.provisioning == {} and flavor.topology_levels == []

    def test_members_cannot_provision(self, world):
        response = world.client("member").patch(
            "/api/v1/flavors/h100-sxm5/", {"provisioning": {"capacity_types": ["spot"]}}, format="json"
        )
        assert response.status_code == 403
