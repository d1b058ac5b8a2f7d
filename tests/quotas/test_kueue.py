"""Kueue sync through the real `kubernetes` client against the API test server."""

from quotas import services
from quotas.kueue import sync_kueue
from runtime import k8s
from tests.support.crd import assert_valid


class TestKueueSync:
    def test_sync_creates_valid_objects_then_writes_nothing_when_unchanged(self, world, cluster_api):
        written = sync_kueue()
        assert written > 0
        cq = cluster_api.get_object(k8s.CLUSTERQUEUE, "tenant-alpha")
        assert cq["spec"]["cohortName"] == "llm-serving"
        gpu = {
            f["name"]: r
            for g in cq["spec"]["resourceGroups"]
            for f in g["flavors"]
            for r in f["resources"]
            if r["name"] == "nvidia.com/gpu"
        }
        assert gpu["h100-sxm5"]["nominalQuota"] == 8 and gpu["h100-sxm5"]["borrowingLimit"] == 4
        lq = cluster_api.get_object(k8s.LOCALQUEUE, "alpha", "alpha")
        assert lq["spec"]["clusterQueue"] == "tenant-alpha"
        flavor = cluster_api.get_object(k8s.RESOURCEFLAVOR, "h100-sxm5")
        assert flavor["spec"]["nodeLabels"] == {
            "node.kubernetes.io/instance-type": "p5.48xlarge",
            "llm-portal.io/flavor": "h100-sxm5",  # the portal's pinning label, added at render time
        }
        for obj in (cq, lq, flavor):
            clean = {k: v for k, v in obj.items() if k != "status"}
            clean["metadata"] = {
                k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels", "annotations")
            }
            assert_valid(clean)
        assert sync_kueue() == 0  # idempotent: nothing changed, nothing written

    def test_an_approved_quota_change_is_mirrored_on_the_next_sync(self, world, cluster_api):
        sync_kueue()
        request = services.quota_change_request_create(
            tenant=world.alpha,
            flavor=world.h100,
            user=world.users["tenant_admin"],
            nominal_gpus=24,
            justification="more",
        )
        services.quota_change_approve(request_id=request.pk, approver=world.users["platform_admin"])
        assert sync_kueue(tenant_id=world.alpha.pk) == 1  # only alpha's ClusterQueue changed
        cq = cluster_api.get_object(k8s.CLUSTERQUEUE, "tenant-alpha")
        nominal = [
            r["nominalQuota"]
            for g in cq["spec"]["resourceGroups"]
            for f in g["flavors"]
            if f["name"] == "h100-sxm5"
            for r in f["resources"]
            if r["name"] == "nvidia.com/gpu"
        ]
        assert nominal == [24]

    def test_cluster_queue_status_is_read_back_for_the_admin_view(self, world, cluster_api):
        sync_kueue()
        cluster_api.patch_object(
            k8s.CLUSTERQUEUE,
            "tenant-alpha",
            None,
            {
                "status": {
                    "pendingWorkloads": 2,
                    "admittedWorkloads": 1,
                    "flavorsUsage": [
                        {"name": "h100-sxm5", "resources": [{"name": "nvidia.com/gpu", "total": "8", "borrowed": "2"}]}
                    ],
                }
            },
            status_only=True,
        )
        sync_kueue(tenant_id=world.alpha.pk)
        world.alpha.refresh_from_db()
        assert world.alpha.kueue_status["pending_workloads"] == 2
        assert world.alpha.kueue_status["gpu_usage"]["h100-sxm5"] == {"total": "8", "borrowed": "2"}
        body = world.browser("platform_admin").get("/cluster/").content.decode()
        assert "8 used, 2 borrowed" in body
