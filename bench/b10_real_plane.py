"""B10 — the portal on the real control plane, beside the emulator in the same run.

The harness's control plane (tests/support/controlplane: etcd, API server, controller manager,
scheduler, KWOK, Kueue, KubeRay, the stand-in Ray head), the portal as its own ServiceAccount
(identity.py). T tenants are onboarded (Kueue objects, claims) with KWOK nodes (M GPU nodes, CPU
nodes for the heads); N deployments are created, a real `celery worker` is started, the N are
approved one after another through the services, and this process sends the beat's sweep task
every RECONCILE_SWEEP_SECONDS as `celery beat` would. Measured:
1. convergence: RayServices created and deployments `ready` per second, from the first approval;
2. per deployment, approval -> Ready in the portal split into the portal's part (approved ->
   RayService created; RayService Ready -> `ready` recorded) and the cluster's (-> Workload
   Admitted: Kueue; -> all pods Running: scheduler, KWOK; -> RayService Ready: KubeRay and the
   head), from watches this process holds (sub-second), from the objects' own timestamps (1 s
   resolution) and from the portal's records (DeploymentEvent, DeploymentPhase);
3. one `sweep()` when nothing changed: Cluster.calls by verb, LISTs per namespace, writes, wall;
4. the API server's resident memory at the end (/proc/<pid>/status).
The emulator's sweep and convergence (bench/b2_reconcile.py's phases, same N and T) run first.

    .venv/bin/python bench/b10_real_plane.py [--deployments 1000] [--nodes 500] [--tenants 50]

Needs root (the pod network namespace) and ../shared/k8s's binaries.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    REDIS,
    claim_redis,
    cpu_seconds,
    create_deployments,
    forget_tenants,
    group_pids,
    header,
    pct,
    row,
    rss_kib,
    seed_flavor,
    seed_tenants,
    setup_django,
)
from b2_reconcile import (  # noqa: E402
    WRITES,
    calls_of,
    converge_phase,
    create_and_approve,
    fmt_calls,
    make_admin,
    purge_broker,
    sweep_phase,
    sweep_rows,
)

HEADS_PER_CPU_NODE = 40  # a head asks for 2 CPUs of a 96-CPU node; a node's /26 holds 64 pod IPs
WATCHED = {
    "rayservice": "/apis/ray.io/v1/rayservices",
    "workload": "/apis/kueue.x-k8s.io/v1beta2/workloads",
    "pod": "/api/v1/pods",
}


# --- what this process sees of the cluster, as it happens ---------------------------------------


class Watch(threading.Thread):
    """One watch over all namespaces: when each object was first seen, when each of its
    conditions was first seen True and (pods) when it was first seen Running, by this host's
    clock; plus its labels and owners, to tie it to a deployment afterwards."""

    def __init__(self, plane, path: str) -> None:
        super().__init__(daemon=True, name=f"watch {path}")
        self.plane, self.path = plane, path
        self.seen: dict[tuple[str, str], float] = {}
        self.true_at: dict[tuple[str, str, str], float] = {}
        self.running_at: dict[tuple[str, str], float] = {}
        self.meta: dict[tuple[str, str], dict] = {}
        self.events = 0
        self.errors: list[str] = []
        self.stopped = threading.Event()
        self.conn: http.client.HTTPSConnection | None = None

    def run(self) -> None:
        context = ssl.create_default_context(cafile=str(self.plane.ca))
        version = ""
        while not self.stopped.is_set():
            query = "watch=1&timeoutSeconds=900" + (f"&resourceVersion={version}" if version else "")
            self.conn = http.client.HTTPSConnection("127.0.0.1", self.plane.ports["api"], context=context, timeout=960)
            try:
                self.conn.request(
                    "GET", f"{self.path}?{query}", headers={"Authorization": f"Bearer {self.plane.admin_token}"}
                )
                for line in self.conn.getresponse():
                    event = json.loads(line)
                    if event.get("type") == "ERROR":  # e.g. 410 Gone: start over from now
                        version = ""
                        break
                    version = self._note(event["object"]) or version
            except Exception as error:  # noqa: BLE001 - a dropped stream is reopened; the error kept
                if not self.stopped.is_set():
                    self.errors.append(repr(error))
                    time.sleep(0.5)
            finally:
                self.conn.close()

    def stop(self) -> None:
        """End the stream now: an API server with a watch open waits 20 s or more to exit."""
        self.stopped.set()
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):  # not connected (yet, or any more)
            pass
        if self.is_alive():
            self.join(5)

    def _note(self, obj: dict) -> str:
        now = time.time()
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        self.events += 1
        self.seen.setdefault(key, now)
        self.meta[key] = {
            "labels": meta.get("labels") or {},
            "owners": [o.get("name") for o in meta.get("ownerReferences") or []],
        }
        status = obj.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("status") == "True":
                self.true_at.setdefault((*key, cond.get("type")), now)
        if status.get("phase") == "Running":
            self.running_at.setdefault(key, now)
        return meta.get("resourceVersion", "")


def stamp(value: str | None) -> float | None:
    """An API server timestamp (RFC 3339, whole seconds) as epoch seconds."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def true_since(obj: dict, kind: str) -> float | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return stamp(cond.get("lastTransitionTime"))
    return None


