"""End to end through a real Celery worker (Redis) and the API test server: the idle sweep stops
an idle deployment and its RayService goes; the schedule sweep stops a started one outside the
window and starts it again when the window opens."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from deployments.models import DeploymentEvent, ModelDeployment
from quotas.models import Tenant, TenantQuota
from quotas.schedule import DAY_NAMES
from reclaim.idle import IDLE_STOPPED
from reclaim.schedules import SCHEDULE_STARTED, SCHEDULE_STOPPED
from reclaim.tasks import idle_sweep_task, schedule_sweep_task
from runtime import k8s
from tests.e2e.workers import purge_broker
from tests.reclaim.support import points
from tests.support import operators
from tests.support.factories import api_draft
from tests.support.processes import celery_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_idle_stop_then_schedule_stop_and_start_through_a_real_worker(tx_world, k8s_api, tmp_path):
    purge_broker()
    with celery_worker(tmp_path / "worker.log", env={"KUBERNETES_URL": k8s_api.url}):
        member, admin = tx_world.client("member"), tx_world.client("platform_admin")
        created = member.post("/api/v1/deployments/", api_draft(tx_world), format="json")
        assert created.status_code == 201, created.content
        dep_id, name = created.json()["id"], created.json()["resource_name"]
        assert admin.post(f"/api/v1/deployments/{dep_id}/approve/", {"revision": 1}, format="json").status_code == 200
        rayservice = lambda: k8s_api.get_object(k8s.RAYSERVICE, name, "alpha")  # noqa: E731
        obj = wait_for(rayservice, timeout=60, what="the RayService to appear")
        state = lambda: member.get(f"/api/v1/deployments/{dep_id}/").json()["state"]  # noqa: E731
        wait_for(lambda: state() == "queued", timeout=30, what="queued")
        operators.workload_for(k8s_api, obj, {"QuotaReserved": True, "Admitted": True})
        operators.rayservice_ready(k8s_api, "alpha", name)
        wait_for(lambda: state() == "ready", timeout=60, what="ready")
        reserved = lambda: TenantQuota.objects.get(tenant=tx_world.alpha, flavor=tx_world.h100).reserved_gpus  # noqa: E731
        assert reserved() == 2

        # Idle: ready for 3 h by its timeline, 3 h of points without a token; the policy stops at 2 h.
        now = timezone.now()
        DeploymentEvent.objects.filter(deployment_id=dep_id).update(created=now - timedelta(hours=3))
        points(ModelDeployment.objects.get(pk=dep_id), start=now - timedelta(hours=3), end=now)
        Tenant.objects.filter(pk=tx_world.alpha.pk).update(idle_stop_hours=2)
        idle_sweep_task.delay()
        wait_for(lambda: state() == "stopped", timeout=30, what="the idle stop")
        assert reserved() == 0
        assert DeploymentEvent.objects.filter(deployment_id=dep_id, reason=IDLE_STOPPED).count() == 1
        wait_for(lambda: rayservice() is None, timeout=60, what="the RayService to be removed")

        # A person starts it again; outside the schedule's window the sweep stops it.
        Tenant.objects.filter(pk=tx_world.alpha.pk).update(idle_stop_hours=0)
        assert member.post(f"/api/v1/deployments/{dep_id}/start/", format="json").status_code == 200
        wait_for(rayservice, timeout=60, what="the RayService again")
        today = timezone.now().weekday()
        closed = f"{DAY_NAMES[(today + 3) % 7]} 00:00-24:00"  # another day of the week
        Tenant.objects.filter(pk=tx_world.alpha.pk).update(serving_schedule=closed)
        schedule_sweep_task.delay()
        wait_for(lambda: state() == "stopped", timeout=30, what="the schedule stop")
        assert DeploymentEvent.objects.filter(deployment_id=dep_id, reason=SCHEDULE_STOPPED).count() == 1
        wait_for(lambda: rayservice() is None, timeout=60, what="the RayService to be removed")

        # The window opens (today and tomorrow, so midnight cannot get in the way): started again.
        opened = f"{DAY_NAMES[today]} 00:00-24:00; {DAY_NAMES[(today + 1) % 7]} 00:00-24:00"
        Tenant.objects.filter(pk=tx_world.alpha.pk).update(serving_schedule=opened)
        schedule_sweep_task.delay()
        wait_for(lambda: state() in ("approved", "queued"), timeout=30, what="the schedule start")
        assert DeploymentEvent.objects.filter(deployment_id=dep_id, reason=SCHEDULE_STARTED).count() == 1
        assert reserved() == 2
        wait_for(rayservice, timeout=60, what="the RayService after the schedule start")
        # The stop's reconcile may finish after the start (it read the deployment stopped): the
        # start's GPUs stay reserved, since the reconciler never releases GPUs (only the state
        # does, deployments.services.common.settle_gpus).
        wait_for(lambda: state() == "queued", timeout=30, what="queued again")
        assert reserved() == 2
