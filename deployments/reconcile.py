"""Level-triggered reconcile: read desired (database) and actual (backend), converge, record.

`reconcile(dep)` can run any number of times, in any order, on any worker: every write it makes
is idempotent (server-side apply, delete-if-present) and every database change goes through a
service that re-checks state and generation under a row lock. Like controller-runtime's
`Reconcile() (Result{RequeueAfter}, error)` it returns what should happen next instead of
scheduling it: the task (deployments.tasks) turns `Result.requeue_after` into the follow-up.
Transient cluster errors propagate so Celery retries with backoff; what retrying cannot fix (a
permanent cluster refusal, a spec that no longer renders) is a `TerminalError`, recorded as a
condition the user can read.

The reconciler never reserves or releases GPUs: the services settle them (`settle_gpus`) in the
transaction that moves the state, so a stop or a failure frees them before the workload is gone
(Kueue holds whatever is admitted against them until the old Workload is removed).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from deployments import services
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.operating import record_startup
from deployments.specs import deployment_spec
from deployments.states import GONE, REQUESTED, RUNNING, SETTLED, STARTING, TEAR_DOWN
from runtime import k8s
from runtime.backends import get_backend, names, traits
from runtime.backends.base import ClusterObjectBackend
from runtime.manifests.common import ANNOTATION_SPEC_HASH
from runtime.spec import RenderError
from runtime.status import (
    absent_observation,
    cond,
    conditions_changed,
    merge_conditions,
    now_iso,
    workload_gpus,
)

log = logging.getLogger(__name__)

# A failed workload is torn down by the very next reconcile, not after a backoff.
FAILED_REQUEUE_SECONDS = 0.1


@dataclass(frozen=True)
class Result:
    """What a reconcile did (`outcome`, counted by the task per backend) and when to look again
    (`requeue_after` seconds; None: nothing to wait for, the next change or sweep enqueues it)."""

    outcome: str  # "converged"-like observed states ("ready", "queued"...), "removed", "deleted"...
    requeue_after: float | None = None


class TerminalError(Exception):
    """Retrying cannot help (a spec that no longer renders, a permanent cluster refusal): the
    reconcile records it as a condition on the deployment instead of failing the task."""


def _carry_queue(previous: list[dict], current: list[dict]) -> list[dict]:
    """Keep the sweep's queue position (on the Admitted condition) while the workload still
    waits: a reconcile reads the Workload, not the visibility API, so it has none of its own."""
    old = next((c for c in previous or [] if c.get("type") == "Admitted" and "queue" in c), None)
    if old is None:
        return current
    return [
        {**c, "queue": old["queue"]} if c.get("type") == "Admitted" and c.get("status") != "True" else c
        for c in current
    ]


def _record(dep: ModelDeployment, obs, *, spec_generation: int) -> bool:
    conditions = merge_conditions(dep.conditions, _carry_queue(dep.conditions, obs.conditions))
    events = (
        obs.events
        if conditions_changed(dep.conditions, obs.conditions)
        else [e for e in obs.events if e[1] in ("Created", "Updated", "Recreating")]
    )
    return services.deployment_observe(
        deployment_id=dep.pk,
        generation=spec_generation,
        state=obs.state,
        conditions=conditions,
        observed_generation=spec_generation if obs.converged else None,
        message=obs.message,
        endpoint_url=obs.endpoint_url,
        metrics_url=obs.metrics_url,
        cluster_uid=obs.uid,
        reason=obs.reason,
        events=events,
    )


def _record_error(dep: ModelDeployment, error: Exception) -> None:
    conditions = merge_conditions(
        dep.conditions,
        [cond("Ready", False, "ClusterError", str(error)), *[c for c in dep.conditions if c.get("type") != "Ready"]],
    )
    services.deployment_observe(
        deployment_id=dep.pk, generation=dep.generation, state=None, conditions=conditions, message=str(error)[:1000]
    )


def reconcile(dep: ModelDeployment) -> Result:
    """Converge one deployment; returns what it did and when to look again."""
    try:
        backend = get_backend(dep.backend)
    except k8s.PermanentClusterError as error:  # no cluster configured: say what to configure
        _record_error(dep, error)
        return Result("no-backend")
    try:
        return _converge(dep, backend)
    except k8s.TransientClusterError:
        raise  # Celery retries with backoff (bounded)
    except TerminalError as error:
        log.warning("reconcile %s: %s", dep.pk, error)
        _record_error(dep, error)
        return Result("error")


def _converge(dep: ModelDeployment, backend) -> Result:
    """One pass by the deployment's state; what retrying cannot fix leaves as TerminalError."""
    try:
        spec = deployment_spec(dep)
        if dep.state in RUNNING:
            if dep.observed_generation != dep.generation:  # a new spec: the moment strays could appear
                _remove_strays(dep, spec)
            return _converge_running(dep, backend, spec)
        if dep.state in TEAR_DOWN:
            return _tear_down(dep, backend, spec)
        return Result("nothing")
    except k8s.PermanentClusterError as error:
        raise TerminalError(str(error)) from error
    except RenderError as error:
        # The spec cannot be rendered (e.g. its flavor lost its node labels or its node size since
        # approval): nothing to retry, so say why on the deployment instead of failing the task.
        raise TerminalError(f"Cannot render the workload: {error}") from error


