"""Level-triggered reconcile: read desired (database) and actual (backend), converge, record.

`reconcile(dep)` can run any number of times, in any order, on any worker: every write it makes
is idempotent (server-side apply, delete-if-present) and every database change goes through a
service that re-checks state and generation under a row lock. Transient cluster errors propagate
so Celery retries with backoff; permanent ones become a condition the user can read.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.conf import settings
from django.core.cache import cache

from deployments import services
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.specs import deployment_spec
from deployments.states import RUNNING
from runtime import k8s
from runtime.backends import get_backend, names
from runtime.backends.base import ClusterObjectBackend
from runtime.manifests.common import ANNOTATION_SPEC_HASH
from runtime.status import absent_observation, cond, conditions_changed, merge_conditions

log = logging.getLogger(__name__)

TEAR_DOWN = (State.STOPPED, State.FAILED, State.REJECTED, State.CANCELLED)
SETTLED = (State.READY,)


def _record(dep: ModelDeployment, obs, *, spec_generation: int) -> bool:
    conditions = merge_conditions(dep.conditions, obs.conditions)
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


def _requeue(dep_id: int, seconds: float | None = None) -> None:
    """Check back later, at most one pending follow-up per deployment."""
    from deployments.tasks import reconcile_deployment_task

    delay = seconds if seconds is not None else settings.RECONCILE_REQUEUE_SECONDS
    if cache.add(f"reconcile-requeue:{dep_id}", 1, timeout=max(1, int(delay))):
        reconcile_deployment_task.apply_async((dep_id,), countdown=delay)


def _record_error(dep: ModelDeployment, error: Exception) -> None:
    conditions = merge_conditions(
        dep.conditions,
        [cond("Ready", False, "ClusterError", str(error)), *[c for c in dep.conditions if c.get("type") != "Ready"]],
    )
    services.deployment_observe(
        deployment_id=dep.pk, generation=dep.generation, state=None, conditions=conditions, message=str(error)[:1000]
    )


def reconcile(dep: ModelDeployment) -> str:
    """Converge one deployment; returns what it did (for logs and tests)."""
    backend = get_backend_or_none(dep)
    if backend is None:
        return "no-backend"
    spec = deployment_spec(dep)
    try:
        if dep.state in RUNNING:
            if dep.observed_generation != dep.generation:  # a new spec: the moment strays could appear
                _remove_strays(dep, spec)
            return _converge_running(dep, backend, spec)
        if dep.state == State.DELETING:
            if _remove_strays(dep, spec) and backend.remove(spec):
                services.deployment_mark_deleted(deployment_id=dep.pk)
                return "deleted"
            _requeue(dep.pk)
            return "deleting"
        if dep.state in TEAR_DOWN or (dep.state == State.PENDING_APPROVAL and dep.reserved_gpus == 0):
            if _remove_strays(dep, spec) and backend.remove(spec):
                if dep.reserved_gpus or dep.state in TEAR_DOWN:
                    services.deployment_release_quota(
                        deployment_id=dep.pk,
                        reason=(f"Workload removed ({dep.get_state_display().lower()}); GPUs released."),
                    )
                if dep.observed_generation or dep.conditions:
                    obs = absent_observation(
                        reason=dep.get_state_display().replace(" ", ""),
                        message=f"Not running: {dep.get_state_display().lower()}.",
                    )
                    _record(dep, obs, spec_generation=dep.generation)
                return "removed"
            _requeue(dep.pk)
            return "removing"
        return "nothing"
    except k8s.TransientClusterError:
        raise  # Celery retries with backoff (bounded)
    except k8s.PermanentClusterError as error:
        log.warning("reconcile %s: permanent cluster error: %s", dep.pk, error)
        _record_error(dep, error)
        return "error"


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


def get_backend_or_none(dep: ModelDeployment):
    try:
        return get_backend(dep.backend)
    except k8s.PermanentClusterError as error:
        _record_error(dep, error)
        return None


def _converge_running(dep: ModelDeployment, backend, spec) -> str:
    obs = backend.ensure(spec)
    _record(dep, obs, spec_generation=spec.generation)
    if obs.state == State.FAILED:
        # Failed for good: tear the workload down and release the GPUs right away.
        _requeue(dep.pk, seconds=0.1)
        return "failed"
    if obs.state not in SETTLED or not obs.converged:
        _requeue(dep.pk, _backoff(dep))
    return obs.state or "unknown"


def _backoff(dep: ModelDeployment) -> float:
    """How soon to look again at a deployment that is not settled: soon after it last changed,
    then less and less often (a long Kueue queue must not turn into a steady stream of reads;
    the beat sweep still notices any change within its period)."""
    from django.utils import timezone

    quiet = max(0.0, (timezone.now() - dep.updated).total_seconds())
    return min(max(settings.RECONCILE_REQUEUE_SECONDS, quiet / 4), settings.RECONCILE_REQUEUE_MAX_SECONDS)


def _drifted(dep: ModelDeployment, backend: ClusterObjectBackend, obj: dict | None, workloads: dict) -> bool:
    """Would a reconcile change anything? Decided from listed objects only (no extra calls)."""
    if dep.state in RUNNING:
        if obj is None:
            return True
        want = backend.desired(deployment_spec(dep))["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
        if ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH) != want:
            return True
        obs = backend.sweep_observation(deployment_spec(dep), obj, workloads)
        return obs.state != dep.state or (obs.converged and dep.observed_generation != dep.generation)
    if dep.state == State.DELETING or dep.state in TEAR_DOWN:
        return obj is not None or dep.reserved_gpus > 0
    return False


def _sweep_local(report: dict) -> None:
    """Local engines: compare each deployment with its process (state file + health check)."""
    from deployments.tasks import reconcile_deployment_task

    deps = (
        ModelDeployment.objects.filter(backend__in=names(on_cluster=False))
        .exclude(state=State.DELETED)
        .exclude(state=State.PENDING_APPROVAL)
        .select_related("tenant", "flavor")
    )
    if not deps:
        return
    for dep in deps:
        report["checked"] += 1
        obs = get_backend(dep.backend).observe(deployment_spec(dep))
        if dep.state in RUNNING:
            drifted = obs.state != dep.state or (obs.converged and dep.observed_generation != dep.generation)
        else:
            drifted = obs.exists or dep.reserved_gpus > 0
        if drifted:
            reconcile_deployment_task.delay(dep.pk)
            report["enqueued"] += 1


def sweep() -> dict:
    """Per backend and namespace, list the portal's objects and the Workloads once; re-enqueue
    what drifted; report orphans (portal-labelled objects with no live deployment)."""
    from deployments.tasks import reconcile_deployment_task

    groups: dict[tuple[str, str], list[ModelDeployment]] = defaultdict(list)
    live = (
        ModelDeployment.objects.exclude(state=State.DELETED)
        .filter(backend__in=names(on_cluster=True))
        .select_related("tenant", "flavor")
    )
    for dep in live:
        groups[dep.backend, dep.tenant.namespace].append(dep)
    report = {"checked": 0, "enqueued": 0, "orphans": [], "errors": []}
    _sweep_local(report)
    backends = {}
    workloads_by_ns: dict[str, dict] = {}
    for (backend_name, namespace), deps in sorted(groups.items()):
        try:
            backend = backends.setdefault(backend_name, get_backend(backend_name))
        except k8s.PermanentClusterError as error:  # no cluster configured: say so once per sweep
            if str(error) not in report["errors"]:
                report["errors"].append(str(error))
            continue
        owned = backend.list_owned(namespace)
        if namespace not in workloads_by_ns:
            workloads_by_ns[namespace] = backend.list_workloads(namespace)
        for dep in deps:
            report["checked"] += 1
            if _drifted(dep, backend, owned.pop(dep.pk, None), workloads_by_ns[namespace]):
                reconcile_deployment_task.delay(dep.pk)
                report["enqueued"] += 1
        report["orphans"] += [f"{namespace}/{obj['metadata']['name']}" for obj in owned.values()]
    if report["orphans"]:
        log.warning("orphaned portal objects: %s", ", ".join(report["orphans"]))
    cache.set("runtime:orphans", report["orphans"], timeout=3600)
    return report
