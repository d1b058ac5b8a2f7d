"""End to end through a real Celery worker (Redis) and the API test server (issue 30): a ready
deployment whose member proposed a change that needs approval is still stopped by each of the
tenant's policies — the budget hard stop, a closed serving schedule, the idle stop — and its GPUs
are released; the proposed change waits on, untouched.

On 518dee8 (before revisions) each of these fails: the member's PATCH moved the whole deployment to
`pending_approval`, keeping its reservation and its RayService, and the budget, schedule and idle
sweeps selected the running states only, so a pending edit kept the GPUs and kept serving past
every policy (an adapted copy run on 518dee8: after each sweep the deployment was still
`pending_approval` with its 2 GPUs and its RayService). Now the state is what runs (the PATCH
proposes revision 2 and the state stays `ready`), and the sweeps select
`deployments.states.STOPPABLE_BY_POLICY`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import AuditEvent
from deployments.choices import RevisionStatus
from deployments.models import DeploymentEvent, DeploymentRevision, ModelDeployment
from quotas.models import Tenant, TenantQuota
from quotas.schedule import DAY_NAMES
from reclaim.idle import IDLE_STOPPED
from reclaim.schedules import SCHEDULE_STOPPED
from reclaim.tasks import idle_sweep_task, schedule_sweep_task
from runtime import k8s
from tests.e2e.workers import purge_broker
from tests.reclaim.support import points
from tests.support import operators
from tests.support.factories import api_draft
from tests.support.processes import celery_worker, wait_for
from usage.budgets import CAUSE as BUDGET_STOPPED
from usage.tasks import refresh_usage_task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SERVING_LEN, PROPOSED_LEN = 8192, 4096


def ready_with_a_proposed_change(world, k8s_api) -> tuple[int, str]:
    """A member's deployment (2 GPUs) approved and Ready on the cluster, then PATCHed with a new
    max_model_len (needs approval): revision 2 waits, and the deployment is still ready with its
    GPUs and its RayService. Returns the deployment's id and resource name."""
    member, admin = world.client("member"), world.client("platform_admin")
    created = member.post("/api/v1/deployments/", api_draft(world, max_model_len=SERVING_LEN), format="json")
    assert created.status_code == 201, created.content
    dep_id, name = created.json()["id"], created.json()["resource_name"]
    approved = admin.post(f"/api/v1/deployments/{dep_id}/approve/", {"revision": 1}, format="json")
    assert approved.status_code == 200, approved.content
    obj = wait_for(lambda: k8s_api.get_object(k8s.RAYSERVICE, name, "alpha"), timeout=60, what="the RayService")
    state = lambda: member.get(f"/api/v1/deployments/{dep_id}/").json()["state"]  # noqa: E731
    wait_for(lambda: state() == "queued", timeout=30, what="queued")
    operators.workload_for(k8s_api, obj, {"QuotaReserved": True, "Admitted": True})
    operators.rayservice_ready(k8s_api, "alpha", name)
    wait_for(lambda: state() == "ready", timeout=60, what="ready")

    changed = member.patch(f"/api/v1/deployments/{dep_id}/", {"max_model_len": PROPOSED_LEN}, format="json")
    assert changed.status_code == 200, changed.content
    body = changed.json()
    assert (body["state"], body["reserved_gpus"], body["max_model_len"]) == ("ready", 2, SERVING_LEN)
    assert reserved(world) == 2
    assert proposed(dep_id) == (2, PROPOSED_LEN)
    assert k8s_api.get_object(k8s.RAYSERVICE, name, "alpha") is not None
    return dep_id, name


def reserved(world) -> int:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus


def proposed(dep_id: int) -> tuple[int, int] | None:
    """The proposed revision's number and max_model_len, or None when nothing waits."""
    rev = DeploymentRevision.objects.filter(deployment_id=dep_id, status=RevisionStatus.PROPOSED).first()
    return (rev.number, rev.spec["max_model_len"]) if rev else None


def assert_stopped_by_policy(world, k8s_api, dep_id: int, name: str, cause: str) -> None:
    """The worker stopped it: GPUs released with the stop (the row and the tenant's quota), the
    cause recorded once, the audit actor "policy", the RayService removed, revision 1 still the
    serving one and revision 2 still proposed."""
    dep = lambda: ModelDeployment.objects.get(pk=dep_id)  # noqa: E731
    wait_for(lambda: dep().state == "stopped", timeout=60, what=f"the policy stop ({cause})")
    assert dep().reserved_gpus == 0 and reserved(world) == 0
    assert DeploymentEvent.objects.filter(deployment_id=dep_id, reason=cause).count() == 1
    stop = AuditEvent.objects.get(action="deployment.stop", object_id=str(dep_id))
    assert (stop.actor_name, stop.actor_id, stop.changes["cause"]) == ("policy", None, cause)
    assert (dep().serving_revision.number, dep().max_model_len) == (1, SERVING_LEN)
    assert proposed(dep_id) == (2, PROPOSED_LEN)
    wait_for(
        lambda: k8s_api.get_object(k8s.RAYSERVICE, name, "alpha") is None, timeout=60, what="the RayService removed"
    )
    assert reserved(world) == 0


def test_the_budget_hard_stop_stops_a_deployment_with_a_pending_change(tx_world, k8s_api, tmp_path):
    purge_broker()
    with celery_worker(tmp_path / "worker.log", env={"KUBERNETES_URL": k8s_api.url}):
        dep_id, name = ready_with_a_proposed_change(tx_world, k8s_api)
        Tenant.objects.filter(pk=tx_world.alpha.pk).update(monthly_budget=0, budget_hard_stop=True)
        refresh_usage_task.delay()
        assert_stopped_by_policy(tx_world, k8s_api, dep_id, name, BUDGET_STOPPED)
        assert Tenant.objects.get(pk=tx_world.alpha.pk).budget_stopped_at is not None


def test_a_closed_schedule_stops_a_deployment_with_a_pending_change(tx_world, k8s_api, tmp_path):
    purge_broker()
    with celery_worker(tmp_path / "worker.log", env={"KUBERNETES_URL": k8s_api.url}):
        dep_id, name = ready_with_a_proposed_change(tx_world, k8s_api)
        closed = f"{DAY_NAMES[(timezone.now().weekday() + 3) % 7]} 00:00-24:00"  # another day of the week
        Tenant.objects.filter(pk=tx_world.alpha.pk).update(serving_schedule=closed)
        schedule_sweep_task.delay()
        assert_stopped_by_policy(tx_world, k8s_api, dep_id, name, SCHEDULE_STOPPED)


def test_the_idle_stop_stops_a_deployment_with_a_pending_change(tx_world, k8s_api, tmp_path):
    purge_broker()
    with celery_worker(tmp_path / "worker.log", env={"KUBERNETES_URL": k8s_api.url}):
        dep_id, name = ready_with_a_proposed_change(tx_world, k8s_api)
        # Ready for 3 h by its timeline, 3 h of points without a token; the policy stops at 2 h.
        now = timezone.now()
        DeploymentEvent.objects.filter(deployment_id=dep_id).update(created=now - timedelta(hours=3))
        points(ModelDeployment.objects.get(pk=dep_id), start=now - timedelta(hours=3), end=now)
        Tenant.objects.filter(pk=tx_world.alpha.pk).update(idle_stop_hours=2)
        idle_sweep_task.delay()
        assert_stopped_by_policy(tx_world, k8s_api, dep_id, name, IDLE_STOPPED)