def _tear_down(dep: ModelDeployment, backend, spec) -> Result:
    """Remove the workload (and strays on other backends); then say so once, or finish a
    deletion. The GPUs were released by the service that moved the state."""
    if not (_remove_strays(dep, spec) and backend.remove(spec)):
        return Result("deleting" if dep.state == State.DELETING else "removing", settings.RECONCILE_REQUEUE_SECONDS)
    if dep.state == State.DELETING:
        services.deployment_mark_deleted(deployment_id=dep.pk)
        return Result("deleted")
    obs = absent_observation(
        reason=dep.get_state_display().replace(" ", ""), message=f"Not running: {dep.get_state_display().lower()}."
    )
    # Once: a request that never ran has nothing to say, and a repeat would rewrite nothing.
    if (dep.observed_generation or dep.conditions) and conditions_changed(dep.conditions, obs.conditions):
        _record(dep, obs, spec_generation=dep.generation)
    return Result("removed")


def _remove_strays(dep: ModelDeployment, spec) -> bool:
    """Remove this deployment's objects from every backend it does not use; True once none is left.

    The backend is fixed at creation, but rows from before that rule may have switched: their old
    RayService (or InferenceService) would otherwise keep running outside the quota, and survive
    the deployment's deletion. A backend that cannot be reached (no cluster configured) holds none.
    """
    gone = True
    for name in settings.RUNTIME_BACKENDS:
        if name == dep.backend:
            continue
        try:
            other = get_backend(name)
        except k8s.PermanentClusterError:
            continue
        gone = other.remove(spec) and gone
    return gone


def _converge_running(dep: ModelDeployment, backend, spec) -> Result:
    obs = backend.ensure(spec)
    _record(dep, obs, spec_generation=spec.generation)
    if dep.state in STARTING or obs.state in STARTING:  # phases and Events while it starts
        record_startup(dep, backend, spec)
    outcome = obs.state or "unknown"
    if obs.state == State.FAILED:
        # Failed for good (its GPUs were released with the move): tear the workload down now.
        return Result(outcome, FAILED_REQUEUE_SECONDS)
    if obs.state not in SETTLED or not obs.converged:
        return Result(outcome, _backoff(dep))
    return Result(outcome)


def _backoff(dep: ModelDeployment) -> float:
    """How soon to look again at a deployment that is not settled: soon after it last changed,
    then less and less often (a long Kueue queue must not turn into a steady stream of reads;
    the beat sweep still notices any change within its period)."""
    from django.utils import timezone

    if dep.state in STARTING and not traits(dep.backend).on_cluster:
        # A local engine's check is one loopback request: poll often, so Ready shows within a
        # second or so of the engine serving (bench/b8_startup.py), not a backoff later.
        return settings.LOCAL_STARTUP_POLL_SECONDS
    quiet = max(0.0, (timezone.now() - dep.updated).total_seconds())
    return min(max(settings.RECONCILE_REQUEUE_SECONDS, quiet / 4), settings.RECONCILE_REQUEUE_MAX_SECONDS)


# --- drift: would a reconcile change anything? ---------------------------------------------------


def drifted(dep: ModelDeployment, *, state: str | None, converged: bool, exists: bool) -> bool:
    """The one drift rule, for the cluster sweep (listed objects) and the local one (state files).

    `state` is what the workload of the deployment's current spec reports (None: nothing reports
    one: no workload, or one rendered from another spec), `converged` whether it runs that spec,
    `exists` whether any workload of the deployment is there. A running deployment drifted when
    the workload says another state or converged without being recorded; one being torn down
    while something is left (a deletion, until the row is marked deleted).
    """
    if dep.state in RUNNING:
        return state != dep.state or (converged and dep.observed_generation != dep.generation)
    if dep.state == State.DELETING:
        return True
    return dep.state in TEAR_DOWN and exists


