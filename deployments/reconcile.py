"""Level-triggered reconcile: read desired (database) and actual (backend), converge, record.

`reconcile(dep)` can run any number of times, in any order, on any worker: every write it makes
is idempotent (server-side apply, delete-if-present) and every database change goes through a
service that re-checks state and generation under a row lock. Like controller-runtime's
`Reconcile() (Result{RequeueAfter}, error)` it returns what should happen next instead of
scheduling it: the task (deployments.tasks) turns `Result.requeue_after` into the follow-up.
Transient cluster errors propagate so Celery retries with backoff; what retrying cannot fix (a
permanent cluster refusal, a spec that no longer renders) is a `TerminalError`, recorded as a
condition the user can read. A workload whose prerequisites are missing (its namespace, or its
kind: the backend is not installed) waits for them with the same bounded backoff as Celery's
retries (`core.tasks.RETRY`), said on the Ready condition, then fails for good.

The beat sweep (drift, queue positions, orphans) is `deployments.sweep`.

The reconciler never reserves or releases GPUs: the services settle them (`settle_gpus`) in the
transaction that moves the state, so a stop or a failure frees them before the workload is gone
(Kueue holds whatever is admitted against them until the old Workload is removed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.utils import timezone

from core.tasks import RETRY
from deployments import services
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.operating import record_startup
from deployments.specs import deployment_spec
from deployments.states import RUNNING, SETTLED, STARTING, TEAR_DOWN

# The sweep moved to deployments.sweep; its names stay importable from here for existing callers.
from deployments.sweep import drifted, last_orphans, last_pending_workloads, orphan_delete, queue_rows, sweep
from runtime import k8s
from runtime.backends import get_backend, record_presence, traits
from runtime.backends.base import ClusterObjectBackend
from runtime.manifests.common import LABEL_DEPLOYMENT_ID
from runtime.spec import DeploymentSpec, RenderError
from runtime.status import (
    absent_observation,
    cond,
    conditions_changed,
    merge_conditions,
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


# Events for what the runtime did (not what it saw): recorded even when the conditions read the same.
RUNTIME_ACTIONS = ("Created", "Updated", "Recreating", "Resizing", "Requeued", "EndpointMoved")


def _record(dep: ModelDeployment, obs, *, spec_generation: int) -> bool:
    conditions = merge_conditions(dep.conditions, _carry_queue(dep.conditions, obs.conditions))
    events = (
        obs.events
        if conditions_changed(dep.conditions, obs.conditions)
        else [e for e in obs.events if e[1] in RUNTIME_ACTIONS]
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


def _record_retrying(dep: ModelDeployment, error: Exception) -> None:
    """Say why a deployment that is not on the cluster yet waits (e.g. Kueue down: its webhook,
    failurePolicy Fail, refuses every RayService create). A running one keeps its conditions: a
    blip in reading the cluster does not make it look down."""
    if dep.state != State.APPROVED:
        return
    message = f"Retrying: the cluster refused for now: {error}"[:1000]
    if dep.status_message != message:
        services.deployment_observe(
            deployment_id=dep.pk, generation=dep.generation, state=None, conditions=dep.conditions, message=message
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
    except k8s.TransientClusterError as error:
        _record_retrying(dep, error)
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
        # Only the workload: the route and policies are named alike on every backend, and the
        # serving backend's must stay (deleting its AuthPolicy would park the route again).
        removed = other.remove_workload(spec) if isinstance(other, ClusterObjectBackend) else other.remove(spec)
        gone = removed and gone
    return gone


def _converge_running(dep: ModelDeployment, backend, spec) -> Result:
    try:
        obs = backend.ensure(spec)
    except k8s.NotFound as error:
        # Applying answers 404 only when what the object lives in is missing: its namespace (the
        # API server's NamespaceLifecycle admission) or its resource type (the CRD).
        return _wait_for_prerequisite(dep, missing_prerequisite(backend, spec, error))
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
    if dep.state in STARTING and not traits(dep.backend).on_cluster:
        # A local engine's check is one loopback request: poll often, so Ready shows within a
        # second or so of the engine serving (bench/b8_startup.py), not a backoff later.
        return settings.LOCAL_STARTUP_POLL_SECONDS
    quiet = max(0.0, (timezone.now() - dep.updated).total_seconds())
    return min(max(settings.RECONCILE_REQUEUE_SECONDS, quiet / 4), settings.RECONCILE_REQUEUE_MAX_SECONDS)


# --- prerequisites: what the workload needs before it can be applied ----------------------------

PREREQUISITE_REASON = "PrerequisiteMissing"
# The same bound and backoff as a task's retries of a transient cluster error (core.tasks.RETRY):
# tried once, then 8 more times 2, 4, … 120 s apart (about 6 minutes in all), longer than the
# beat's Kueue sync takes to repair a tenant whose sync on commit was lost.
PREREQUISITE_RETRIES = RETRY["max_retries"]


def missing_prerequisite(backend, spec: DeploymentSpec, error: k8s.NotFound) -> str:
    """What the cluster lacks for `spec`, in words, asked in the order things are made.

    A missing LocalQueue is no 404 (Kueue holds the Workload as inadmissible, "LocalQueue %s
    doesn't exist", and admits it once the queue exists: kubernetes-sigs/kueue
    pkg/controller/core/workload_controller.go); it is named only beside another 404.
    """
    if not isinstance(backend, ClusterObjectBackend):
        return str(error)
    cluster = backend.cluster
    if cluster.get(k8s.NAMESPACE, spec.namespace) is None:
        return f"Namespace {spec.namespace} does not exist yet: the tenant's Kueue sync creates it."
    try:
        cluster.list(backend.kind, spec.namespace, label_selector={LABEL_DEPLOYMENT_ID: str(spec.deployment_id)})
    except k8s.NotFound:
        detail = f"the cluster does not serve the {backend.kind.kind} resource type ({backend.kind.key})"
        record_presence(backend.name, installed=False, detail=detail)
        return f"Backend {backend.name} is not installed on the cluster: {detail}."
    if cluster.get(k8s.LOCALQUEUE, spec.queue_name, spec.namespace) is None:
        return f"LocalQueue {spec.namespace}/{spec.queue_name} does not exist yet ({error})."
    return str(error)


def _retry_delay(attempts: int) -> float:
    """Seconds before attempt `attempts + 1`: Celery's exponential backoff with RETRY's numbers."""
    return float(
        get_exponential_backoff_interval(
            factor=RETRY["retry_backoff"], retries=attempts - 1, maximum=RETRY["retry_backoff_max"], full_jitter=False
        )
    )


def _wait_for_prerequisite(dep: ModelDeployment, missing: str) -> Result:
    """Say what is missing on the Ready condition and look again after the backoff; after
    PREREQUISITE_RETRIES retries move to failed, which releases the GPUs (the service's
    settle_gpus) and tears the workload down. The count lives on the condition, so a sweep's
    extra reconcile before the next retry is due tries again without counting."""
    ready = dep.condition("Ready") or {}
    attempts = int(ready.get("attempts") or 0) if ready.get("reason") == PREREQUISITE_REASON else 0
    retry_at = _parse_time(ready.get("retryAt")) if attempts else None
    now = timezone.now()
    if retry_at is not None and now < retry_at:
        return Result("waiting", max(0.1, (retry_at - now).total_seconds()))
    attempts += 1
    others = [c for c in dep.conditions if c.get("type") != "Ready"]
    if attempts > PREREQUISITE_RETRIES:
        message = f"Gave up after {attempts} attempts: {missing}"
        services.deployment_observe(
            deployment_id=dep.pk,
            generation=dep.generation,
            state=State.FAILED,
            conditions=merge_conditions(dep.conditions, [cond("Ready", False, PREREQUISITE_REASON, message), *others]),
            message=message[:1000],
            reason=PREREQUISITE_REASON,
        )
        return Result(State.FAILED, FAILED_REQUEUE_SECONDS)
    delay = _retry_delay(attempts)
    message = f"{missing} Attempt {attempts} of {PREREQUISITE_RETRIES + 1}; trying again in {delay:.0f} s."
    ready = cond("Ready", False, PREREQUISITE_REASON, message)
    ready |= {"attempts": attempts, "retryAt": (now + timedelta(seconds=delay)).isoformat()}
    services.deployment_observe(
        deployment_id=dep.pk,
        generation=dep.generation,
        state=None,
        conditions=merge_conditions(dep.conditions, [ready, *others]),
        message=message[:1000],
        events=[("Warning", PREREQUISITE_REASON, missing)] if attempts == 1 else [],
    )
    return Result("waiting", delay)


def _parse_time(value) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


__all__ = [
    "FAILED_REQUEUE_SECONDS",
    "PREREQUISITE_REASON",
    "PREREQUISITE_RETRIES",
    "Result",
    "TerminalError",
    "drifted",
    "last_orphans",
    "last_pending_workloads",
    "missing_prerequisite",
    "orphan_delete",
    "queue_rows",
    "reconcile",
    "sweep",
]
