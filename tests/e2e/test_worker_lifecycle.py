"""End to end: API approval → real Celery worker (Redis) → RayService in the API test server →
simulated KubeRay/Kueue mark it ready → the API says ready. Then delete → GPUs released at once,
the RayService removed."""

import pytest

from quotas.models import TenantQuota
from runtime import k8s
from tests.e2e.workers import purge_broker
from tests.support import operators
from tests.support.factories import api_draft
from tests.support.processes import celery_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_approve_to_ready_to_deleted_through_a_real_worker(tx_world, k8s_api, tmp_path):
    purge_broker()
    with celery_worker(tmp_path / "worker.log", env={"KUBERNETES_URL": k8s_api.url}):
        member, admin = tx_world.client("member"), tx_world.client("platform_admin")
        created = member.post("/api/v1/deployments/", api_draft(tx_world), format="json")
        assert created.status_code == 201, created.content
        dep_id = created.json()["id"]
        assert admin.post(f"/api/v1/deployments/{dep_id}/approve/", {"revision": 1}, format="json").status_code == 200
        name = created.json()["resource_name"]

        obj = wait_for(
            lambda: k8s_api.get_object(k8s.RAYSERVICE, name, "alpha"), timeout=60, what="the RayService to appear"
        )
        state = lambda: member.get(f"/api/v1/deployments/{dep_id}/").json()["state"]  # noqa: E731
        wait_for(lambda: state() == "queued", timeout=30, what="queued")
        operators.workload_for(k8s_api, obj, {"QuotaReserved": True, "Admitted": True})
        operators.rayservice_ready(k8s_api, "alpha", name)
        wait_for(lambda: state() == "ready", timeout=60, what="ready")
        body = member.get(f"/api/v1/deployments/{dep_id}/").json()
        assert body["observed_generation"] == body["generation"]
        assert {c["type"]: c["status"] for c in body["conditions"]}["Ready"] == "True"

        quota = lambda: TenantQuota.objects.get(tenant=tx_world.alpha, flavor=tx_world.h100)  # noqa: E731
        assert quota().reserved_gpus == 2
        deleted = member.delete(f"/api/v1/deployments/{dep_id}/")
        assert deleted.status_code == 202 and deleted.json()["state"] == "deleting"
        # Released with the deletion, before the workload is gone (settle_gpus; Kueue keeps a
        # successor queued until the old Workload is removed).
        assert quota().reserved_gpus == 0 and deleted.json()["reserved_gpus"] == 0
        # The worker removes the RayService, then marks the row deleted: the API's 404 (a deleted
        # deployment drops out) is the later of the two, so the wait is on it (CI of stop 44 saw
        # the RayService gone and the row not yet committed).
        wait_for(
            lambda: member.get(f"/api/v1/deployments/{dep_id}/").status_code == 404,
            timeout=60,
            what="the deployment to be deleted",
        )
        assert k8s_api.get_object(k8s.RAYSERVICE, name, "alpha") is None
