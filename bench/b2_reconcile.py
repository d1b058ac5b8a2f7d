"""B2 — Reconcile cost: one sweep over 1,000 unchanged deployments, and convergence of 500.

Uses the Kubernetes API test server (tests/support/k8s, kmock) started in this process; the portal
talks to it over real HTTP at its direct URL (no fault proxy in the path).

1. Sweep: 1,000 deployments in 10 namespaces, created + approved through the services,
   reconciled once (RayService created), given an admitted Workload and a ready RayService
   (tests/support/operators.py), reconciled again (-> ready, observed_generation == generation). Then
   one `sweep()`: K8s API calls by verb (Cluster.calls), requests the server saw, deployments
   re-enqueued. Targets: 20 LISTs (RayServices + Workloads per namespace), 0 writes, 0 enqueued.
   Also: API calls per single reconcile (new / unchanged-ready), from Cluster.calls.
2. Convergence: 500 newly approved deployments in 10 fresh namespaces (their reconcile messages
   queued in Redis), then a real `celery worker` subprocess (tests/e2e/workers.py, concurrency 2,
   RECONCILE_REQUEUE_SECONDS=10 as in production; --requeue-seconds to compare): time from "worker ready" until all 500
   RayServices exist and all 500 deployments are `queued`. Target: >= 20 deployments/s.

    .venv/bin/python bench/b2_reconcile.py [--sweep-deployments 1000] [--converge 500]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    NAMESPACES,
    REDIS,
    claim_redis,
    create_deployments,
    header,
    on_exit,
    row,
    seed_flavor,
    seed_tenants,
    setup_django,
)

WRITES = ("apply", "create", "delete", "patch_status", "patch")


def create_and_approve(tenants, members, admin, flavor, count: int, prefix: str) -> list[int]:
    from deployments import services

    ids = create_deployments(tenants, members, flavor, count, prefix)
    for pk in ids:
        services.deployment_approve(deployment_id=pk, revision=1, approver=admin)  # freshly created
    return ids


def calls_of(cluster, fn):
    before = Counter(cluster.calls)
    result = fn()
    after = Counter(cluster.calls)
    after.subtract(before)
    return result, +after


def sweep_rows(report: dict, queued: int, writes: int, timings: list[float]) -> None:
    """The rows both sweep benchmarks print (b2 on the emulator, b10 on the real plane)."""
    row(
        "sweep(): checked / enqueued / orphans / messages in broker",
        f"{report['checked']} / {report['enqueued']} / {len(report['orphans'])} / {queued}",
        target="enqueued 0",
    )
    row("sweep(): writes", writes, target="0")
    row("sweep() wall time, 3 runs", " / ".join(f"{t:.2f} s" for t in timings))
    row("sweep() per deployment checked (best)", f"{min(timings) / report['checked'] * 1e3:.2f} ms")


def fmt_calls(calls: Counter, per: int = 1) -> str:
    return ", ".join(f"{verb}={n / per:g}" for verb, n in sorted(calls.items())) or "none"


def purge_broker() -> None:
    import redis

    redis.Redis.from_url(REDIS).flushdb()


def make_admin():
    """A platform admin, the approver of every benchmark deployment."""
    from django.contrib.auth.models import Group, User

    from quotas.models import PLATFORM_ADMIN_GROUP

    admin = User.objects.create_user("bench-admin", password="bench-password-123")
    admin.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)[0])
    return admin


def sweep_phase(flavor, admin, count: int, *, namespaces: int = NAMESPACES, prefix: str = "sweep") -> dict:
    """Part 1 on a fresh emulator: `count` ready deployments in `namespaces` namespaces, API calls per
    reconcile, then one `sweep()` (three timed). Prints its rows; returns the figures and tenants."""
    from django.conf import settings

    from deployments.models import ModelDeployment
    from deployments.reconcile import reconcile, sweep
    from runtime import k8s
    from runtime.backends import get_cluster
    from tests.support import operators
    from tests.support.k8s import K8sApiServer

    server = K8sApiServer().start()
    on_exit(server.stop)
    settings.KUBERNETES_URL = server.direct_url
    cluster = get_cluster()

    tenants, members = seed_tenants(prefix, flavor, count=namespaces)
    started = time.perf_counter()
    ids = create_and_approve(tenants, members, admin, flavor, count, "s")
    seed_create = time.perf_counter() - started
    load = lambda pk: ModelDeployment.objects.select_related("tenant", "flavor").get(pk=pk)  # noqa: E731

    # Seed the cluster side directly in the server's store (no HTTP): the RayService exactly as the
    # portal renders it (spec-hash annotations included), an admitted Workload and a ready status,
    # then record in the database what a reconcile would observe from those objects. Reconciling
    # 2,000 times over HTTP instead is slow only because kmock scans its whole store per request.
    from deployments.reconcile import _record
    from deployments.specs import deployment_spec
    from runtime.backends import get_backend

    backend = get_backend("kuberay")
    started = time.perf_counter()
    for pk in ids:
        dep = load(pk)
        spec = deployment_spec(dep)
        obj = server.put(k8s.RAYSERVICE, backend.desired(spec))
        operators.workload_for(server, obj, {"QuotaReserved": True, "Admitted": True})
        obj = operators.rayservice_ready(server, dep.tenant.namespace, dep.resource_name)
        workloads = {
            obj["metadata"]["uid"]: server.get_object(k8s.WORKLOAD, operators.workload_name(obj), dep.tenant.namespace)
        }
        obs = backend.sweep_observation(spec, obj, workloads)
        obs.endpoint_url, obs.metrics_url = backend.urls(spec)
        _record(dep, obs, spec_generation=spec.generation)
    seed_cluster = time.perf_counter() - started
    states = Counter(ModelDeployment.objects.filter(pk__in=ids).values_list("state", flat=True))
    unconverged = ModelDeployment.objects.filter(pk__in=ids, observed_generation__lt=1).count()
    assert states == Counter({"ready": len(ids)}) and not unconverged, (states, unconverged)
    # single reconciles over HTTP, counted with Cluster.calls
    steady, steady_calls = calls_of(cluster, lambda: reconcile(load(ids[0])))
    probe = create_and_approve(tenants, members, admin, flavor, 1, "probe")[0]
    new_state, first_calls = calls_of(cluster, lambda: reconcile(load(probe)))
    probe_dep = load(probe)
    obj = server.get_object(k8s.RAYSERVICE, probe_dep.resource_name, probe_dep.tenant.namespace)
    operators.workload_for(server, obj, {"QuotaReserved": True, "Admitted": True})
    operators.rayservice_ready(server, probe_dep.tenant.namespace, probe_dep.resource_name)
    ready_state, second_calls = calls_of(cluster, lambda: reconcile(load(probe)))
    purge_broker()  # requeues sent by the reconciles above; no worker consumes them here
    row(
        "seeded: create + approve through services",
        f"{len(ids)} deployments in {namespaces} namespaces, {seed_create:.0f} s; cluster objects + "
        f"recorded observation {seed_cluster:.0f} s; states {dict(states)}",
    )
    row(f"API calls per reconcile: new ('{new_state}')", fmt_calls(first_calls))
    row(f"API calls per reconcile: admitted + ready ('{ready_state}')", fmt_calls(second_calls))
    row(f"API calls per reconcile: ready, unchanged ('{steady}')", fmt_calls(steady_calls))

    import redis

    broker = redis.Redis.from_url(REDIS)
    server_before = len(server.requests())
    timings = []
    for attempt in range(3):
        started = time.perf_counter()
        report, calls = calls_of(cluster, sweep)
        timings.append(time.perf_counter() - started)
        if attempt == 0:
            first_report, first_calls_sweep = report, calls
            server_seen = Counter(method for method, _ in server.requests()[server_before:])
            queued = broker.llen("celery")
    writes = sum(n for verb, n in first_calls_sweep.items() if verb in WRITES)
    row("sweep(): Cluster.calls", fmt_calls(first_calls_sweep), target=f"list = {2 * namespaces}, no writes")
    row("sweep(): requests the API server saw, by method", dict(server_seen))
    sweep_rows(first_report, queued, writes, timings)
    server.stop()
    return {
        "calls": first_calls_sweep,
        "writes": writes,
        "report": first_report,
        "timings": timings,
        "namespaces": namespaces,
        "per_reconcile": {"new": first_calls, "ready": second_calls, "unchanged": steady_calls},
        "tenants": tenants,
    }


def converge_phase(
    flavor,
    admin,
    count: int,
    *,
    requeue_seconds: str = "10",
    deadline: float = 600,
    namespaces: int = NAMESPACES,
    prefix: str = "conv",
) -> dict:
    """Part 2 on a second, empty emulator: `count` approved deployments (messages queued), then a
    real worker until all are `queued` with their RayService. Prints its rows; returns the figures."""
    import redis

    from deployments.models import ModelDeployment
    from runtime import k8s
    from tests.support.k8s import K8sApiServer
    from tests.support.processes import celery_worker

    broker = redis.Redis.from_url(REDIS)
    server = K8sApiServer().start()  # empty store: kmock's per-request cost grows with its store
    on_exit(server.stop)
    tenants2, members2 = seed_tenants(prefix, flavor, count=namespaces)
    started = time.perf_counter()
    new_ids = create_and_approve(tenants2, members2, admin, flavor, count, "c")
    row(
        "approved (worker stopped; reconcile messages queued)",
        f"{len(new_ids)} in {time.perf_counter() - started:.0f} s, {broker.llen('celery')} messages in the broker",
    )
    server_before = len(server.requests())
    with tempfile.TemporaryDirectory(prefix="bench-b2-") as tmp:
        spawn = time.perf_counter()
        with celery_worker(
            Path(tmp) / "worker.log",
            concurrency=2,
            env={
                "KUBERNETES_URL": server.direct_url,
                "RECONCILE_REQUEUE_SECONDS": requeue_seconds,
                "LOG_LEVEL": "INFO",
            },
        ):
            ready_at = time.perf_counter()
            pending = ModelDeployment.objects.filter(pk__in=new_ids).exclude(state="queued")
            give_up = ready_at + deadline
            progress = []  # (seconds after ready, converged)
            while pending.exists():
                now = time.perf_counter()
                if not progress or now - ready_at - progress[-1][0] >= 10:
                    progress.append((now - ready_at, len(new_ids) - pending.count()))
                if now > give_up:
                    print("   progress (s after worker ready, converged):", progress)
                    raise SystemExit(
                        f"not converged after {deadline} s: {pending.count()} left; "
                        f"{progress[-1][1] / progress[-1][0]:.1f} /s on average"
                    )
                time.sleep(0.1)
            done_at = time.perf_counter()
            print("   progress (s after worker ready, converged):", progress)
            seen = server.requests()[server_before:]
    existing = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in server.list_objects(k8s.RAYSERVICE)}
    deps = ModelDeployment.objects.filter(pk__in=new_ids).select_related("tenant")
    missing = sum((d.tenant.namespace, d.resource_name) not in existing for d in deps)
    assert missing == 0, f"{missing} RayServices missing"
    rate = len(new_ids) / (done_at - ready_at)
    row("worker start -> ready", f"{ready_at - spawn:.1f} s")
    row(
        f"convergence (RECONCILE_REQUEUE_SECONDS={requeue_seconds}): {len(new_ids)} queued + RayServices exist",
        f"{done_at - ready_at:.1f} s after worker ready = {rate:.1f} /s "
        f"({len(new_ids) / (done_at - spawn):.1f} /s from worker spawn)",
        target=">= 20 /s",
    )
    by_method = Counter(method for method, _ in seen)
    row(
        "API requests the server saw per converged deployment",
        ", ".join(f"{m}={n / len(new_ids):.2f}" for m, n in sorted(by_method.items())),
    )
    server.stop()
    return {
        "count": len(new_ids),
        "seconds": done_at - ready_at,
        "rate": rate,
        "rate_from_spawn": len(new_ids) / (done_at - spawn),
        "requests": by_method,
        "tenants": tenants2,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep-deployments", type=int, default=1000)
    parser.add_argument("--converge", type=int, default=500)
    parser.add_argument(
        "--requeue-seconds", default="10", help="RECONCILE_REQUEUE_SECONDS for the worker (production default 10)"
    )
    parser.add_argument("--deadline", type=int, default=600)
    args = parser.parse_args()

    claim_redis()
    setup_django("b2")
    header(f"B2 reconcile cost: sweep over {args.sweep_deployments}, convergence of {args.converge}")

    flavor = seed_flavor()
    admin = make_admin()
    sweep_phase(flavor, admin, args.sweep_deployments)  # 1. sweep over unchanged deployments
    # 2. convergence through a real worker
    converge_phase(flavor, admin, args.converge, requeue_seconds=args.requeue_seconds, deadline=args.deadline)


if __name__ == "__main__":
    main()
