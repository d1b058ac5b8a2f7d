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
    settings.KARPENTER_AMI_ALIAS = "al2023@v20240807"


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
        }
        assert admin.post("/platform/flavors/h100-sxm5/", body).status_code == 302
        flavor = GpuFlavor.objects.get(name="h100-sxm5")
        assert flavor.provisioning["capacity_types"] == ["spot", "on-demand"]
        assert flavor.provisioning["instance_types"] == ["p5.48xlarge"]
        page = admin.get("/platform/flavors/h100-sxm5/").content.decode()
        assert 'data-gpu-limit="16"' in page  # alpha 8 + beta 8 nominal
        assert "kind: NodePool" in page and "consolidateAfter: 10m" in page
        assert "data-pool-warning" not in page  # the GPU taint alone: the device plugin tolerates it

    def test_topology_levels_with_a_pool_are_refused_on_the_provision_box(self, world, aws):
        body = {**FORM, "provision": "on", "topology_levels": "cloud.example.com/block\nkubernetes.io/hostname"}
        response = world.browser("platform_admin").post("/platform/flavors/h100-sxm5/", body)
        page = response.content.decode()
        assert response.status_code == 200
        assert '<p class="error" role="alert" id="id_provision_error">A flavor with topology levels cannot' in page
        flavor = GpuFlavor.objects.get(name="h100-sxm5")
        assert (flavor.provisioning, flavor.topology_levels) == ({}, [])

    def test_a_taint_the_device_plugin_does_not_tolerate_saves_with_a_warning(self, world, aws):
        admin = world.browser("platform_admin")
        body = {**FORM, "tolerations": "nvidia.com/gpu:NoSchedule\ndedicated=inference:NoExecute", "provision": "on"}
        response = admin.post("/platform/flavors/h100-sxm5/", body, follow=True)
        warning = "Taint dedicated=inference:NoExecute: the NVIDIA device plugin&#x27;s DaemonSet does not tolerate"
        assert GpuFlavor.objects.get(name="h100-sxm5").provisioning  # saved: the team may have added it
        assert f'<li class="warning"><span aria-hidden="true" class="msg-icon"></span>{warning}' in (
            response.content.decode()
        )
        assert warning in admin.get("/platform/flavors/h100-sxm5/").content.decode()

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
        body = {"provisioning": {"capacity_types": ["spot"]}}
        response = admin.patch("/api/v1/flavors/h100-sxm5/", body, format="json")
        assert response.status_code == 200, response.content
        pool = response.json()["node_pool"]
        assert pool["gpu_limit"] == 16 and pool["capacity_types"] == ["spot"]
        assert pool["manifest"]["kind"] == "NodePool"
        # Members read flavors, not the node role and subnet tags the manifest names.
        member_view = world.client("member").get("/api/v1/flavors/h100-sxm5/").json()["node_pool"]
        assert member_view["gpu_limit"] == 16 and "manifest" not in member_view
        assert pool["warnings"] == []

    def test_topology_levels_with_a_pool_are_a_400_on_provisioning(self, world, aws):
        body = {"provisioning": {"capacity_types": ["spot"]}, "topology_levels": ["kubernetes.io/hostname"]}
        response = world.client("platform_admin").patch("/api/v1/flavors/h100-sxm5/", body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["provisioning"][0].startswith("A flavor with topology levels cannot be provisioned")
        assert GpuFlavor.objects.get(name="h100-sxm5").topology_levels == []

    def test_the_device_plugin_warning_is_in_the_pool(self, world, aws):
        tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]
        body = {"provisioning": {"capacity_types": ["spot"]}, "tolerations": tolerations}
        response = world.client("platform_admin").patch("/api/v1/flavors/h100-sxm5/", body, format="json")
        assert response.status_code == 200, response.content
        (warning,) = response.json()["node_pool"]["warnings"]
        assert warning.startswith("Taint nvidia.com/gpu:NoExecute: the NVIDIA device plugin's DaemonSet")

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