def latest(values) -> float | None:
    values = list(values)
    return max(values) if values and None not in values else None


# --- per deployment: where the time goes ----------------------------------------------------------

PARTS = (
    ("portal: approved -> RayService created", "approved", "created"),
    ("cluster: created -> Workload Admitted (Kueue)", "created", "admitted"),
    ("cluster: Admitted -> pods Running (scheduler, KWOK)", "admitted", "running"),
    ("cluster: pods Running -> RayService Ready (KubeRay)", "running", "rs_ready"),
    ("portal: RayService Ready -> portal `ready`", "rs_ready", "ready"),
)


def moments(deps, watches: dict[str, Watch], kube) -> tuple[dict, dict]:
    """Per deployment id, two sets of moments (epoch seconds): from the watches and from the
    objects' own timestamps; `approved` and `ready` from the portal's events in both."""
    from deployments.models import DeploymentEvent
    from runtime import k8s
    from runtime.manifests.common import LABEL_DEPLOYMENT_ID

    portal: dict[int, dict[str, float]] = {}
    rows = DeploymentEvent.objects.filter(deployment__in=deps, to_state__in=("approved", "ready"))
    for dep_id, to_state, created in rows.order_by("created", "id").values_list("deployment_id", "to_state", "created"):
        portal.setdefault(dep_id, {}).setdefault(to_state, created.timestamp())
    by_name = {(d.tenant.namespace, d.resource_name): d.pk for d in deps}
    rs, wl, pod = watches["rayservice"], watches["workload"], watches["pod"]
    pod_meta, wl_meta = dict(pod.meta), dict(wl.meta)  # the watches still run: take copies
    pods_of: dict[int, list[tuple[str, str]]] = {}
    for key, meta in pod_meta.items():
        dep_id = meta["labels"].get(LABEL_DEPLOYMENT_ID)
        if dep_id is not None:
            pods_of.setdefault(int(dep_id), []).append(key)
    workload_of = {
        by_name[(key[0], owner)]: key
        for key, meta in wl_meta.items()
        for owner in meta["owners"]
        if (key[0], owner) in by_name
    }
    watched: dict[int, dict] = {}
    for (namespace, name), dep_id in by_name.items():
        wkey = workload_of.get(dep_id)
        watched[dep_id] = {
            **portal.get(dep_id, {}),
            "created": rs.seen.get((namespace, name)),
            "admitted": wl.true_at.get((*wkey, "Admitted")) if wkey else None,
            "running": latest(pod.running_at.get(k) for k in pods_of.get(dep_id, [])) if pods_of.get(dep_id) else None,
            "rs_ready": rs.true_at.get((namespace, name, "Ready")),
        }
    # the objects' own timestamps, read once at the end
    stamped: dict[int, dict] = {}
    for ns in sorted({ns for ns, _ in by_name}):
        pods = kube.pods(ns)
        owned = {
            o.get("name"): w for w in kube.list(k8s.WORKLOAD, ns) for o in w["metadata"].get("ownerReferences") or []
        }
        for obj in kube.list(k8s.RAYSERVICE, ns):
            dep_id = by_name.get((ns, obj["metadata"]["name"]))
            if dep_id is None:
                continue
            workload = owned.get(obj["metadata"]["name"])
            mine = [p for p in pods if p["metadata"].get("labels", {}).get(LABEL_DEPLOYMENT_ID) == str(dep_id)]
            stamped[dep_id] = {
                **portal.get(dep_id, {}),
                "created": stamp(obj["metadata"].get("creationTimestamp")),
                "admitted": true_since(workload, "Admitted") if workload else None,
                "running": latest(true_since(p, "Ready") for p in mine) if mine else None,
                "rs_ready": true_since(obj, "Ready"),
            }
    return watched, stamped


