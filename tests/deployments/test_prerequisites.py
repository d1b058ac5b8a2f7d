"""A deployment whose prerequisites are missing waits for them, then fails for good and frees its GPUs.

A real API server answers a create in a namespace that does not exist with 404 `namespaces "x"
not found` (its NamespaceLifecycle admission); the API test server stores the object anyway, so
these tests put the fault proxy in front of it for exactly that case, for as long as the
namespace is absent from its store. The demo and every onboarding path mirror the tenant to
Kueue on commit, so in practice the wait is one or two retries.
"""

from io import StringIO

import pytest
from django.core.management import call_command

from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.reconcile import FAILED_REQUEUE_SECONDS, PREREQUISITE_REASON, PREREQUISITE_RETRIES, Result
from deployments.tasks import reconcile_deployment_task
from quotas.kueue import sync_kueue
from quotas.models import QuotaReservation
from runtime import backends, k8s
from tests.deployments.test_reconcile import approved, follow_ups, rayservice, reserved, run
from tests.deployments.test_sweep_backends import _forget_presence  # noqa: F401  (autouse)
from tests.support.k8s.emulator import object_key


def namespace_missing(api, namespace: str = "alpha") -> None:
    """Writes into `namespace` answer 404 while the Namespace is not in the store (a real API
    server's answer; the check runs on the server's loop, where the store lives)."""
    key = object_key(k8s.NAMESPACE, None, namespace)

    def absent(method: str, path: str) -> bool:
        if method not in ("POST", "PATCH", "PUT") or f"/namespaces/{namespace}/" not in path:
            return False
        objects = api.emulator.objects
        return key not in objects or objects[key].deleted

    api.inject_faults(1.0, (404,), when=absent)


def backoff_elapses(dep: ModelDeployment) -> None:
    """The retry falls due: its time moves into the past (the clock is the one thing not run for real)."""
    dep.refresh_from_db()
    conditions = [{**c, "retryAt": "2000-01-01T00:00:00+00:00"} if c["type"] == "Ready" else c for c in dep.conditions]
    ModelDeployment.objects.filter(pk=dep.pk).update(conditions=conditions)


class TestNamespaceNotThereYet:
    def test_it_waits_says_what_is_missing_and_runs_once_the_tenant_is_synced(self, world, cluster_api):
        namespace_missing(cluster_api)
        dep = approved(world)
        earlier = follow_ups(dep.pk)
        assert reconcile_deployment_task(dep.pk) == "waiting"
        [retry] = follow_ups(dep.pk, since=earlier)
        assert retry["eta"] is not None  # the backoff, as a countdown
        dep.refresh_from_db()
        ready = dep.condition("Ready")
        assert (ready["status"], ready["reason"], ready["attempts"]) == ("False", PREREQUISITE_REASON, 1)
        assert ready["message"] == (
            "Namespace alpha does not exist yet: the tenant's Kueue sync creates it. "
            "Attempt 1 of 9; trying again in 2 s."
        )
        assert (dep.state, reserved(world)) == (State.APPROVED, 2)
        # The sweep's reconcile before the retry is due tries again, and does not count.
        assert run(dep).outcome == "waiting"
        assert dep.condition("Ready")["attempts"] == 1
        sync_kueue(tenant_id=world.alpha.pk)
        assert run(dep).outcome == "queued"
        assert rayservice(cluster_api, dep) is not None
        assert dep.condition("Ready")["reason"] != PREREQUISITE_REASON and "attempts" not in dep.condition("Ready")
        assert (dep.state, reserved(world)) == (State.QUEUED, 2)
        warned = DeploymentEvent.objects.filter(deployment=dep, reason=PREREQUISITE_REASON)
        assert [e.message for e in warned] == [
            "Namespace alpha does not exist yet: the tenant's Kueue sync creates it."
        ]

    def test_when_the_retries_run_out_it_fails_and_its_gpus_are_released(self, world, cluster_api):
        namespace_missing(cluster_api)
        dep = approved(world)
        delays = []
        for _ in range(PREREQUISITE_RETRIES):
            result = run(dep)
            assert (result.outcome, dep.state, reserved(world)) == ("waiting", State.APPROVED, 2)
            delays.append(result.requeue_after)
            backoff_elapses(dep)
        assert delays == [2, 4, 8, 16, 32, 64, 120, 120]  # core.tasks.RETRY's backoff
        assert run(dep) == Result(State.FAILED, FAILED_REQUEUE_SECONDS)
        assert (dep.state, dep.reserved_gpus, reserved(world)) == (State.FAILED, 0, 0)
        assert not QuotaReservation.objects.filter(owner_id=dep.pk, released__isnull=True).exists()
        failed = DeploymentEvent.objects.get(deployment=dep, to_state=State.FAILED)
        assert failed.reason == PREREQUISITE_REASON
        assert failed.message == (
            "Gave up after 9 attempts: Namespace alpha does not exist yet: the tenant's Kueue sync creates it."
        )
        assert run(dep) == Result("removed")  # the failed state's teardown; nothing was left


class TestBackendNotInstalled:
    def test_the_condition_names_the_missing_kind_and_the_request_check_learns_it(self, world, cluster_api):
        sync_kueue()
        cluster_api.undeclare(k8s.INFERENCESERVICE)
        # The API test server creates objects of an undeclared kind; a real one answers 404.
        cluster_api.inject_faults(
            1.0, (404,), when=lambda method, path: "/inferenceservices" in path and method != "GET"
        )
        dep = approved(world, backend="kserve", name="isvc", min_replicas=1, max_replicas=1)  # Standard mode: fixed
        assert run(dep).outcome == "waiting"
        assert dep.condition("Ready")["message"].startswith(
            "Backend kserve is not installed on the cluster: the cluster does not serve the InferenceService "
            "resource type (serving.kserve.io/v1beta1/inferenceservices). Attempt 1 of 9"
        )
        assert backends.not_installed("kserve").startswith("Backend 'kserve' is not installed on the cluster")


class TestTheDemo:
    @pytest.fixture
    def broker(self):
        """The task names the broker holds, oldest first, less those there before the test."""
        import json

        import redis
        from django.conf import settings

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)

        def headers() -> list[dict]:
            return [json.loads(raw)["headers"] for raw in reversed(client.lrange("celery", 0, -1))]

        before = {h["id"] for h in headers()}
        return lambda: [h["task"] for h in headers() if h["id"] not in before]

    def test_its_tenants_reach_the_cluster_on_commit_ahead_of_its_sample(
        self, db, cluster_api, broker, django_capture_on_commit_callbacks
    ):
        from quotas.tasks import sync_kueue_task

        with django_capture_on_commit_callbacks(execute=True):
            call_command("demo", stdout=StringIO())
        sent = broker()
        assert sent.index("quotas.tasks.sync_kueue_task") < sent.index("deployments.tasks.reconcile_deployment_task")
        # What a worker does with them, in that order: the sample lands in its tenant's namespace.
        namespace_missing(cluster_api, "search")
        sync_kueue_task()
        assert cluster_api.get_object(k8s.NAMESPACE, "search") is not None
        assert cluster_api.get_object(k8s.LOCALQUEUE, "search", "search") is not None
        sample = ModelDeployment.objects.get(name="llama3-70b-chat")
        assert reconcile_deployment_task(sample.pk) == "queued"
        assert cluster_api.get_object(k8s.RAYSERVICE, sample.resource_name, "search") is not None
