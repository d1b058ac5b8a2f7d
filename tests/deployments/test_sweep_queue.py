"""The sweep's Kueue reads: queue positions from the visibility API (one call per ClusterQueue),
requeue count and last eviction from the Workload, and orphans in tenant namespaces — all through
the real `kubernetes` client against the API test server (its visibility stand-in derives the
queue from the Workloads it holds: tests/support/k8s/emulator.py)."""

from core.models import AuditEvent
from deployments.reconcile import sweep
from quotas.kueue import sync_kueue
from runtime import k8s
from runtime.manifests.common import LABEL_DEPLOYMENT_ID, LABEL_MANAGED_BY, MANAGED_BY
from tests.deployments.test_reconcile import approved, rayservice, run
from tests.support import operators


def pending_calls(api) -> list[str]:
    return [path for _method, path in api.proxied_requests() if path.endswith("/pendingworkloads")]


def queued_three(world, api):
    """Three queued deployments whose Workloads ask for 2, 4 and 1 GPUs, in that order."""
    sync_kueue()
    deps = []
    for i, gpus in enumerate((2, 4, 1)):
        dep = approved(world, name=f"q{i}", max_replicas=1)
        run(dep)
        operators.workload_for(api, rayservice(api, dep), {"QuotaReserved": False}, gpus=gpus)
        run(dep)
        deps.append(dep)
    return deps


class TestQueuePosition:
    def test_a_queued_deployment_gets_its_position_and_the_gpus_ahead(self, world, cluster_api):
        deps = queued_three(world, cluster_api)
        sweep()
        last = deps[2]
        last.refresh_from_db()
        queue = last.condition("Admitted")["queue"]
        assert queue["clusterQueue"] == "tenant-alpha" and queue["localQueue"] == "alpha"
        assert (queue["position"], queue["of"]) == (3, 3)
        assert (queue["positionInLocalQueue"], queue["ofInLocalQueue"]) == (3, 3)
        assert queue["gpusAhead"] == 6 and queue["unsizedAhead"] == 0
        deps[0].refresh_from_db()
        assert deps[0].condition("Admitted")["queue"]["position"] == 1

    def test_the_sweep_reads_each_cluster_queue_once_however_many_wait(self, world, cluster_api):
        queued_three(world, cluster_api)
        before = len(pending_calls(cluster_api))
        sweep()
        calls = pending_calls(cluster_api)[before:]
        assert calls == ["/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/tenant-alpha/pendingworkloads"]

    def test_the_position_shows_on_the_page_and_in_the_api_and_goes_once_admitted(self, world, cluster_api):
        deps = queued_three(world, cluster_api)
        sweep()
        dep = deps[1]
        page = world.browser("member").get(f"/deployments/{dep.pk}/").content.decode()
        assert "Position 2 of 3 in LocalQueue alpha, 2 of 3 in ClusterQueue tenant-alpha" in page
        assert "2 GPUs requested ahead of it" in page
        body = world.client("member").get(f"/api/v1/deployments/{dep.pk}/").json()
        admitted = next(c for c in body["conditions"] if c["type"] == "Admitted")
        assert admitted["queue"]["position"] == 2
        run(dep)  # a reconcile reads no positions of its own; it keeps the sweep's while queued
        assert dep.condition("Admitted")["queue"]["position"] == 2
        operators.workload_set_conditions(
            cluster_api,
            "alpha",
            operators.workload_name(rayservice(cluster_api, dep)),
            {"QuotaReserved": True, "Admitted": True},
        )
        run(dep)
        assert "queue" not in dep.condition("Admitted")
        sweep()
        deps[2].refresh_from_db()
        assert (deps[2].condition("Admitted")["queue"]["position"], deps[2].condition("Admitted")["queue"]["of"]) == (
            2,
            2,
        )


class TestRequeueHistory:
    def test_requeue_count_and_last_eviction_reach_the_kueue_story(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        obj = rayservice(cluster_api, dep)
        operators.workload_for(cluster_api, obj, {"QuotaReserved": True, "Admitted": True})
        name = operators.workload_name(obj)
        operators.workload_set_conditions(
            cluster_api,
            "alpha",
            name,
            {"QuotaReserved": False, "Admitted": False, "Evicted": True, "Requeued": False},
            {"Evicted": "Preempted to reclaim quota in the cohort", "Requeued": "waiting for backoff"},
        )
        cluster_api.patch_object(
            k8s.WORKLOAD, name, "alpha", {"status": {"requeueState": {"count": 2}}}, status_only=True
        )
        run(dep)
        admitted = dep.condition("Admitted")
        assert admitted["requeueCount"] == 2
        assert admitted["lastEviction"]["type"] == "Evicted"
        assert admitted["lastEviction"]["reason"] == "Preempted"
        page = world.browser("member").get(f"/deployments/{dep.pk}/").content.decode()
        assert "Requeued 2 times by Kueue." in page
        assert "Last eviction" in page and "Evicted by Kueue (Preempted to reclaim quota in the cohort)." in page


def put_orphan(api, namespace: str, name: str) -> None:
    api.put(
        k8s.RAYSERVICE,
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_DEPLOYMENT_ID: "424242"},
            },
            "spec": {},
        },
    )