def spread(values: list[float]) -> str:
    """'median / p90' of `values`, in seconds."""
    return f"{statistics.median(values):.2f} / {pct(values, 90):.2f}" if values else "none"


def report_parts(title: str, marks: dict[int, dict]) -> None:
    """Median and p90 of each part, of the portal's share and of the whole."""
    print(f"   -- {title} (median / p90 over deployments, seconds)")
    for label, start, end in PARTS:
        values = [m[end] - m[start] for m in marks.values() if m.get(start) is not None and m.get(end) is not None]
        row(f"  {label}", spread(values) + (f" (n={len(values)})" if len(values) < len(marks) else ""))
    complete = [
        m for m in marks.values() if None not in (m.get(k) for k in ("approved", "created", "rs_ready", "ready"))
    ]
    share = [(m["created"] - m["approved"]) + (m["ready"] - m["rs_ready"]) for m in complete]
    row("  portal's part (sum of its two parts)", spread(share), target="<= 5 s")
    row("  approved -> portal `ready`, whole", spread([m["ready"] - m["approved"] for m in complete]))


def recorded_phases(deps) -> None:
    """The portal's own startup phases (DeploymentPhase), as its deployment page shows them."""
    from deployments.models import DeploymentPhase

    marks: dict[int, dict[str, float]] = {}
    rows = DeploymentPhase.objects.filter(deployment__in=deps).values_list("deployment_id", "name", "at")
    for dep_id, name, at in rows:
        marks.setdefault(dep_id, {})[name] = at.timestamp()
    seen = Counter(name for m in marks.values() for name in m)
    print(f"   -- the portal's recorded phases (DeploymentPhase; markers seen: {dict(sorted(seen.items()))})")
    steps = ("approved", "queued", "admitted", "engine_ready", "ready")
    for start, end in [*zip(steps, steps[1:], strict=False), ("approved", "ready")]:
        values = [m[end] - m[start] for m in marks.values() if start in m and end in m]
        row(f"  {start} -> {end}", f"{spread(values)} (n={len(values)})")


# --- the run -------------------------------------------------------------------------------


def cpu_now(plane, worker) -> dict[str, float]:
    """CPU seconds used so far: the control plane's processes, the worker's group, this process."""
    return {
        "control plane": cpu_seconds([p.pid for p in plane.procs.values() if p.pid]),
        "worker": cpu_seconds(group_pids(worker.pid)),
        "this process (approvals, watches)": sum(os.times()[:2]),
    }


