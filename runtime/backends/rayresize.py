"""Moving a running Ray cluster to a new worker count without taking it down (issue 41).

Pure functions of objects read from the cluster; `runtime.backends.kuberay` applies what they
return. Why this path and no other, from the controllers' own code:

- Kueue evicts a plain RayService whose worker counts change: its pod sets no longer match the
  admitted Workload, which is deleted and the job suspended (kubernetes-sigs/kueue
  pkg/controller/jobframework/reconciler.go, v0.19.2; seen on the real plane, issue 41).
- For an elastic RayService (annotation `kueue.x-k8s.io/elastic-job: "true"`, gate
  ElasticJobsViaWorkloadSlices, on by default since 0.18) with `enableInTreeAutoscaling`, Kueue
  counts the worker pods from the *active RayCluster*, not from the RayService
  (pkg/controller/jobs/raycluster/common.go `UpdatePodSets`, called from
  pkg/controller/jobs/rayservice/rayservice_controller.go `PodSets`, v0.19.2). A changed count
  there is a new Workload slice: the new pods wait behind the ElasticJobSchedulingGate until it is
  admitted, and the old slice keeps serving until then (tests/cluster/test_slices.py).
- KubeRay never carries a RayService's worker counts into its RayCluster: its cluster hash leaves
  out replicas, minReplicas, maxReplicas and workersToDelete (ray-project/kuberay
  ray-operator/controllers/ray/utils/util.go `GenerateHashWithoutReplicasAndWorkersToDelete`,
  v1.6.2), so `shouldUpdateCluster` (rayservice_controller.go) sees nothing to do. The portal
  therefore patches the RayCluster itself, as the Ray autoscaler does (ray-project/ray
  python/ray/autoscaler/_private/kuberay/node_provider.py), and keeps the RayService's counts
  equal, because KubeRay rebuilds the RayCluster from them when it does update it.
- With in-tree autoscaling KubeRay deletes no worker at random on a scale-down; it deletes only
  the pods named in `scaleStrategy.workersToDelete` (raycluster_controller.go, v1.6.2,
  `enableRandomPodDelete`), so a smaller count names its pods.
"""

from __future__ import annotations

import copy
from typing import Any

from runtime.manifests.rayservice import WORKER_GROUP_NAME

# On the RayService while its cluster moves to a new worker count: the worker pods it ran before,
# so the deployment reads `ready` (serving on those) until the new count runs. Removed after.
ANNOTATION_RESIZING = "llm-portal.io/resizing-from"


def worker_counts(cluster_config: dict[str, Any], group: str = WORKER_GROUP_NAME) -> tuple[Any, Any, Any] | None:
    """(replicas, minReplicas, maxReplicas) of a worker group in a rayClusterConfig / RayCluster
    spec, or None when the group is absent."""
    for spec in cluster_config.get("workerGroupSpecs") or []:
        if spec.get("groupName") == group:
            return spec.get("replicas"), spec.get("minReplicas"), spec.get("maxReplicas")
    return None


def target_replicas(current: int | None, wanted: int | None, low: int, high: int) -> int:
    """The replica count to set: the wanted one for a fixed size, else the running one kept
    within the new bounds (the autoscaler moves it from there)."""
    if wanted is not None:
        return wanted
    return min(max(current if current is not None else low, low), high)