def _cluster_drifted(dep: ModelDeployment, backend: ClusterObjectBackend, obj: dict | None, workloads: dict) -> bool:
    """`drifted` from the objects the sweep listed (no extra calls)."""
    if obj is None or dep.state not in RUNNING:
        return drifted(dep, state=None, converged=False, exists=obj is not None)
    spec = deployment_spec(dep)
    want = backend.desired(spec)["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
    if ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH) != want:
        return drifted(dep, state=None, converged=False, exists=True)  # an object of another spec
    obs = backend.sweep_observation(spec, obj, workloads)
    return drifted(dep, state=obs.state, converged=obs.converged, exists=True)


def _sweep_local(report: dict) -> None:
    """Local engines: compare each deployment with its process (state file + health check)."""
    from deployments.tasks import reconcile_deployment_task

    deps = (
        ModelDeployment.objects.filter(backend__in=names(on_cluster=False))
        .exclude(state__in=GONE | REQUESTED)
        .select_related("tenant", "flavor")
    )
    if not deps:
        return
    for dep in deps:
        report["checked"] += 1
        obs = get_backend(dep.backend).observe(deployment_spec(dep))
        # An engine started from an older spec reports nothing about the current one.
        state = obs.state if obs.converged else None
        if drifted(dep, state=state, converged=obs.converged, exists=obs.exists):
            reconcile_deployment_task.delay(dep.pk)
            report["enqueued"] += 1


ORPHANS_CACHE_KEY = "runtime:orphans"
PENDING_CACHE_KEY = "runtime:pending"
SWEEP_CACHE_SECONDS = 3600


def sweep() -> dict:
    """Per backend and tenant namespace, list the portal's objects and the Workloads once;
    re-enqueue what drifted; read each ClusterQueue's pending workloads once (Kueue's visibility
    API) and record queue positions; report orphans (portal-labelled objects with no live
    deployment), also in namespaces whose last deployment is gone."""
    from deployments.tasks import reconcile_deployment_task
    from quotas.models import Tenant

    groups: dict[tuple[str, str], list[ModelDeployment]] = defaultdict(list)
    live = (
        ModelDeployment.objects.exclude(state__in=GONE)
        .filter(backend__in=names(on_cluster=True))
        .select_related("tenant", "flavor")
    )
    for dep in live:
        groups[dep.backend, dep.tenant.namespace].append(dep)
    tenants = {t.namespace: t for t in Tenant.objects.all()}
    for backend_name in (n for n in names(on_cluster=True) if n in settings.RUNTIME_BACKENDS):
        for namespace in tenants:  # orphans outlive the tenant's last deployment
            groups.setdefault((backend_name, namespace), [])
    report = {"checked": 0, "enqueued": 0, "orphans": [], "errors": []}
    _sweep_local(report)
    backends = {}
    workloads_by_ns: dict[str, dict] = {}
    objects: dict[int, dict] = {}
    orphans: list[dict] = []
    listed_uids: dict[tuple[str, str], set] = {}  # (namespace, kind) → uids of the portal's objects
    for (backend_name, namespace), deps in sorted(groups.items()):
        try:
            backend = backends.setdefault(backend_name, get_backend(backend_name))
        except k8s.PermanentClusterError as error:  # no cluster configured: say so once per sweep
            if deps and str(error) not in report["errors"]:
                report["errors"].append(str(error))
            continue
        owned = backend.list_owned(namespace)
        listed_uids[namespace, backend.kind.kind] = {(o.get("metadata") or {}).get("uid") for o in owned.values()}
        if namespace not in workloads_by_ns:
            workloads_by_ns[namespace] = backend.list_workloads(namespace)
        for dep in deps:
            report["checked"] += 1
            obj = objects[dep.pk] = owned.pop(dep.pk, None)
            if _cluster_drifted(dep, backend, obj, workloads_by_ns[namespace]):
                reconcile_deployment_task.delay(dep.pk)
                report["enqueued"] += 1
        for dep_id, obj in owned.items():
            name = obj["metadata"]["name"]
            report["orphans"].append(f"{namespace}/{name}")
            orphans.append(
                {
                    "backend": backend_name,
                    "kind": backend.kind.kind,
                    "namespace": namespace,
                    "name": name,
                    "deployment_id": dep_id,
                }
            )
    orphans += _orphan_workloads(workloads_by_ns, listed_uids, backends)
    report["orphans"] += [f"{o['namespace']}/{o['name']}" for o in orphans if o["kind"] == k8s.WORKLOAD.kind]
    if report["orphans"]:
        log.warning("orphaned portal objects: %s", ", ".join(report["orphans"]))
    cache.set(ORPHANS_CACHE_KEY, orphans, timeout=SWEEP_CACHE_SECONDS)
    if backends:
        cluster = next(iter(backends.values())).cluster
        _sweep_queues(cluster, [dep for deps in groups.values() for dep in deps], objects, workloads_by_ns, report)
    return report