def converge_real(plane, kube, flavor, admin, args, watches: dict[str, Watch]) -> dict:
    from deployments import services
    from deployments.models import ModelDeployment
    from deployments.tasks import sweep_task
    from quotas.models import GpuFlavor
    from runtime.manifests.kueue import render_cpu_resource_flavor
    from runtime.platform import platform_spec
    from tests.cluster.chain import onboard
    from tests.support.processes import celery_worker

    tenants, members = seed_tenants("b10", flavor, count=args.tenants)
    started = time.perf_counter()  # Kueue objects and claims, M GPU nodes, a CPU node per 40 heads
    onboard(kube, GpuFlavor.objects.get(pk=flavor.pk), gpu_nodes=args.nodes, gpus=flavor.gpus_per_node)
    cpu_nodes = max(1, math.ceil(args.deployments / HEADS_PER_CPU_NODE))
    if cpu_nodes > 1:
        kube.nodes_for_flavor(render_cpu_resource_flavor(platform_spec()), count=cpu_nodes - 1, gpus=0)
    row(
        "onboarded: Kueue objects, claims, KWOK nodes",
        f"{args.tenants} tenants, {args.nodes} GPU nodes x {flavor.gpus_per_node} GPUs + {cpu_nodes} CPU nodes, "
        f"{time.perf_counter() - started:.0f} s",
    )
    ids = create_deployments(tenants, members, flavor, args.deployments, "d")
    deps = list(ModelDeployment.objects.filter(pk__in=ids).select_related("tenant"))
    for watch in watches.values():
        watch.start()
    with tempfile.TemporaryDirectory(prefix="bench-b10-") as tmp:
        spawn = time.perf_counter()
        worker_env = {
            "KUBECONFIG": str(plane.portal_kubeconfig),
            "KUBERNETES_TIMEOUT_SECONDS": "30",
            "RECONCILE_REQUEUE_SECONDS": args.requeue_seconds,
            "LOG_LEVEL": "INFO",
        }
        with celery_worker(Path(tmp) / "worker.log", concurrency=args.concurrency, env=worker_env) as worker:
            row("worker start -> ready", f"{time.perf_counter() - spawn:.1f} s")
            cpu_before = cpu_now(plane, worker)
            first = time.time()
            for pk in ids:
                services.deployment_approve(deployment_id=pk, revision=1, approver=admin)
            approved = time.time() - first
            pending = ModelDeployment.objects.filter(pk__in=ids).exclude(state="ready")
            progress, last_sweep, all_created = [], time.time(), None
            while True:
                now = time.time()
                left = pending.count()
                created = len(watches["rayservice"].seen)  # only the portal makes RayServices here
                if all_created is None and created >= len(ids):
                    all_created = now - first
                if not progress or now - first - progress[-1][0] >= 15:
                    progress.append((round(now - first), created, len(ids) - left))
                if not left:
                    break
                if now - first > args.deadline:
                    print("   progress (s after first approval, RayServices, ready):", progress)
                    states = Counter(ModelDeployment.objects.filter(pk__in=ids).values_list("state", flat=True))
                    raise SystemExit(
                        f"not all ready after {args.deadline} s: {left} left, states {dict(states)}\n{kube.story()}"
                    )
                if now - last_sweep >= args.sweep_seconds:  # what celery beat sends
                    sweep_task.delay()
                    last_sweep = now
                time.sleep(0.5)
            done = time.time() - first
            cpu_after = cpu_now(plane, worker)
            print("   progress (s after first approval, RayServices, ready):", progress)
    row(f"approved {len(ids)} (worker running), one after another", f"{approved:.1f} s")
    row(
        "all RayServices exist, after the first approval",
        f"{all_created:.1f} s = {len(ids) / all_created:.1f} /s",
        target=">= 20 /s",
    )
    row("all deployments `ready`, after the first approval", f"{done:.1f} s = {len(ids) / done:.2f} /s")
    row(
        f"CPU seconds meanwhile ({os.cpu_count()} cores x {done:.0f} s)",
        ", ".join(f"{name} {cpu_after[name] - cpu_before[name]:.0f}" for name in cpu_after),
    )
    row("watch events seen (rayservices / workloads / pods)", " / ".join(str(w.events) for w in watches.values()))
    errors = [e for w in watches.values() for e in w.errors]
    if errors:
        row("watch streams reopened", f"{len(errors)}: {errors[:3]}")
    watched, stamped = moments(deps, watches, kube)
    for watch in watches.values():
        watch.stop()
    report_parts("from this process's watches (sub-second) and the portal's events", watched)
    report_parts("from the objects' timestamps (1 s resolution) and the portal's events", stamped)
    recorded_phases(deps)
    return {
        "ids": ids,
        "tenants": tenants,
        "members": members,
        "created_rate": len(ids) / all_created,
    }