def _pods_to_remove(pods: list[dict[str, Any]], cluster: str, group: str, count: int) -> list[str]:
    """`count` worker pods of the group to let go: ones that do not run first, then the newest
    (the oldest have loaded their model longest and serve)."""

    def ready(pod: dict[str, Any]) -> bool:
        conditions = (pod.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    mine = [
        p
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get("ray.io/cluster") == cluster
        and ((p.get("metadata") or {}).get("labels") or {}).get("ray.io/group") == group
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    not_ready = [p for p in mine if not ready(p)]
    newest_first = sorted(
        (p for p in mine if ready(p)), key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True
    )
    chosen = (not_ready + newest_first)[:count]
    return [p["metadata"]["name"] for p in chosen]


def resized_groups(
    raycluster: dict[str, Any],
    *,
    replicas: int | None,
    min_replicas: int,
    max_replicas: int,
    pods: list[dict[str, Any]],
    group: str = WORKER_GROUP_NAME,
) -> list[dict[str, Any]] | None:
    """`raycluster`'s workerGroupSpecs with the group moved to the wanted counts (pods, not model
    replicas), or None when it has them. `replicas` None: the autoscaler owns the count within
    [min, max]. A smaller count names the pods to delete. The caller writes the whole list (it is
    atomic: a merge patch replaces it) guarded by the resourceVersion it read."""
    groups = copy.deepcopy((raycluster.get("spec") or {}).get("workerGroupSpecs") or [])
    current = next((g for g in groups if g.get("groupName") == group), None)
    if current is None:
        return None
    running = current.get("replicas")
    target = target_replicas(running, replicas, min_replicas, max_replicas)
    if (running, current.get("minReplicas"), current.get("maxReplicas")) == (target, min_replicas, max_replicas):
        return None
    current.update(replicas=target, minReplicas=min_replicas, maxReplicas=max_replicas)
    if running is not None and target < running:
        name = (raycluster.get("metadata") or {}).get("name", "")
        named = list((current.get("scaleStrategy") or {}).get("workersToDelete") or [])
        extra = [n for n in _pods_to_remove(pods, name, group, running - target) if n not in named]
        current["scaleStrategy"] = {**(current.get("scaleStrategy") or {}), "workersToDelete": named + extra}
    return groups


def serving_cluster(rayservice: dict[str, Any]) -> str | None:
    """The RayCluster whose counts stand for the RayService: the active one, else the pending
    one (nothing serves yet), else None (KubeRay builds it from the RayService's counts)."""
    status = rayservice.get("status") or {}
    for part in ("activeServiceStatus", "pendingServiceStatus"):
        name = (status.get(part) or {}).get("rayClusterName")
        if name:
            return name
    return None


def asked_workers(rayservice: dict[str, Any]) -> int | None:
    """Worker pods the RayService asks of its Ray cluster: its fixed count, or under the
    autoscaler the count KubeRay mirrors kept within its [min, max]; None without the group."""
    counts = worker_counts(((rayservice.get("spec") or {}).get("rayClusterConfig")) or {})
    if counts is None:
        return None
    replicas, low, high = counts
    if replicas is not None:
        return int(replicas)
    active = (rayservice.get("status") or {}).get("activeServiceStatus") or {}
    mirrored = (active.get("rayClusterStatus") or {}).get("desiredWorkerReplicas")
    return target_replicas(mirrored, None, int(low or 0), int(high if high is not None else low or 0))


def with_asked_workers(rayservice: dict[str, Any]) -> dict[str, Any]:
    """`rayservice` with the desired worker count KubeRay mirrors into its status replaced by what
    it asks (`asked_workers`). The mirror is written only when the cluster name, applications or
    conditions change (runtime.status.cluster_story), so after a resize it keeps the old count
    for good; the RayService's own counts, which the portal keeps equal to its RayCluster's, do not."""
    asked = asked_workers(rayservice)
    mirror = ((rayservice.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterStatus")
    if asked is None or not isinstance(mirror, dict) or mirror.get("desiredWorkerReplicas") == asked:
        return rayservice
    view = copy.deepcopy(rayservice)
    view["status"]["activeServiceStatus"]["rayClusterStatus"]["desiredWorkerReplicas"] = asked
    return view


def resizing_story(*, before: int, ready: int, target: int, waiting: str) -> tuple[str, str] | None:
    """(reason, message) for a RayService moving from `before` to `target` worker pods with
    `ready` of them Ready: None when the new count runs, or when fewer than it ran before (and
    at least one) serve: then it is not a resize in progress but workers that are down."""
    if ready >= target or ready < max(1, min(before, target)):
        return None
    why = f" {waiting}" if waiting else ""
    return "Resizing", (
        f"Serving on {ready} GPU worker pod{'s' if ready != 1 else ''} while the Ray cluster grows to {target}: "
        f"the new workers start once Kueue admits the larger Workload slice.{why}"
    )
