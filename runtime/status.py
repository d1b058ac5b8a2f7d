"""What the cluster says, turned into the portal's conditions and lifecycle state. Pure.

Conditions follow the Kubernetes convention (type, status "True"/"False"/"Unknown", CamelCase
reason, message, lastTransitionTime). The lifecycle state is derived from them:

- Ready=True, the Serve app RUNNING, an admitted
  Workload and every desired worker ready             → ready
- Ready=True but no admitted Workload / the Ray
  cluster suspended / workers not ready               → queued / provisioning (the reason says which)
- a Serve app UNHEALTHY                               → degraded
- Serve app DEPLOY_FAILED, Ready=False with
  ValidationFailed / InitializingTimeout              → failed
- Kueue Workload not admitted (or evicted/preempted)  → queued
- admitted but not ready yet                          → provisioning
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runtime.kueue_words import kueue_words
from runtime.manifests.common import ANNOTATION_GENERATION, GPU_RESOURCE, LABEL_QUEUE_NAME

FAILED_READY_REASONS = {"ValidationFailed", "InitializingTimeout"}
PERMANENT_APP_STATUSES = {"DEPLOY_FAILED"}
DEGRADED_APP_STATUSES = {"UNHEALTHY"}


@dataclass
class Observation:
    """One reading of a deployment's workload: derived state, conditions and where it serves."""

    exists: bool
    state: str | None = None  # queued | provisioning | ready | degraded | failed
    reason: str = ""
    message: str = ""
    conditions: list[dict[str, Any]] = field(default_factory=list)
    converged: bool = False  # the object runs the latest spec (generation observed)
    endpoint_url: str | None = None
    metrics_url: str | None = None
    uid: str | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(type_: str, status: bool | None, reason: str, message: str = "") -> dict[str, Any]:
    value = "Unknown" if status is None else ("True" if status else "False")
    return {"type": type_, "status": value, "reason": reason, "message": message[:1000]}


# (status, reason, message) of one condition; None is "Unknown".
Condition = tuple[bool | None, str, str]


def standard_conditions(
    *, ready: Condition, admitted: Condition, progressing: Condition, degraded: Condition
) -> list[dict[str, Any]]:
    """The four conditions every backend reports, in this order, whatever its workload is."""
    return [
        cond("Ready", *ready),
        cond("Admitted", *admitted),
        cond("Progressing", *progressing),
        cond("Degraded", *degraded),
    ]


def merge_conditions(previous: list[dict], current: list[dict]) -> list[dict]:
    """Keep lastTransitionTime when a condition's status did not change."""
    before = {c.get("type"): c for c in previous or []}
    merged = []
    for c in current:
        old = before.get(c["type"])
        if old and old.get("status") == c["status"] and old.get("lastTransitionTime"):
            stamp = old["lastTransitionTime"]
        else:
            stamp = now_iso()
        merged.append({**c, "lastTransitionTime": stamp})
    return merged


def conditions_changed(previous: list[dict], current: list[dict]) -> bool:
    strip = lambda cs: sorted((c["type"], c["status"], c["reason"], c["message"]) for c in cs or [])  # noqa: E731
    return strip(previous) != strip(current)


def _find(conditions: list[dict] | None, type_: str) -> dict | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def _true(condition: dict | None) -> bool:
    return bool(condition) and condition.get("status") == "True"