def _orphan_workloads(workloads_by_ns: dict, listed_uids: dict, backends: dict) -> list[dict]:
    """Kueue Workloads in tenant namespaces whose job (a RayService or InferenceService the sweep
    listed there) is gone: Kueue's garbage collection normally removes them with their owner, a
    finalizer or a lost owner reference can leave them holding quota in the ClusterQueue."""
    backend_of_kind = {b.kind.kind: name for name, b in backends.items()}
    found = []
    for namespace, workloads in sorted(workloads_by_ns.items()):
        for job_uid, workload in workloads.items():
            owner = next(
                (o for o in (workload["metadata"].get("ownerReferences") or []) if o.get("kind") in backend_of_kind),
                None,
            )
            if owner is None or (namespace, owner["kind"]) not in listed_uids:
                continue  # not a portal job kind, or one this sweep could not list: cannot tell
            if job_uid in listed_uids[namespace, owner["kind"]]:
                continue
            found.append(
                {
                    "backend": backend_of_kind[owner["kind"]],
                    "kind": k8s.WORKLOAD.kind,
                    "namespace": namespace,
                    "name": workload["metadata"]["name"],
                    "deployment_id": None,
                    "owner": f"{owner['kind']}/{owner.get('name')}",
                }
            )
    return found


def _sweep_queues(cluster, deps: list[ModelDeployment], objects: dict, workloads_by_ns: dict, report: dict) -> None:
    """One visibility call per ClusterQueue that holds a live deployment; store what it said
    (for the admin view) and each queued deployment's position (on its Admitted condition)."""
    by_queue: dict[str, list[ModelDeployment]] = defaultdict(list)
    for dep in deps:
        by_queue[dep.tenant.cluster_queue].append(dep)
    pending: dict[str, dict] = {}
    read_at = now_iso()
    for cluster_queue, queue_deps in sorted(by_queue.items()):
        try:
            items = cluster.pending_workloads(cluster_queue)
        except k8s.NotFound:
            items, error = [], f"ClusterQueue {cluster_queue} (or Kueue's visibility API) not found."
        except k8s.ClusterError as error_:  # a sweep is best effort: the next one reads again
            items, error = [], f"pending workloads of {cluster_queue}: {error_}"
            report["errors"].append(error)
        else:
            error = ""
        rows = queue_rows(items, workloads_by_ns)
        pending[cluster_queue] = {"read_at": read_at, "error": error, "workloads": rows}
        for dep in queue_deps:
            queue = None if error else _position(dep, objects.get(dep.pk), rows, workloads_by_ns, read_at)
            _record_queue(dep, queue)
    cache.set(PENDING_CACHE_KEY, pending, timeout=SWEEP_CACHE_SECONDS)


def queue_rows(items: list[dict], workloads_by_ns: dict[str, dict]) -> list[dict]:
    """The visibility API's items as plain rows, with the GPUs each asks for where the sweep
    listed its Workload (tenant namespaces; None elsewhere: the v1beta1 items carry no pod sets)."""
    by_name = {
        (ns, (wl.get("metadata") or {}).get("name")): wl for ns, wls in workloads_by_ns.items() for wl in wls.values()
    }
    rows = []
    for item in items:
        meta = item.get("metadata") or {}
        workload = by_name.get((meta.get("namespace"), meta.get("name")))
        owners = meta.get("ownerReferences") or []
        rows.append(
            {
                "namespace": meta.get("namespace", ""),
                "name": meta.get("name", ""),
                "owner": f"{owners[0].get('kind')}/{owners[0].get('name')}" if owners else "",
                "owner_uid": owners[0].get("uid") if owners else None,
                "local_queue": item.get("localQueueName", ""),
                "priority": item.get("priority", 0),
                "position": int(item.get("positionInClusterQueue") or 0) + 1,
                "position_in_local_queue": int(item.get("positionInLocalQueue") or 0) + 1,
                "gpus": workload_gpus(workload) if workload is not None else None,
            }
        )
    return rows