def sweep_real(args, real: dict, flavor, admin) -> dict:
    """One sweep over the ready, unchanged fleet (three timed), counted with Cluster.calls; then
    one more deployment's first reconcile, in this process, on the now quiet cluster."""
    import redis

    from deployments.models import ModelDeployment
    from deployments.reconcile import reconcile, sweep
    from runtime.backends import get_cluster

    cluster = get_cluster()
    purge_broker()
    load = lambda pk: ModelDeployment.objects.select_related("tenant", "flavor").get(pk=pk)  # noqa: E731
    dep = load(real["ids"][0])
    outcome, calls = calls_of(cluster, lambda: reconcile(dep))
    row(f"API calls per reconcile: ready, unchanged ('{outcome.outcome}')", fmt_calls(calls))
    purge_broker()
    timings = []
    for attempt in range(3):
        started = time.perf_counter()
        report, calls = calls_of(cluster, sweep)
        timings.append(time.perf_counter() - started)
        if attempt == 0:
            first_report, first_calls = report, calls
            queued = redis.Redis.from_url(REDIS).llen("celery")
    writes = sum(n for verb, n in first_calls.items() if verb in WRITES)
    row("sweep(): Cluster.calls", fmt_calls(first_calls), target=f"list <= {2 * args.tenants}, no writes")
    row("sweep(): LIST per namespace", f"{first_calls['list'] / args.tenants:.2f}", target="<= 2")
    sweep_rows(first_report, queued, writes, timings)
    probe = create_and_approve(real["tenants"][:1], real["members"][:1], admin, flavor, 1, "probe")[0]
    purge_broker()  # its reconcile message: run here instead
    started = time.perf_counter()
    result, calls = calls_of(cluster, lambda: reconcile(load(probe)))
    row(
        f"one new deployment's first reconcile ('{result.outcome}'), quiet cluster",
        f"{(time.perf_counter() - started) * 1e3:.0f} ms; {fmt_calls(calls)}",
    )
    return {"calls": first_calls, "writes": writes, "timings": timings, "report": first_report}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=500, help="KWOK GPU nodes (8 GPUs each)")
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--requeue-seconds", default="10", help="RECONCILE_REQUEUE_SECONDS (production default 10)")
    parser.add_argument("--sweep-seconds", type=float, default=30, help="the beat's sweep period (production 30)")
    parser.add_argument("--deadline", type=int, default=1800)
    parser.add_argument("--no-emulator", action="store_true", help="skip the emulator's side")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("B10 needs root: the control plane's pod network namespace (ip netns)")
    from tests.support.controlplane.binaries import Unavailable, binaries

    try:
        binaries()
    except Unavailable as error:
        raise SystemExit(f"the real control plane cannot start: {error}") from error

    claim_redis()
    setup_django("b10")
    header(
        f"B10 the portal on the real control plane: {args.deployments} deployments, "
        f"{args.nodes} GPU nodes, {args.tenants} tenants"
    )
    print(f"   load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    from django.conf import settings

    flavor = seed_flavor()
    admin = make_admin()
    emulator = {}
    if not args.no_emulator:
        print(
            f"-- emulator (tests/support/k8s), bench/b2_reconcile.py's phases at N={args.deployments}, T={args.tenants}"
        )
        emulator["sweep"] = sweep_phase(flavor, admin, args.deployments, namespaces=args.tenants)
        emulator["converge"] = converge_phase(
            flavor,
            admin,
            args.deployments,
            requeue_seconds=args.requeue_seconds,
            deadline=args.deadline,
            namespaces=args.tenants,
        )
        forget_tenants(emulator["sweep"]["tenants"] + emulator["converge"]["tenants"])
        purge_broker()

    from tests.support.controlplane.fixtures import Kube
    from tests.support.controlplane.identity import portal_identity
    from tests.support.controlplane.plane import ControlPlane, sweep_stale

    print("-- real control plane (tests/support/controlplane)")
    sweep_stale()
    started = time.perf_counter()
    plane = ControlPlane()
    watches = {name: Watch(plane, path) for name, path in WATCHED.items()}
    try:
        plane.start()
        plane.portal_kubeconfig = portal_identity(plane)
        row("control plane started", f"{time.perf_counter() - started:.0f} s")
        settings.KUBERNETES_URL = None
        settings.KUBECONFIG = str(plane.portal_kubeconfig)
        settings.KUBERNETES_TIMEOUT_SECONDS = 30.0
        kube = Kube(plane)
        real = converge_real(plane, kube, flavor, admin, args, watches)
        real["sweep"] = sweep_real(args, real, flavor, admin)
        api_rss, api_peak = rss_kib(plane.procs["kube-apiserver"].pid)
        total = sum(rss_kib(p.pid)[0] for p in plane.procs.values())
        row(
            "kube-apiserver memory at the end (VmRSS / peak VmHWM)",
            f"{api_rss / 2**20:.2f} GiB / {api_peak / 2**20:.2f} GiB",
        )
        row("whole control plane VmRSS at the end (all its processes)", f"{total / 2**20:.2f} GiB")
    finally:
        for watch in watches.values():
            watch.stop()
        plane.stop()

    if emulator:
        print("-- side by side: real control plane vs emulator (same N, T, worker concurrency)")
        es, rs = emulator["sweep"], real["sweep"]
        row(
            "sweep(): LIST per namespace, real vs emulator",
            f"{rs['calls']['list'] / args.tenants:.2f} vs {es['calls']['list'] / args.tenants:.2f}",
        )
        row("sweep(): writes, real vs emulator", f"{rs['writes']} vs {es['writes']}")
        real_ms = min(rs["timings"]) / rs["report"]["checked"] * 1e3
        emu_ms = min(es["timings"]) / es["report"]["checked"] * 1e3
        row(
            "sweep(): ms per deployment checked (best), real vs emulator",
            f"{real_ms:.2f} vs {emu_ms:.2f} (ratio {real_ms / emu_ms:.2f}x)",
        )
        ec = emulator["converge"]
        row(
            "RayServices created /s: real (worker running, approvals in a burst) vs emulator (queued first)",
            f"{real['created_rate']:.1f} vs {ec['rate']:.1f} (ratio {real['created_rate'] / ec['rate']:.2f}x)",
            target=">= 20 /s",
        )
    print(f"   load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
