"""Faults with real processes: a Kubernetes API that fails a share of calls, a Celery worker
killed with SIGKILL mid-reconcile, a Redis broker restarted while approvals happen. In each case
the deployments converge (each with exactly one RayService) and the quota invariant holds."""

from __future__ import annotations

import contextlib
import signal
import time

import pytest
import requests

from deployments import services
from deployments.models import ModelDeployment
from runtime import k8s
from tests.e2e.workers import purge_broker
from tests.reliability.conftest import Api, draft, knob, quota_violations
from tests.support import operators
from tests.support.k8s import DROP, HANG
from tests.support.processes import celery_worker, free_port, kill_group, portal_process, wait_for, web_server

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _state(dep_id: int) -> str:
    return ModelDeployment.objects.get(pk=dep_id).state


def _make_ready(k8s_api, dep: ModelDeployment) -> None:
    """Kueue admits and KubeRay reports ready, as the real controllers would."""
    obj = k8s_api.get_object(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)
    operators.workload_for(k8s_api, obj, {"QuotaReserved": True, "Admitted": True})
    operators.rayservice_ready(k8s_api, dep.tenant.namespace, dep.resource_name)


def _rayservices(k8s_api, dep: ModelDeployment) -> list[dict]:
    return [
        o
        for o in k8s_api.list_objects(k8s.RAYSERVICE, dep.tenant.namespace)
        if o["metadata"]["name"] == dep.resource_name
    ]


def beat(tmp_path, env: dict[str, str]):
    """Celery beat with the project's schedule (sweep, Kueue sync, scrape) in a local file."""
    args = [
        "celery",
        "-A",
        "portal",
        "beat",
        "--loglevel=INFO",
        "--scheduler",
        "celery.beat:PersistentScheduler",
        "--schedule",
        str(tmp_path / "beat-schedule"),
    ]
    return portal_process(args, tmp_path / "beat.log", env=env, ready="beat: Starting")


def _create_and_approve(world, name: str, **overrides) -> ModelDeployment:
    dep = services.deployment_create(
        tenant=world.alpha, user=world.users["member"], data={**draft(name, **overrides), "flavor": world.h100}
    )
    return services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )


class TestKubernetesApiFaults:
    def test_a_worker_converges_every_deployment_while_calls_fail(self, tx_world, k8s_api, tmp_path, capsys):
        n = int(knob("REL_FAULT_DEPLOYMENTS", 4))
        share = float(knob("REL_FAULT_SHARE", 0.2))
        purge_broker()
        k8s_api.inject_faults(share, (500, 429, HANG, DROP), seed=7)
        started = time.monotonic()
        env = {"KUBERNETES_URL": k8s_api.url, "KUBERNETES_TIMEOUT_SECONDS": "1", "RECONCILE_SWEEP_SECONDS": "5"}
        # Retries alone back off to 64-120 s per task (retry_backoff_max); in production the beat
        # sweep re-enqueues whatever drifted, so run it here too, as deployed (every 5 s).
        with celery_worker(tmp_path / "worker.log", env=env) as proc, beat(tmp_path, env):
            deps = [_create_and_approve(tx_world, f"faulty-{i}") for i in range(n)]
            for dep in deps:  # the RayService exists and Kueue's verdict was read back
                wait_for(lambda d=dep: _state(d.pk) == "queued", timeout=180, what=f"{dep.name} queued")
                _make_ready(k8s_api, dep)
            for dep in deps:
                wait_for(lambda d=dep: _state(d.pk) == "ready", timeout=180, what=f"{dep.name} ready")
            log = proc.log_path.read_text()
            sweeps = (tmp_path / "beat.log").read_text().count("deployments.tasks.sweep_task")
        elapsed = time.monotonic() - started
        injected = k8s_api.injected
        k8s_api.clear_faults()
        assert sum(injected.values()) > 0, "no fault was injected: the test proved nothing"
        for dep in deps:
            dep.refresh_from_db()
            assert dep.observed_generation == dep.generation
            assert len(_rayservices(k8s_api, dep)) == 1
        gave_up = [line for line in log.splitlines() if "reconcile_deployment_task" in line and "raised" in line]
        assert gave_up == [], gave_up[:3]  # no reconcile ran out of retries
        assert quota_violations() == []
        with capsys.disabled():
            print(
                f"\n[k8s-faults] {n} deployments ready in {elapsed:.0f}s with {share:.0%} of API calls failing; "
                f"injected {dict(injected)}; {log.count('Retry in')} task retries; "
                f"{k8s_api.proxy.forwarded} calls forwarded; {sweeps} sweeps sent"
            )