def kueue_story(workload: dict | None) -> tuple[bool | None, str, str, list[tuple[str, str, str]]]:
    """(admitted, reason, message, notable events) from a Kueue Workload.

    None means Kueue has not created a Workload (yet, or Kueue does not manage this object).
    """
    if workload is None:
        return None, "NoWorkload", "Kueue has not created a Workload for this object yet.", []
    conds = (workload.get("status") or {}).get("conditions") or []
    events = []
    for type_ in ("Evicted", "Preempted", "Requeued"):
        c = _find(conds, type_)
        if _true(c) and type_ != "Requeued":
            events.append(("Warning", type_, c.get("message") or c.get("reason", "")))
    evicted = _find(conds, "Evicted")
    if _true(evicted):
        return False, evicted.get("reason") or "Evicted", evicted.get("message", "Evicted by Kueue."), events
    admitted = _find(conds, "Admitted")
    if _true(admitted):
        return True, "Admitted", admitted.get("message") or "Admitted by Kueue.", events
    reserved = _find(conds, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "False":
        words = kueue_words(reserved.get("message") or "")  # Kueue's flavor-by-flavor refusal, said plainly
        return False, reserved.get("reason") or "Pending", words or "Waiting for quota.", events
    return False, "Pending", "Waiting for Kueue to admit the workload.", events


def kueue_history(workload: dict | None) -> dict[str, Any]:
    """How often Kueue sent the Workload back to the queue, and why it last did.

    `requeueCount` is `status.requeueState.count` (Kueue counts requeues after evictions with
    backoff); `lastEviction` is the most recent of the True `Evicted` / `Preempted` conditions
    (type, reason, message, time); `requeued` is the `Requeued` condition when Kueue set one.
    Empty when there is nothing to tell.
    """
    if workload is None:
        return {}
    status = workload.get("status") or {}
    history: dict[str, Any] = {}
    count = (status.get("requeueState") or {}).get("count")
    if count:
        history["requeueCount"] = int(count)
    conds = status.get("conditions") or []
    evictions = [c for c in conds if c.get("type") in ("Evicted", "Preempted") and _true(c)]
    if evictions:
        last = max(evictions, key=lambda c: (c.get("lastTransitionTime") or "", c.get("type") == "Preempted"))
        history["lastEviction"] = {
            "type": last.get("type"),
            "reason": last.get("reason") or "",
            "message": (last.get("message") or "")[:500],
            "at": last.get("lastTransitionTime"),
        }
    if evictions:
        history["quotaReserved"] = _true(_find(conds, "QuotaReserved"))
    requeued = _find(conds, "Requeued")
    if requeued is not None:
        history["requeued"] = {
            "status": requeued.get("status"),
            "reason": requeued.get("reason") or "",
            "message": (requeued.get("message") or "")[:500],
        }
    return history


def current_workload(workloads: list[dict]) -> dict | None:
    """The Workload that stands for a job now, among those carrying its job-uid label.

    Kueue may leave more than one: an elastic job's every slice is a new Workload with the same
    `kueue.x-k8s.io/job-uid` label, the replaced one Finished (seen on Kueue 0.19.2; kubernetes-sigs/
    kueue pkg/workloadslicing, v0.19.2). The newest admitted one not Finished wins, else the newest
    not Finished, else the newest: while a resized job's new slice waits for quota, the old slice
    is still admitted and its pods serve (Kueue finishes it only once the new one is admitted), so
    the job is not "queued".
    """

    def finished(wl: dict) -> bool:
        return _true(_find((wl.get("status") or {}).get("conditions"), "Finished"))

    def created(wl: dict) -> str:
        return (wl.get("metadata") or {}).get("creationTimestamp") or ""

    live = [wl for wl in workloads if not finished(wl)]
    admitted = [wl for wl in live if _true(_find((wl.get("status") or {}).get("conditions"), "Admitted"))]
    pool = admitted or live or workloads
    return max(pool, key=created) if pool else None


def active_cluster_name(obj: dict) -> str | None:
    """The RayCluster that serves a RayService now (KubeRay's `activeServiceStatus`)."""
    return ((obj.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterName") or None


def ready_worker_pods(pods: list[dict], cluster_name: str) -> int:
    """Worker pods of one Ray cluster that are Ready and not terminating, counted as KubeRay
    counts `readyWorkerReplicas` (labels `ray.io/cluster` and `ray.io/node-type: worker`)."""
    count = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get("ray.io/cluster") != cluster_name or labels.get("ray.io/node-type") != "worker":
            continue
        if not meta.get("deletionTimestamp") and _true(_find((pod.get("status") or {}).get("conditions"), "Ready")):
            count += 1
    return count


def cluster_story(obj: dict, ready_workers: int | None = None) -> tuple[str, str] | None:
    """Why a RayService that KubeRay calls Ready does not serve as asked, or None.

    KubeRay 1.6.2 sets Ready=True once the head reports serve endpoints (ray-project/kuberay
    ray-operator/controllers/ray/rayservice_controller.go, `NonZeroServeEndpoints`), which says
    nothing about the GPU workers the LLM runs on: a worker Pending on the scheduler, or a Ray
    cluster Kueue suspended after deleting its Workload, still reads Ready. The RayCluster's own
    status, mirrored into `activeServiceStatus.rayClusterStatus`, tells, except that the mirror's
    worker count can stay behind for good: KubeRay writes the RayService status only when its
    cluster name, applications or conditions change ("The RayClusterStatus field is only for
    observability in RayService CR, and changes to it will not trigger the status update",
    ray-operator/controllers/ray/utils/consistency.go, v1.6.2; seen on the real plane with both
    workers Ready and the mirror at 1 of 2). `ready_workers`, counted from the pods, overrides it.
    """
    active = (obj.get("status") or {}).get("activeServiceStatus") or {}
    if not active.get("rayClusterName"):
        # Ready=True can come from the serve Service's endpoints alone, e.g. the pods of a
        # replaced RayService that garbage collection has not removed yet (seen on KubeRay 1.6.2).
        return "ClusterStarting", "The Ray cluster for this spec is starting; no Ray cluster serves it yet."
    cluster = active.get("rayClusterStatus") or {}
    conditions = cluster.get("conditions") or []
    if cluster.get("state") == "suspended" or _true(_find(conditions, "RayClusterSuspended")):
        return "Suspended", "The Ray cluster is suspended: Kueue took its pods away and has not admitted it again."
    desired = cluster.get("desiredWorkerReplicas")
    ready = (cluster.get("readyWorkerReplicas") or 0) if ready_workers is None else ready_workers
    if desired and ready < desired:
        return "WorkersNotReady", f"{ready} of {desired} GPU workers are ready; the others are not running yet."
    return None


def workload_gpus(workload: dict) -> int:
    """GPUs a Kueue Workload asks for: per pod set, count × the GPU request of its pods."""
    total = 0
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        pod = ((pod_set.get("template") or {}).get("spec")) or {}
        per_pod = 0
        for container in pod.get("containers") or []:
            resources = container.get("resources") or {}
            value = (resources.get("requests") or {}).get(GPU_RESOURCE) or (resources.get("limits") or {}).get(
                GPU_RESOURCE
            )
            per_pod += int(value or 0)
        total += int(pod_set.get("count") or 0) * per_pod
    return total


def with_kueue_history(obs: Observation, workload: dict | None) -> Observation:
    """Attach `kueue_history` to the observation's Admitted condition (extra keys survive
    `merge_conditions`; the four standard fields stay the Kubernetes ones)."""
    history = kueue_history(workload)
    if history:
        obs.conditions = [{**c, **history} if c.get("type") == "Admitted" else c for c in obs.conditions]
    return obs


# Who preempted a workload, by the reason Kueue gives its Preempted condition (kubernetes-sigs/kueue
# v0.19.2, pkg/scheduler/preemption/preemption.go: humanReadablePreemptionReasons, whose words end
# Kueue's own message "... due to <words>").
PREEMPTED_BY = {
    "InClusterQueue": "a higher-priority workload in the same queue",
    "InCohortReclamation": "a cohort neighbour reclaiming its own quota",
    "InCohortReclaimWhileBorrowing": "a cohort neighbour reclaiming quota while borrowing",
    "InCohortFairSharing": "fair sharing in the cohort",
}


def eviction_words(eviction: dict) -> str:
    """An eviction (kueue_history's `lastEviction`) as the queue story says it: who preempted it
    where Kueue says so, with Kueue's own message."""
    kueue = eviction.get("message") or eviction.get("reason") or "no reason given"
    by = PREEMPTED_BY.get(eviction.get("reason") or "")
    return f"Preempted by {by} (Kueue: {kueue})" if by else f"Evicted by Kueue ({kueue})"


# How long an evicted Workload may keep its quota after its RayService was suspended before the
# portal finishes the eviction itself (stuck_eviction).
EVICTION_GRACE_SECONDS = 15


def stuck_eviction(obj: dict, conditions: list[dict], now: datetime | None = None) -> str | None:
    """The eviction in words (eviction_words) when the eviction of this RayService cannot finish,
    else None.

    Seen on Kueue 0.19.2 with KubeRay 1.6.2 (tests/cluster/test_walk.py): Kueue preempts a
    borrowing RayService (Evicted/Preempted, InCohortReclamation) and sets
    `spec.rayClusterConfig.suspend`; KubeRay suspends the RayCluster and deletes every pod, but
    keeps the RayService's status (Ready=True, NonZeroServeEndpoints), so Kueue never sees the job
    stop and keeps its QuotaReserved: the reclaiming neighbour waits "Pending the preemption of 1
    workload(s)" for good while the preempted one serves nothing. True here when the RayService is
    suspended and its Workload has been evicted for EVICTION_GRACE_SECONDS yet still reserves
    quota; the caller replaces the RayService, which frees the quota and queues a new Workload.
    """
    suspended = ((obj.get("spec") or {}).get("rayClusterConfig") or {}).get("suspend") is True
    admitted = _find(conditions, "Admitted") or {}
    eviction = admitted.get("lastEviction") or {}
    if not (suspended and eviction and admitted.get("quotaReserved")):
        return None
    try:
        at = datetime.fromisoformat(str(eviction.get("at")).replace("Z", "+00:00"))
    except ValueError:
        return None
    if ((now or datetime.now(UTC)) - at).total_seconds() < EVICTION_GRACE_SECONDS:
        return None
    return eviction_words(eviction)


# How old a suspended, Kueue-managed RayService may be without a Workload before the portal calls
# it stuck (stuck_without_workload): Kueue creates one within seconds of a create.
WORKLOAD_GRACE_SECONDS = 60


def stuck_without_workload(obj: dict, conditions: list[dict], now: datetime | None = None) -> bool:
    """True when a Kueue-managed RayService is suspended, has no Workload, and is older than
    WORKLOAD_GRACE_SECONDS: Kueue will not admit it, and nothing runs.

    Seen on Kueue 0.19.2 with KubeRay 1.6.2 (issue 41, tests/cluster/test_states.py): a patch of a
    running RayService's worker `replicas`, `minReplicas` and `maxReplicas` makes Kueue delete the
    Workload that no longer matches and suspend the job, and it never creates another. The portal
    never makes that edit itself; when someone else does, the caller replaces the RayService (its
    pods are gone already), which brings back the approved spec and a new Workload.
    """
    meta = obj.get("metadata") or {}
    managed = bool((meta.get("labels") or {}).get(LABEL_QUEUE_NAME))
    suspended = ((obj.get("spec") or {}).get("rayClusterConfig") or {}).get("suspend") is True
    admitted = _find(conditions, "Admitted") or {}
    if not (managed and suspended and admitted.get("reason") == "NoWorkload"):
        return False
    try:
        created = datetime.fromisoformat(str(meta.get("creationTimestamp")).replace("Z", "+00:00"))
    except ValueError:
        return False
    return ((now or datetime.now(UTC)) - created).total_seconds() >= WORKLOAD_GRACE_SECONDS


def rayservice_observation(
    obj: dict,
    workload: dict | None,
    *,
    app_name: str,
    expected_generation: int | None,
    ready_workers: int | None = None,
) -> Observation:
    """Derive state and conditions from a RayService (+ its Kueue Workload, and the ready worker
    pods of its active cluster where the caller counted them: see `cluster_story`)."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    conds = status.get("conditions") or []
    ready = _find(conds, "Ready")
    apps = (status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}
    app = apps.get(app_name) or {}
    app_status, app_message = app.get("status", ""), app.get("message", "")
    generation = meta.get("generation")
    observed = status.get("observedGeneration")
    ours = (meta.get("annotations") or {}).get(ANNOTATION_GENERATION)
    converged = (
        observed is not None
        and generation is not None
        and observed >= generation
        and (expected_generation is None or ours == str(expected_generation))
    )
    admitted, q_reason, q_message, events = kueue_story(workload)
    managed = bool((meta.get("labels") or {}).get(LABEL_QUEUE_NAME))
    result = Observation(exists=True, uid=meta.get("uid"), converged=converged, events=events)
    if app_status in PERMANENT_APP_STATUSES:
        result.state, result.reason = "failed", "DeployFailed"
        result.message = app_message or "Ray Serve could not deploy the application."
    elif ready is not None and ready.get("status") == "False" and ready.get("reason") in FAILED_READY_REASONS:
        result.state, result.reason = "failed", ready["reason"]
        result.message = ready.get("message") or ready["reason"]
    elif app_status in DEGRADED_APP_STATUSES:
        result.state, result.reason = "degraded", "ApplicationUnhealthy"
        result.message = app_message or "The Serve application is unhealthy."
    elif _true(ready) and managed and admitted is not True:
        # Kueue manages it but no admitted Workload stands behind it: nothing serves for long.
        result.state, result.reason, result.message = "queued", q_reason, q_message
    elif _true(ready) and (story := cluster_story(obj, ready_workers)):
        result.state, (result.reason, result.message) = "provisioning", story
    elif _true(ready):
        result.state, result.reason = "ready", "Ready"
        result.message = ready.get("message") or "Serving."
    elif admitted is False or (admitted is None and not status):
        # No status yet: KubeRay and Kueue have not acted; it waits in the queue.
        result.state, result.reason, result.message = "queued", q_reason, q_message
    else:
        result.state, result.reason = "provisioning", "Provisioning"
        result.message = (ready or {}).get("message") or "Ray cluster and Serve application starting."
    result.conditions = standard_conditions(
        ready=(
            result.state == "ready" or (result.state == "degraded" and _true(ready)),
            result.reason if result.state != "ready" else "Ready",
            result.message,
        ),
        admitted=(admitted, q_reason, q_message),
        progressing=(
            result.state in ("queued", "provisioning") or not converged,
            "Updating" if not converged else ("Starting" if result.state in ("queued", "provisioning") else "Stable"),
            "Rolling out the latest spec." if not converged else "",
        ),
        degraded=(
            result.state in ("degraded", "failed"),
            result.reason if result.state in ("degraded", "failed") else "Healthy",
            result.message if result.state in ("degraded", "failed") else "",
        ),
    )
    return result


def absent_observation(*, reason: str, message: str) -> Observation:
    """The workload does not exist (stopped, deleted, not created yet)."""
    return Observation(
        exists=False,
        reason=reason,
        message=message,
        conditions=standard_conditions(
            ready=(False, reason, message),
            admitted=(None, "NoWorkload", ""),
            progressing=(False, reason, ""),
            degraded=(False, "Healthy", ""),
        ),
    )
