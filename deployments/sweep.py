"""The beat sweep: one pass over every live deployment, the way a controller's resync works.

Per backend and tenant namespace it lists the portal's objects and the Workloads once,
re-enqueues each deployment whose workload drifted from what the database says (`drifted`, the
one drift rule), reads each ClusterQueue's pending workloads once (Kueue's visibility API) to
record queue positions, and reports orphans. It never writes to the cluster itself.

A backend whose resource type the cluster does not serve (a LIST of its kind answers 404: its CRD
is absent, e.g. KServe not installed) is not an error: its objects cannot exist, so the sweep
treats the list as empty, goes on with the other backends, and records it
(`runtime.backends.record_presence`, which also logs it once per process).
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.core.cache import cache

from deployments import services
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.specs import deployment_spec
from deployments.states import GONE, REQUESTED, RUNNING, TEAR_DOWN
from runtime import k8s
from runtime.backends import enabled, get_backend, names, record_presence
from runtime.backends.base import ClusterObjectBackend, stale
from runtime.status import now_iso, workload_gpus

log = logging.getLogger(__name__)


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
    if stale(obj, backend.desired(spec)):  # another spec, or an exposure Kuadrant does not enforce yet
        return drifted(dep, state=None, converged=False, exists=True)
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
    deployment), also in namespaces whose last deployment is gone. A backend the cluster does
    not serve is skipped after its first 404 (`not_installed` in the report)."""
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
    namespaces = [t.namespace for t in Tenant.objects.all()]
    for backend_name in enabled(on_cluster=True):
        for namespace in namespaces:  # orphans outlive the tenant's last deployment
            groups.setdefault((backend_name, namespace), [])
    report = {"checked": 0, "enqueued": 0, "orphans": [], "errors": [], "not_installed": []}
    _sweep_local(report)
    listing = _Listing(report)
    objects: dict[int, dict] = {}
    orphans: list[dict] = []
    for (backend_name, namespace), deps in sorted(groups.items()):
        backend, owned = listing.owned(backend_name, namespace, has_deployments=bool(deps))
        if backend is None:
            continue
        workloads = listing.workloads.get(namespace, {})
        for dep in deps:
            report["checked"] += 1
            obj = objects[dep.pk] = owned.pop(dep.pk, None)
            if _cluster_drifted(dep, backend, obj, workloads):
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
    listing.record_presence()
    orphans += _orphan_workloads(listing.workloads, listing.listed_uids, listing.installed)
    report["orphans"] += [f"{o['namespace']}/{o['name']}" for o in orphans if o["kind"] == k8s.WORKLOAD.kind]
    if report["orphans"]:
        log.warning("orphaned portal objects: %s", ", ".join(report["orphans"]))
    cache.set(ORPHANS_CACHE_KEY, orphans, timeout=SWEEP_CACHE_SECONDS)
    if listing.installed:
        cluster = next(iter(listing.installed.values())).cluster
        deps = [dep for deps in groups.values() for dep in deps]
        _sweep_queues(cluster, deps, objects, listing.workloads, report)
    return report


class _Listing:
    """The sweep's reads, per backend and namespace, and what it learnt about each backend: the
    backends it could list (`installed`), those whose kind the cluster does not serve (listed as
    empty from then on: one 404 per sweep, not one per namespace), and the uids it listed."""

    def __init__(self, report: dict) -> None:
        self.report = report
        self.installed: dict[str, ClusterObjectBackend] = {}
        self.absent: dict[str, ClusterObjectBackend] = {}
        self.workloads: dict[str, dict] = {}  # namespace → Workloads by job uid
        self.raw_workloads: dict[str, list[dict]] = {}  # namespace → its Workloads, listed once for all backends
        self.listed_uids: dict[tuple[str, str], set] = {}  # (namespace, kind) → uids of the portal's objects

    def owned(self, name: str, namespace: str, *, has_deployments: bool) -> tuple[ClusterObjectBackend | None, dict]:
        """(backend, the portal's objects of it in `namespace` by deployment id); (None, {}) when
        no cluster is configured, said once per sweep when a deployment is waiting on one."""
        backend = self.installed.get(name) or self.absent.get(name)
        if backend is None:
            try:
                backend = get_backend(name)
            except k8s.PermanentClusterError as error:
                if has_deployments and str(error) not in self.report["errors"]:
                    self.report["errors"].append(str(error))
                return None, {}
        if name in self.absent:
            return backend, {}
        try:
            owned = backend.list_owned(namespace)
        except k8s.NotFound:  # a namespaced LIST answers 404 only for a kind the server does not serve
            self.absent[name] = backend
            self.report["not_installed"].append(name)
            return backend, {}
        self.installed[name] = backend
        self.listed_uids[namespace, backend.kind.kind] = {(o.get("metadata") or {}).get("uid") for o in owned.values()}
        if namespace not in self.raw_workloads:
            try:
                self.raw_workloads[namespace] = backend.cluster.list(k8s.WORKLOAD, namespace)
            except k8s.NotFound:  # Kueue's Workload kind is not served: nothing is admitted by it
                self.raw_workloads[namespace] = []
                message = "Kueue's Workload kind is not served by the cluster: is Kueue installed?"
                if message not in self.report["errors"]:
                    self.report["errors"].append(message)
        # Each backend indexes the one listing its own way (KServe's Workloads belong to its pods).
        indexed = backend.index_workloads(namespace, self.raw_workloads[namespace], owned)
        self.workloads.setdefault(namespace, {}).update(indexed)
        return backend, owned

    def record_presence(self) -> None:
        """Remember which backends the cluster serves, for request checks and readiness."""
        for name in self.installed:
            record_presence(name, installed=True)
        for name, backend in self.absent.items():
            detail = f"the cluster does not serve the {backend.kind.kind} resource type ({backend.kind.key})"
            record_presence(name, installed=False, detail=detail)


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