class TestWorkerKilledMidReconcile:
    def test_the_task_is_redelivered_and_converges_with_one_rayservice(self, tx_world, k8s_api, tmp_path, capsys):
        purge_broker()
        k8s_api.fail_always(HANG)  # the first reconcile hangs inside an API call
        visibility = {"CELERY_VISIBILITY_TIMEOUT": "10"}
        first_env = {"KUBERNETES_URL": k8s_api.url, "KUBERNETES_TIMEOUT_SECONDS": "60", **visibility}
        with celery_worker(tmp_path / "worker-1.log", env=first_env) as first:
            dep = _create_and_approve(tx_world, "killed")
            wait_for(lambda: k8s_api.injected[HANG] > 0, timeout=60, what="the worker to hang in an API call")
            delivered_at = killed_at = time.monotonic()
            kill_group(first, signal.SIGKILL)  # the whole worker: main process and pool children
        assert first.returncode == -signal.SIGKILL
        k8s_api.clear_faults()
        assert _rayservices(k8s_api, dep) == [] and _state(dep.pk) == "approved"
        # kombu scans for expired unacked messages when a worker starts and then only every
        # unacked_restore_interval x unacked_restore_throttle (10 x 10 s): start the replacement
        # once the visibility timeout has passed, as a restarted pod usually would.
        time.sleep(max(0.0, delivered_at + 11 - time.monotonic()))
        second_env = {"KUBERNETES_URL": k8s_api.url, "KUBERNETES_TIMEOUT_SECONDS": "2", **visibility}
        with celery_worker(tmp_path / "worker-2.log", env=second_env):
            wait_for(lambda: _state(dep.pk) == "queued", timeout=90, what="redelivery and reconcile")
            redelivered_after = time.monotonic() - killed_at
            dep.refresh_from_db()
            _make_ready(k8s_api, dep)
            wait_for(lambda: _state(dep.pk) == "ready", timeout=60, what="ready")
        assert len(_rayservices(k8s_api, dep)) == 1
        assert quota_violations() == []
        with capsys.disabled():
            print(
                f"\n[sigkill] reconcile redelivered to a new worker {redelivered_after:.0f}s after kill -9 "
                f"(visibility timeout 10s); one RayService; ready"
            )


class TestBrokerRestart:
    def test_approvals_while_redis_is_down_are_not_lost_and_readyz_follows_the_broker(
        self, tx_world, k8s_api, private_redis, tmp_path, capsys
    ):
        port = free_port()
        env = {
            "CELERY_BROKER_URL": private_redis.url,
            "KUBERNETES_URL": k8s_api.url,
            "KUBERNETES_TIMEOUT_SECONDS": "2",
            "RECONCILE_SWEEP_SECONDS": "2",
            "HTTPS": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
        }
        base = f"http://127.0.0.1:{port}"
        member = Api(base, tx_world.users["member"])
        admin = Api(base, tx_world.users["platform_admin"])
        with contextlib.ExitStack() as stack:
            stack.enter_context(web_server(tmp_path / "web.log", port, env=env))
            first_worker = stack.enter_context(celery_worker(tmp_path / "worker.log", env=env))
            stack.enter_context(beat(tmp_path, env))
            assert requests.get(f"{base}/readyz", timeout=10).status_code == 200

            def request_and_approve(name: str):
                created = member.post("/api/v1/deployments/", draft(name))
                assert created.status_code == 201, created.text[:300]
                approved = admin.post(
                    f"/api/v1/deployments/{created.json()['id']}/approve/", {"reason": name, "revision": 1}
                )
                return created.json()["id"], approved

            before_id, approved = request_and_approve("before-outage")
            assert approved.status_code == 200
            wait_for(lambda: _state(before_id) == "queued", timeout=60, what="the first deployment in the cluster")

            private_redis.stop()
            # Anonymous callers get the verdict only; a platform admin's token also gets the checks.
            assert requests.get(f"{base}/readyz", timeout=30).json() == {"status": "unavailable"}
            down = admin.get("/readyz", timeout=30)
            assert down.status_code == 503 and down.json()["checks"]["broker"] != "ok", down.text
            assert down.json()["checks"]["database"] == "ok"
            during_id, approved = request_and_approve("during-outage")
            # The approval is committed before the enqueue is tried: the API says so (no 5xx).
            assert approved.status_code == 200, approved.text[:300]
            assert _state(during_id) == "approved"
            outage_started = time.monotonic()

            private_redis.start()  # empty: the enqueue made during the outage is gone for good
            wait_for(
                lambda: requests.get(f"{base}/readyz", timeout=10).status_code == 200,
                timeout=60,
                what="readyz to recover",
            )
            # celery 5.7 / kombu 5.7: a worker that loses its Redis connection while holding an
            # unacked message dies ("Unrecoverable error: AttributeError … 'hostname'"); the
            # container's restart policy (docker-compose: unless-stopped; a Deployment) starts a
            # new one (the dying process may also linger without consuming: a liveness probe
            # has to catch that). Do what the supervisor does, and report it.
            worker_died = (
                first_worker.poll() is not None or "Unrecoverable error" in (tmp_path / "worker.log").read_text()
            )
            if worker_died:
                kill_group(first_worker, signal.SIGKILL)  # it may linger after the error: end it
                stack.enter_context(celery_worker(tmp_path / "worker-restarted.log", env=env))
            wait_for(
                lambda: _state(during_id) == "queued",
                timeout=120,
                what="the beat sweep to re-enqueue the deployment approved during the outage",
            )
            recovered_after = time.monotonic() - outage_started
        during = ModelDeployment.objects.get(pk=during_id)
        assert len(_rayservices(k8s_api, during)) == 1
        assert quota_violations() == []
        with capsys.disabled():
            print(
                f"\n[redis-restart] readyz 503 while down, 200 after; the approval made during the outage "
                f"reached the cluster {recovered_after:.0f}s after Redis came back (sweep every 2s); "
                f"worker {'died on the connection loss and was restarted' if worker_died else 'survived'}"
            )