class TestOrphans:
    def test_orphans_are_found_where_no_deployment_is_left_and_an_admin_deletes_them(self, world, cluster_api):
        put_orphan(cluster_api, "beta", "old-llama")
        report = sweep()
        assert report["orphans"] == ["beta/old-llama"]
        admin = world.browser("platform_admin")
        assert "beta/old-llama" in admin.get("/cluster/").content.decode()
        url = "/cluster/orphans/kuberay/beta/old-llama/delete/"
        confirm = admin.get(url)
        assert confirm.status_code == 200 and b"Delete RayService beta/old-llama?" in confirm.content
        assert cluster_api.get_object(k8s.RAYSERVICE, "old-llama", "beta") is not None  # GET only asks
        response = admin.post(url, {"confirm": "1"})
        assert response.status_code == 302
        assert cluster_api.get_object(k8s.RAYSERVICE, "old-llama", "beta") is None
        event = AuditEvent.objects.get(action="orphan.delete")
        assert event.actor == world.users["platform_admin"] and event.object_id == "beta/old-llama"
        assert event.changes["kind"] == "RayService"
        assert admin.get(url).status_code == 404  # no longer listed

    def test_only_platform_admins_may_delete_and_only_what_the_sweep_found(self, world, cluster_api):
        put_orphan(cluster_api, "beta", "old-llama")
        sweep()
        url = "/cluster/orphans/kuberay/beta/old-llama/delete/"
        for role in ("member", "tenant_admin", "other_member"):
            assert world.browser(role).post(url, {"confirm": "1"}).status_code == 403
        assert cluster_api.get_object(k8s.RAYSERVICE, "old-llama", "beta") is not None
        admin = world.browser("platform_admin")
        assert admin.post("/cluster/orphans/kuberay/alpha/not-an-orphan/delete/").status_code == 404
        assert not AuditEvent.objects.filter(action="orphan.delete").exists()

    def test_the_api_lists_and_deletes_orphans_like_the_page(self, world, cluster_api):
        put_orphan(cluster_api, "beta", "old-llama")
        sweep()
        admin = world.client("platform_admin")
        listed = admin.get("/api/v1/cluster/sweep/").json()
        assert [(o["namespace"], o["name"]) for o in listed["orphans"]] == [("beta", "old-llama")]
        body = {"backend": "kuberay", "namespace": "beta", "name": "old-llama"}
        assert world.client("tenant_admin").post("/api/v1/cluster/orphans/delete/", body).status_code == 403
        assert admin.post("/api/v1/cluster/orphans/delete/", body).json() == {"deleted": True}
        assert cluster_api.get_object(k8s.RAYSERVICE, "old-llama", "beta") is None
        assert AuditEvent.objects.get(action="orphan.delete").object_id == "beta/old-llama"
        assert admin.post("/api/v1/cluster/orphans/delete/", {**body, "name": "never"}).status_code == 404

    def test_a_workload_whose_rayservice_is_gone_is_an_orphan_too(self, world, cluster_api):
        put_orphan(cluster_api, "beta", "old-llama")
        job = cluster_api.get_object(k8s.RAYSERVICE, "old-llama", "beta")
        workload = operators.workload_for(cluster_api, job, {"QuotaReserved": True, "Admitted": True})
        assert sweep()["orphans"] == ["beta/old-llama"]  # its job is there: the Workload is not orphaned
        cluster_api.delete_object(k8s.RAYSERVICE, "old-llama", "beta")  # no garbage collector here
        name = workload["metadata"]["name"]
        assert sweep()["orphans"] == [f"beta/{name}"]
        admin = world.browser("platform_admin")
        assert f"beta/{name}" in admin.get("/cluster/").content.decode()
        assert admin.post(f"/cluster/orphans/kuberay/beta/{name}/delete/", {"confirm": "1"}).status_code == 302
        assert cluster_api.get_object(k8s.WORKLOAD, name, "beta") is None
        assert AuditEvent.objects.get(action="orphan.delete").changes["owner"] == "RayService/old-llama"

    def test_the_admin_view_lists_pending_workloads_per_cluster_queue(self, world, cluster_api):
        deps = queued_three(world, cluster_api)
        sweep()
        before = len(pending_calls(cluster_api))
        page = world.browser("platform_admin").get("/cluster/").content.decode()
        assert len(pending_calls(cluster_api)) == before  # the page reads the sweep's result
        assert 'data-cluster-queue="tenant-alpha"' in page
        for dep in deps:
            assert f"alpha/{operators.workload_name(rayservice(cluster_api, dep))}" in page