def _position(
    dep: ModelDeployment, obj: dict | None, rows: list[dict], workloads_by_ns: dict, read_at: str
) -> dict | None:
    """Where this deployment's Workload stands: "position N of M" in its LocalQueue and
    ClusterQueue, and the GPUs asked for ahead of it. None when it is not pending."""
    if dep.state != State.QUEUED or obj is None:
        return None
    uid = (obj.get("metadata") or {}).get("uid")
    workload = workloads_by_ns.get(dep.tenant.namespace, {}).get(uid)
    wl_name = (workload or {}).get("metadata", {}).get("name")
    mine = next(
        (r for r in rows if r["namespace"] == dep.tenant.namespace and (r["name"] == wl_name or r["owner_uid"] == uid)),
        None,
    )
    if mine is None:
        return None
    ahead = rows[: mine["position"] - 1]
    same_lq = [r for r in rows if (r["namespace"], r["local_queue"]) == (mine["namespace"], mine["local_queue"])]
    return {
        "clusterQueue": dep.tenant.cluster_queue,
        "localQueue": mine["local_queue"],
        "position": mine["position"],
        "of": len(rows),
        "positionInLocalQueue": mine["position_in_local_queue"],
        "ofInLocalQueue": len(same_lq),
        "gpusAhead": sum(r["gpus"] or 0 for r in ahead),
        "unsizedAhead": sum(1 for r in ahead if r["gpus"] is None),
        "readAt": read_at,
    }


def _record_queue(dep: ModelDeployment, queue: dict | None) -> None:
    """Store (or clear) the queue position through the service; nothing to clear, no lock."""
    if queue is None and "queue" not in (dep.condition("Admitted") or {}):
        return
    services.deployment_record_queue(deployment_id=dep.pk, queue=queue)


def last_orphans() -> list[dict]:
    """The orphans the last sweep found (backend, kind, namespace, name, deployment_id)."""
    return cache.get(ORPHANS_CACHE_KEY) or []


def last_pending_workloads() -> dict[str, dict]:
    """Per ClusterQueue, the pending workloads the last sweep read from Kueue's visibility API."""
    return cache.get(PENDING_CACHE_KEY) or {}


def orphan_delete(*, actor, backend: str, namespace: str, name: str) -> bool:
    """Delete a portal-labelled object the last sweep reported as orphaned; audited.

    Raises LookupError when the last sweep did not report it, and ValueError when a live
    deployment claims it again (checked now, not at sweep time). False when it was already gone.
    """
    from core.models import audit
    from quotas.models import Tenant

    found = next(
        (o for o in last_orphans() if (o["backend"], o["namespace"], o["name"]) == (backend, namespace, name)), None
    )
    tenant = Tenant.objects.filter(slug=namespace).first()
    if found is None or tenant is None:
        raise LookupError(f"{namespace}/{name} is not an orphan the last sweep found")
    runtime_backend = get_backend(backend)
    if found["kind"] == k8s.WORKLOAD.kind:
        # Its job may have come back under the same name since the sweep: then it is not orphaned.
        owner_name = found["owner"].partition("/")[2]
        if runtime_backend.cluster.get(runtime_backend.kind, owner_name, namespace) is not None:
            raise ValueError(f"{found['owner']} exists again; not deleting its Workload {namespace}/{name}")
        kind = k8s.WORKLOAD
    else:
        claimed = (
            ModelDeployment.objects.exclude(state__in=GONE)
            .filter(pk=found["deployment_id"], backend=backend, tenant=tenant)
            .exists()
        )
        if claimed:
            raise ValueError(f"deployment {found['deployment_id']} owns {namespace}/{name} again; not deleting it")
        kind = runtime_backend.kind
    deleted = runtime_backend.cluster.delete(kind, name, namespace)  # no transaction held here
    audit(
        actor=actor,
        action="orphan.delete",
        obj=tenant,
        tenant=tenant,
        object_id=f"{namespace}/{name}"[:64],
        changes={**found, "was_present": deleted},
    )
    cache.set(ORPHANS_CACHE_KEY, [o for o in last_orphans() if o != found], timeout=SWEEP_CACHE_SECONDS)
    return deleted
