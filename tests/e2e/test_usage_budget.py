"""End to end: the usage beat task through a real Celery worker (Redis) refreshes the ledger and,
for a tenant over its budget with the hard stop on, stops its deployment by policy (the reconciler
removes the RayService), records and mails the 100 % warning, and the API then refuses a
start with 409."""

import pytest

from deployments.models import ModelDeployment
from quotas.models import Tenant
from runtime import k8s
from tests.e2e.workers import purge_broker
from tests.support.factories import api_draft
from tests.support.processes import celery_worker, wait_for
from usage.models import BudgetNotice, UsageMonth
from usage.tasks import refresh_usage_task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_over_budget_with_the_hard_stop_through_a_real_worker(tx_world, k8s_api, tmp_path):
    purge_broker()
    admin_user = tx_world.users["tenant_admin"]
    admin_user.email = "alpha-admin@example.com"
    admin_user.save()
    Tenant.objects.filter(pk=tx_world.alpha.pk).update(monthly_budget=0, budget_hard_stop=True)
    with celery_worker(tmp_path / "worker.log", env={"KUBERNETES_URL": k8s_api.url}):
        member, admin = tx_world.client("member"), tx_world.client("platform_admin")
        created = member.post("/api/v1/deployments/", api_draft(tx_world, max_replicas=1), format="json")
        assert created.status_code == 201, created.content
        dep_id, name = created.json()["id"], created.json()["resource_name"]
        assert admin.post(f"/api/v1/deployments/{dep_id}/approve/", {"revision": 1}, format="json").status_code == 200
        wait_for(lambda: k8s_api.get_object(k8s.RAYSERVICE, name, "alpha"), timeout=60, what="the RayService")

        refresh_usage_task.delay()
        dep = lambda: ModelDeployment.objects.get(pk=dep_id)  # noqa: E731
        wait_for(lambda: dep().state == "stopped", timeout=60, what="the budget stop")
        assert dep().events.filter(reason="BudgetStopped").exists() and dep().reserved_gpus == 0
        assert UsageMonth.objects.filter(deployment_id=dep_id).count() == 1
        assert Tenant.objects.get(pk=tx_world.alpha.pk).budget_stopped_at is not None
        wait_for(
            lambda: k8s_api.get_object(k8s.RAYSERVICE, name, "alpha") is None, timeout=60, what="the workload removed"
        )
        notice = BudgetNotice.objects.get(tenant=tx_world.alpha, level=100)
        assert notice.sent == 1  # the worker's mail backend (console) took the message
        refused = member.post(f"/api/v1/deployments/{dep_id}/start/")
        assert refused.status_code == 409 and refused.json()["code"] == "budget_stopped"
