"""The reconciler against the Kubernetes API test server, through the real `kubernetes` client.

The simulated operators in tests/support/operators.py play KubeRay and Kueue by writing `status`.
"""

import pytest

from deployments import services
from deployments.choices import State
from deployments.models import DeploymentEvent
from deployments.reconcile import FAILED_REQUEUE_SECONDS, Result, reconcile, sweep
from quotas.models import TenantQuota
from runtime import k8s
from runtime.manifests.common import ANNOTATION_SPEC_HASH
from runtime.spec import RenderError
from tests.support import operators
from tests.support.factories import draft


def approved(world, **kw):
    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, **kw))
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )
    dep.refresh_from_db()
    return dep


def run(dep):
    dep.refresh_from_db()
    result = reconcile(dep)
    dep.refresh_from_db()
    return result


def rayservice(api, dep):
    return api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")


def reserved(world):
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus


class TestLifecycle:
    def test_approved_deployment_follows_kueue_and_kuberay_to_ready(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        obj = rayservice(cluster_api, dep)
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "alpha"
        assert dep.state == State.QUEUED
        operators.workload_for(
            cluster_api,
            obj,
            {"QuotaReserved": False},
            messages={"QuotaReserved": "insufficient unused quota for nvidia.com/gpu"},
        )
        run(dep)
        assert dep.state == State.QUEUED
        assert "insufficient" in dep.condition("Admitted")["message"]
        wl = operators.workload_name(obj)
        operators.workload_set_conditions(cluster_api, "alpha", wl, {"QuotaReserved": True, "Admitted": True})
        run(dep)
        assert dep.state == State.PROVISIONING
        assert dep.condition("Admitted")["status"] == "True"
        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        run(dep)
        assert dep.state == State.READY
        assert dep.observed_generation == dep.generation
        assert dep.endpoint_url == f"http://{dep.resource_name}-serve-svc.alpha.svc:8000/v1"
        reasons = list(dep.events.order_by("created", "id").values_list("reason", flat=True))
        assert reasons[:3] == ["Requested", "Approved", "Created"]
        assert reasons[-1] == "Ready"

    def test_reconciling_twice_changes_nothing_and_writes_no_event(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        operators.workload_for(cluster_api, rayservice(cluster_api, dep), {"QuotaReserved": True, "Admitted": True})
        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        run(dep)
        before_events = DeploymentEvent.objects.filter(deployment=dep).count()
        before_obj = rayservice(cluster_api, dep)
        cluster = k8s.Cluster.for_url(cluster_api.url)
        from runtime import backends

        backends._clusters.clear()
        run(dep)
        run(dep)
        assert DeploymentEvent.objects.filter(deployment=dep).count() == before_events
        after = rayservice(cluster_api, dep)
        assert after["metadata"]["resourceVersion"] == before_obj["metadata"]["resourceVersion"]
        assert len(cluster_api.list_objects(k8s.RAYSERVICE, "alpha")) == 1
        cluster.close()

    def test_a_deleted_rayservice_is_recreated(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        cluster_api.delete_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
        run(dep)
        assert rayservice(cluster_api, dep) is not None

    @pytest.mark.parametrize("fail", ["deploy_failed", "validation"])
    def test_a_failure_releases_the_gpus_at_once_then_the_workload_is_torn_down(self, world, cluster_api, fail):
        dep = approved(world)
        run(dep)
        if fail == "deploy_failed":
            operators.rayservice_app_status(
                cluster_api, "alpha", dep.resource_name, "llm", "DEPLOY_FAILED", "ValueError: model not found"
            )
        else:
            operators.rayservice_not_ready(
                cluster_api, "alpha", dep.resource_name, "ValidationFailed", "spec.rayClusterConfig invalid"
            )
        assert run(dep) == Result("failed", FAILED_REQUEUE_SECONDS)  # tear down right away
        assert dep.state == State.FAILED
        assert dep.condition("Degraded")["status"] == "True"
        assert reserved(world) == 0 and dep.reserved_gpus == 0  # released with the move to failed
        assert rayservice(cluster_api, dep) is not None
        assert run(dep) == Result("removed")  # the follow-up reconcile tears down
        assert rayservice(cluster_api, dep) is None
        assert dep.condition("Ready")["reason"] == "Failed"
        assert dep.condition("Degraded")["status"] == "False"

    def test_unhealthy_app_is_degraded_and_recovers(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        run(dep)
        operators.rayservice_app_status(cluster_api, "alpha", dep.resource_name, "llm", "UNHEALTHY", "replica died")
        run(dep)
        assert dep.state == State.DEGRADED
        operators.rayservice_app_status(cluster_api, "alpha", dep.resource_name, "llm", "RUNNING")
        run(dep)
        assert dep.state == State.READY

    def test_eviction_sends_it_back_to_the_queue_with_an_event(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        obj = rayservice(cluster_api, dep)
        operators.workload_for(cluster_api, obj, {"QuotaReserved": True, "Admitted": True})
        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        run(dep)
        operators.rayservice_not_ready(cluster_api, "alpha", dep.resource_name, "Initializing", "restarting")
        operators.workload_set_conditions(
            cluster_api,
            "alpha",
            operators.workload_name(obj),
            {"Admitted": False, "Evicted": True},
            {"Evicted": "Preempted to reclaim quota in the cohort"},
        )
        run(dep)
        assert dep.state == State.QUEUED
        assert dep.events.filter(reason="Evicted").exists()

    def test_delete_releases_the_gpus_at_once_and_the_reconcile_finishes_it(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
        assert reserved(world) == 0  # before the workload is gone: the service settles the GPUs
        assert run(dep) == Result("deleted")
        assert dep.state == State.DELETED
        assert rayservice(cluster_api, dep) is None

    def test_a_person_stopping_releases_the_gpus_at_once_and_the_reconcile_removes_the_object(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        assert reserved(world) == 0 and rayservice(cluster_api, dep) is not None
        assert run(dep) == Result("removed")
        assert rayservice(cluster_api, dep) is None and reserved(world) == 0
        assert dep.condition("Ready")["status"] == "False"
        ready = dep.condition("Ready")
        assert run(dep) == Result("removed")  # the absent observation is recorded once
        assert dep.condition("Ready") == ready

    def test_a_scale_moves_the_running_ray_cluster_and_a_serve_change_stays_in_place(self, world, cluster_api):
        """A new worker range keeps the RayService and moves its RayCluster's counts (Kueue takes
        them as a workload slice: runtime/backends/rayresize.py; tests/cluster/test_replica_edit.py
        on the real controllers); a Serve-only change is applied to the running one."""
        from runtime.backends.rayresize import ANNOTATION_RESIZING

        dep = approved(world)
        run(dep)
        uid = rayservice(cluster_api, dep)["metadata"]["uid"]
        operators.raycluster_serving(cluster_api, "alpha", dep.resource_name)  # KubeRay's part
        world.alpha.auto_approve_max_gpus = 8  # the policy covers both changes: no second approval
        world.alpha.save()
        services.deployment_scale(deployment_id=dep.pk, user=world.users["member"], min_replicas=1, max_replicas=3)
        run(dep)
        obj = rayservice(cluster_api, dep)
        assert obj["metadata"]["uid"] == uid  # never replaced: no gap
        assert obj["metadata"]["annotations"]["llm-portal.io/generation"] == "2"
        assert obj["metadata"]["annotations"][ANNOTATION_RESIZING] == "1"
        assert [g["maxReplicas"] for g in obj["spec"]["rayClusterConfig"]["workerGroupSpecs"]] == [3]
        name = obj["status"]["activeServiceStatus"]["rayClusterName"]
        (group,) = cluster_api.get_object(k8s.RAYCLUSTER, name, "alpha")["spec"]["workerGroupSpecs"]
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 3)  # autoscaler's count kept
        assert dep.events.filter(reason="Resizing").exists()
        assert not dep.events.filter(reason="Recreating").exists()
        run(dep)  # the RayCluster has its counts and one ready worker: the mark goes
        assert ANNOTATION_RESIZING not in rayservice(cluster_api, dep)["metadata"]["annotations"]
        services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data={"max_model_len": 4096})
        run(dep)
        assert rayservice(cluster_api, dep)["metadata"]["uid"] == uid  # serve config: in place


class TestFaultsAndErrors:
    def test_transient_errors_propagate_for_retry_and_converge(self, world, cluster_api):
        dep = approved(world)
        cluster_api.inject_faults(0.5, faults=(500, 429), seed=3)
        for _attempt in range(1, 40):
            try:
                run(dep)
                if rayservice(cluster_api, dep) is not None and dep.state == State.QUEUED:
                    break
            except k8s.TransientClusterError:
                continue
        cluster_api.clear_faults()
        assert rayservice(cluster_api, dep) is not None
        assert sum(cluster_api.injected.values()) > 0

    def test_permanent_errors_become_a_readable_condition(self, world, cluster_api):
        dep = approved(world)
        cluster_api.fail_always(403)
        assert run(dep) == Result("error")
        assert dep.condition("Ready")["reason"] == "ClusterError"
        assert dep.state == State.APPROVED

    def test_without_a_cluster_the_condition_says_what_to_configure(self, world, settings):
        settings.KUBERNETES_URL = None
        settings.KUBECONFIG = None
        dep = approved(world)
        run(dep)
        assert "KUBERNETES_URL" in dep.condition("Ready")["message"]


class TestSweep:
    def test_sweep_lists_once_per_namespace_and_enqueues_only_drift(self, world, cluster_api):
        deps = [approved(world, name=f"m{i}", max_replicas=1) for i in range(3)]
        for dep in deps:
            run(dep)
            operators.workload_for(cluster_api, rayservice(cluster_api, dep), {"QuotaReserved": True, "Admitted": True})
            operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
            run(dep)
        from runtime.backends import get_cluster

        cluster = get_cluster()
        cluster.calls.clear()
        report = sweep()
        assert report == {"checked": 3, "enqueued": 0, "orphans": [], "errors": [], "not_installed": []}
        # Per cluster backend and tenant namespace one list of its objects (2 × 2: beta has no
        # deployment but may hold orphans), one Workload list per namespace, and one read of
        # Kueue's pending workloads per ClusterQueue holding a live deployment, at the version
        # discovery finds (read once, then remembered: runtime.k8s.reads.visibility_version).
        assert cluster.calls == {"list": 6, "pending_workloads": 1, "discovery": 1}
        cluster.calls.clear()
        sweep()
        assert cluster.calls == {"list": 6, "pending_workloads": 1}
        orphaned_workload = f"alpha/{operators.workload_name(rayservice(cluster_api, deps[0]))}"
        cluster_api.delete_object(k8s.RAYSERVICE, deps[0].resource_name, "alpha")
        stray = dict(rayservice(cluster_api, deps[1]))
        stray["metadata"] = {
            **stray["metadata"],
            "name": "stray-999",
            "labels": {**stray["metadata"]["labels"], "llm-portal.io/deployment-id": "999999"},
        }
        stray["metadata"].pop("uid", None)
        cluster_api.put(k8s.RAYSERVICE, stray)
        report = sweep()
        # The deleted RayService's Workload stays (the test server has no garbage collector):
        # its job is gone, so the sweep reports it too.
        assert report["enqueued"] == 1 and report["orphans"] == ["alpha/stray-999", orphaned_workload]


class TestKServeBackend:
    """KServe's Knative mode (revisions, scale to zero); Standard mode runs on the real control
    plane in tests/cluster/test_kserve.py."""

    @pytest.fixture(autouse=True)
    def knative(self, settings):
        settings.KSERVE_DEPLOYMENT_MODE = "Knative"

    def isvc(self, api, dep):
        return api.get_object(k8s.INFERENCESERVICE, dep.resource_name, "alpha")

    def test_request_approve_ready_metrics_stop_delete(self, world, cluster_api):
        dep = approved(world, backend="kserve", name="kserve-chat")
        run(dep)
        obj = self.isvc(cluster_api, dep)
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "alpha"
        assert dep.state == State.QUEUED
        operators.workload_for(cluster_api, obj, {"QuotaReserved": True, "Admitted": True})
        operators.inferenceservice_status(cluster_api, "alpha", dep.resource_name, ready=False)
        run(dep)
        assert dep.state == State.PROVISIONING
        url = f"http://{dep.resource_name}.alpha.example.com"
        operators.inferenceservice_status(cluster_api, "alpha", dep.resource_name, ready=True, url=url)
        run(dep)
        assert dep.state == State.READY and dep.endpoint_url == url + "/v1"
        version = self.isvc(cluster_api, dep)["metadata"]["resourceVersion"]
        events = dep.events.count()
        run(dep)  # idempotent: no write, no event
        assert self.isvc(cluster_api, dep)["metadata"]["resourceVersion"] == version
        assert dep.events.count() == events
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        assert reserved(world) == 0
        run(dep)
        assert self.isvc(cluster_api, dep) is None
        services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
        run(dep)
        assert dep.state == State.DELETED

    @pytest.mark.parametrize("kind", ["revision", "model"])
    def test_failures_fail_the_deployment_and_release_the_gpus(self, world, cluster_api, kind):
        dep = approved(world, backend="kserve", name="kserve-bad")
        run(dep)
        if kind == "revision":
            operators.inferenceservice_status(
                cluster_api,
                "alpha",
                dep.resource_name,
                ready=False,
                failure=("RevisionFailed", "container exited: CUDA OOM"),
            )
        else:
            operators.inferenceservice_status(
                cluster_api, "alpha", dep.resource_name, ready=False, model_failed="Repository not found"
            )
        run(dep)
        assert dep.state == State.FAILED and reserved(world) == 0
        run(dep)
        assert self.isvc(cluster_api, dep) is None

    def test_scale_to_zero_shows_in_the_badge_and_keeps_gpus(self, world, cluster_api):
        from deployments.queries import derived_badge

        dep = approved(world, backend="kserve", name="kserve-idle", min_replicas=0, max_replicas=1)
        run(dep)
        operators.inferenceservice_status(
            cluster_api, "alpha", dep.resource_name, ready=True, copies=0, url="http://idle.alpha.example.com"
        )
        run(dep)
        assert dep.state == State.READY and derived_badge(dep) == "scaled_to_zero"
        assert "Scaled to zero" in dep.status_message
        assert reserved(world) == dep.gpus_needed  # an idle deployment keeps its GPUs (documented)


class TestSweepLocal:
    def test_a_local_deployment_whose_engine_is_missing_is_re_enqueued(self, world, settings, tmp_path):
        """A lost reconcile (e.g. a failed write) must not strand a local deployment: the sweep
        compares it with its engine's state file and health, without starting anything."""
        from decimal import Decimal

        from quotas.models import GpuFlavor, TenantQuota
        from runtime.backends.local.backend import LocalBackend

        settings.KUBERNETES_URL = None
        settings.KUBECONFIG = None
        settings.LOCAL_MODEL_ROOT = "/models"
        cpu = GpuFlavor.objects.create(
            name="cpu-local",
            gpu_model="CPU",
            accelerator_type="CPU",
            gpu_memory_gib=4,
            gpus_per_node=1,
            price_per_gpu_hour=Decimal("0"),
        )
        TenantQuota.objects.create(tenant=world.alpha, flavor=cpu, nominal_gpus=1)
        LocalBackend._instance = LocalBackend(tmp_path)
        try:
            approved(world, backend="local", flavor=cpu, max_replicas=1, name="local-one", model_source="/models/tiny")
            report = sweep()
        finally:
            LocalBackend._instance = None
        assert report["enqueued"] == 1 and report["errors"] == []


class TestRequeueBackoff:
    def test_an_unchanging_queued_deployment_is_checked_less_and_less_often(self, world, settings):
        from datetime import timedelta

        from django.utils import timezone

        from deployments.reconcile import _backoff

        settings.RECONCILE_REQUEUE_SECONDS = 10
        settings.RECONCILE_REQUEUE_MAX_SECONDS = 120
        dep = approved(world)
        assert _backoff(dep) == 10  # just changed: look again soon
        dep.updated = timezone.now() - timedelta(minutes=2)
        assert _backoff(dep) == pytest.approx(30, abs=1)
        dep.updated = timezone.now() - timedelta(hours=1)
        assert _backoff(dep) == 120  # capped; the sweep still sees changes within its period


class TestStrayBackends:
    """Rows from before the backend was fixed at creation may have switched backends: the old
    object must not keep running outside the quota, nor outlive the deployment."""

    def switch_to_kserve(self, dep):
        type(dep).objects.filter(pk=dep.pk).update(backend="kserve", generation=dep.generation + 1)

    def test_a_new_spec_removes_the_object_of_the_backend_no_longer_used(self, world, cluster_api):
        dep = approved(world, max_replicas=1)
        run(dep)
        assert rayservice(cluster_api, dep) is not None
        self.switch_to_kserve(dep)
        run(dep)
        assert rayservice(cluster_api, dep) is None
        assert cluster_api.get_object(k8s.INFERENCESERVICE, dep.resource_name, "alpha") is not None

    def test_delete_removes_objects_of_every_backend_before_it_is_marked_deleted(self, world, cluster_api):
        dep = approved(world, max_replicas=1)
        run(dep)
        type(dep).objects.filter(pk=dep.pk).update(backend="kserve")  # the stray RayService stays
        services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
        for _ in range(3):
            run(dep)
        assert dep.state == State.DELETED and reserved(world) == 0
        assert rayservice(cluster_api, dep) is None
        assert cluster_api.get_object(k8s.INFERENCESERVICE, dep.resource_name, "alpha") is None

    def test_a_stop_removes_the_stray_too(self, world, cluster_api):
        dep = approved(world, max_replicas=1)
        run(dep)
        type(dep).objects.filter(pk=dep.pk).update(backend="kserve")  # the stray RayService stays
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        assert run(dep) == Result("removed")
        assert rayservice(cluster_api, dep) is None


class TestResult:
    """Like controller-runtime's Reconcile(), reconcile returns what should happen next; the task
    turns it into the follow-up."""

    def test_a_deployment_that_waits_is_looked_at_again_after_the_backoff(self, world, cluster_api, settings):
        settings.RECONCILE_REQUEUE_SECONDS = 7
        dep = approved(world)
        assert run(dep) == Result("queued", 7)

    def test_a_ready_and_converged_deployment_asks_for_nothing(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        operators.workload_for(cluster_api, rayservice(cluster_api, dep), {"QuotaReserved": True, "Admitted": True})
        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        assert run(dep) == Result("ready")

    def test_a_degraded_deployment_is_still_watched(self, world, cluster_api, settings):
        settings.RECONCILE_REQUEUE_SECONDS = 7
        dep = approved(world)
        run(dep)
        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        run(dep)
        operators.rayservice_app_status(cluster_api, "alpha", dep.resource_name, "llm", "UNHEALTHY", "replica died")
        assert run(dep) == Result("degraded", 7)

    def test_a_request_waiting_for_approval_has_nothing_to_converge(self, world, cluster_api):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        assert run(dep) == Result("nothing")
        assert rayservice(cluster_api, dep) is None


class TestTerminalErrors:
    def test_a_spec_that_no_longer_renders_is_a_condition_not_a_retry(self, world, cluster_api):
        dep = approved(world, tensor_parallel_size=2)
        world.h100.gpus_per_node = 1  # since approval the flavor's nodes shrank below the TP group
        world.h100.save()
        assert run(dep) == Result("error")
        ready = dep.condition("Ready")
        assert (ready["status"], ready["reason"]) == ("False", "ClusterError")
        assert ready["message"].startswith("Cannot render the workload: tensor_parallel_size 2 does not fit")
        assert dep.state == State.APPROVED and rayservice(cluster_api, dep) is None
        assert dep.status_message == ready["message"]

    def test_a_value_error_that_is_no_render_error_is_not_swallowed(self, world, cluster_api):
        dep = approved(world)
        type(dep).objects.filter(pk=dep.pk).update(backend="no-such-backend")
        with pytest.raises(ValueError, match="unknown backend") as raised:
            run(dep)
        assert not isinstance(raised.value, RenderError)
        assert dep.conditions == []  # nothing recorded: a bug fails the task loudly

    def test_a_permanent_refusal_while_tearing_down_is_recorded_too(self, world, cluster_api):
        dep = approved(world)
        run(dep)
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        cluster_api.fail_always(403)
        assert run(dep) == Result("error")
        assert dep.condition("Ready")["reason"] == "ClusterError" and dep.state == State.STOPPED


def follow_ups(deployment_id: int, *, since: list[dict] = ()) -> list[dict]:
    """Headers of the reconcile messages for this deployment waiting in the broker (no worker
    consumes them in these tests), less those in `since` (the broker outlives a test database
    whose ids start again)."""
    import json

    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    headers = [json.loads(raw)["headers"] for raw in broker.lrange("celery", 0, -1)]
    seen = {h["id"] for h in since}
    return [
        h
        for h in headers
        if h.get("task") == "deployments.tasks.reconcile_deployment_task"
        and h.get("argsrepr") == f"({deployment_id},)"
        and h["id"] not in seen
    ]


class TestTask:
    def reconciles(self, outcome: str) -> float:
        from core.observability import RECONCILES

        return RECONCILES.labels("kuberay", outcome)._value.get()

    def test_it_requeues_what_the_result_asks_for_once_and_counts_the_outcome(self, world, cluster_api):
        from deployments.tasks import reconcile_deployment_task

        dep = approved(world)
        before, earlier = self.reconciles("queued"), follow_ups(dep.pk)
        assert reconcile_deployment_task(dep.pk) == "queued"
        assert self.reconciles("queued") == before + 1
        [message] = follow_ups(dep.pk, since=earlier)
        assert message["eta"] is not None  # sent with a countdown: the backoff
        assert reconcile_deployment_task(dep.pk) == "queued"  # one follow-up is pending already
        assert len(follow_ups(dep.pk, since=earlier)) == 1

    def test_a_settled_deployment_gets_no_follow_up(self, world, cluster_api):
        from deployments.tasks import reconcile_deployment_task

        dep = approved(world)
        run(dep)
        operators.workload_for(cluster_api, rayservice(cluster_api, dep), {"QuotaReserved": True, "Admitted": True})
        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        earlier = follow_ups(dep.pk)
        assert reconcile_deployment_task(dep.pk) == "ready"
        assert follow_ups(dep.pk, since=earlier) == []

    def test_a_deployment_gone_from_the_database_is_skipped(self, world):
        from deployments.tasks import reconcile_deployment_task

        assert reconcile_deployment_task(987654321) is None


class TestDriftRule:
    """One rule decides drift for the cluster sweep (listed objects) and the local one."""

    @pytest.mark.parametrize(
        ("state", "observed", "converged", "exists", "generations", "drift"),
        [
            (State.READY, State.READY, True, True, (1, 1), False),
            (State.READY, State.DEGRADED, True, True, (1, 1), True),  # the workload says otherwise
            (State.READY, None, False, False, (1, 1), True),  # gone: recreate it
            (State.READY, None, False, True, (1, 1), True),  # an object of another spec
            (State.READY, State.READY, True, True, (2, 1), True),  # converged, not yet recorded
            (State.READY, State.READY, False, True, (2, 1), False),  # still rolling out: requeued
            (State.QUEUED, State.QUEUED, False, True, (1, 0), False),
            (State.STOPPED, None, False, True, (1, 1), True),  # left to remove
            (State.STOPPED, None, False, False, (1, 1), False),
            (State.FAILED, State.FAILED, True, True, (1, 1), True),
            (State.DELETING, None, False, False, (1, 1), True),  # the row must still become deleted
            (State.PENDING_APPROVAL, None, False, False, (1, 0), False),
            (State.DELETED, None, False, False, (1, 1), False),
        ],
    )
    def test_the_rule(self, state, observed, converged, exists, generations, drift):
        from deployments.models import ModelDeployment
        from deployments.reconcile import drifted

        dep = ModelDeployment(state=state, generation=generations[0], observed_generation=generations[1])
        assert drifted(dep, state=observed, converged=converged, exists=exists) is drift

    def test_the_cluster_sweep_finishes_a_deletion_whose_object_is_already_gone(self, world, cluster_api):
        dep = approved(world, max_replicas=1)
        run(dep)
        services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
        cluster_api.delete_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
        earlier = follow_ups(dep.pk)
        assert sweep()["enqueued"] == 1
        [message] = follow_ups(dep.pk, since=earlier)
        assert message["eta"] is None  # enqueued now, not as a follow-up

    def test_the_cluster_sweep_reapplies_an_object_of_an_older_spec(self, world, cluster_api):
        dep = approved(world, max_replicas=1)
        run(dep)
        operators.workload_for(cluster_api, rayservice(cluster_api, dep), {"QuotaReserved": True, "Admitted": True})
        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        run(dep)
        assert sweep()["enqueued"] == 0
        obj = rayservice(cluster_api, dep)  # edited by hand, or a reconcile of a change was lost
        obj["metadata"]["annotations"][ANNOTATION_SPEC_HASH] = "0000000000000000"
        cluster_api.put(k8s.RAYSERVICE, obj)
        assert sweep()["enqueued"] == 1
