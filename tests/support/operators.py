"""Simulated KubeRay and Kueue controllers for tests: they write `status` as the real ones do.

The shapes follow the CRDs in ../shared/schemas/crds (KubeRay v1.7 `ray.io_rayservices.yaml`,
Kueue `kueue.x-k8s.io_workloads.yaml`). Writes go straight into the test server's store
(`K8sApiServer.patch_object`), not through the fault proxy: another controller's write is not
a request the portal makes, and it must not be counted in `Cluster.calls` or sabotaged.

Conditions are upserted by `type` and the whole list is written back, because the emulator
merges dicts but replaces lists — the same reason a real controller sends the full list.
`lastTransitionTime` only moves when `status` flips, as in `meta.SetStatusCondition`.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from runtime import k8s
from runtime.manifests.common import LABEL_JOB_UID, LABEL_QUEUE_NAME
from tests.support.k8s import K8sApiServer

AppStatus = Literal["DEPLOY_FAILED", "UNHEALTHY", "RUNNING", "DEPLOYING", "NOT_STARTED"]
# ray-project/kuberay ray-operator/apis/ray/v1/rayservice_types.go v1.6.2: RayServiceConditionReason.
NotReadyReason = Literal["InitializingTimeout", "ValidationFailed", "Initializing", "ZeroServeEndpoints"]

# The reasons Kueue writes for each condition when it is True / False.
_WORKLOAD_REASONS: dict[str, tuple[str, str]] = {
    "QuotaReserved": ("QuotaReserved", "Pending"),
    "Admitted": ("Admitted", "NoReservation"),
    "Evicted": ("Preempted", "NotEvicted"),
    "Preempted": ("InClusterQueue", "NotPreempted"),
    "Requeued": ("Requeued", "NotRequeued"),
    "PodsReady": ("PodsReady", "PodsNotReady"),
    "Finished": ("Succeeded", "NotFinished"),
}


def now() -> str:
    """RFC 3339 UTC to the second, as Kubernetes writes `metav1.Time`."""
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type_: str,
    status: bool,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
) -> dict[str, Any]:
    """A `metav1.Condition` dict."""
    cond: dict[str, Any] = {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
    }
    if observed_generation is not None:
        cond["observedGeneration"] = observed_generation
    return cond


def _kuberay_condition(type_: str, status: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    """KubeRay's `setCondition` stamps the RayService's observedGeneration on every condition."""
    return condition(type_, status, reason, message, observed_generation=generation)


def upsert_conditions(existing: list[dict[str, Any]] | None, *new: dict[str, Any]) -> list[dict[str, Any]]:
    """Replace conditions by type, keeping `lastTransitionTime` when the status did not flip."""
    result = [dict(c) for c in existing or []]
    for cond in new:
        for index, old in enumerate(result):
            if old.get("type") == cond["type"]:
                if old.get("status") == cond["status"] and old.get("lastTransitionTime"):
                    cond = {**cond, "lastTransitionTime": old["lastTransitionTime"]}
                result[index] = cond
                break
        else:
            result.append(cond)
    return result


def _require(server: K8sApiServer, kind: k8s.Kind, ns: str | None, name: str) -> dict[str, Any]:
    obj = server.get_object(kind, name, ns)
    if obj is None:
        raise LookupError(f"{kind.kind} {ns}/{name} does not exist in the test server")
    return obj


# --- API server side ---------------------------------------------------------------------------


def assign_uid(server: K8sApiServer, kind: k8s.Kind, ns: str | None, name: str, *, uid: str | None = None) -> str:
    """Make sure the object has uid and generation; return the uid.

    The test server already stamps both on every create; this is for objects seeded with
    `emulator.objects[...]` directly, or to force a known uid. It also records the current
    generation as `status.observedGeneration`, i.e. "the controller has seen this spec".
    """
    obj = _require(server, kind, ns, name)
    meta = obj["metadata"]
    new_uid = uid or meta.get("uid") or hashlib.sha1(f"{ns}/{name}".encode()).hexdigest()
    generation = int(meta.get("generation") or 1)
    server.patch_object(
        kind,
        name,
        ns,
        {
            "metadata": {"uid": new_uid, "generation": generation},
            "status": {"observedGeneration": generation},
        },
        status_only=True,
    )
    return new_uid


# --- KubeRay -----------------------------------------------------------------------------------


def _rayservice_status(
    server: K8sApiServer, ns: str, name: str, changes: Mapping[str, Any], *conds: dict[str, Any]
) -> dict[str, Any]:
    obj = _require(server, k8s.RAYSERVICE, ns, name)
    generation = int(obj["metadata"].get("generation") or 1)
    status = obj.get("status") or {}
    patch: dict[str, Any] = {
        **changes,
        # KubeRay reconciled this generation, whatever the outcome.
        "observedGeneration": generation,
        "lastUpdateTime": now(),
    }
    if conds:
        patch["conditions"] = upsert_conditions(status.get("conditions"), *conds)
    return server.patch_object(k8s.RAYSERVICE, name, ns, {"status": patch}, status_only=True)


def _app_names(obj: Mapping[str, Any]) -> list[str]:
    """Serve application names from spec.serveConfigV2 (a YAML string), if any."""
    import yaml

    text = (obj.get("spec") or {}).get("serveConfigV2")
    if not text:
        return []
    config = yaml.safe_load(text) or {}
    return [app.get("name", "default") for app in config.get("applications") or []]


def rayservice_ready(server: K8sApiServer, ns: str, name: str, *, endpoints: int = 1) -> dict[str, Any]:
    """The RayService serves traffic: Ready=True and every Serve app RUNNING.

    As on the real controllers, a Kueue-managed RayService only serves once its Workload is
    admitted: when it carries a queue name and no Workload exists yet, one is admitted here.
    """
    obj = _require(server, k8s.RAYSERVICE, ns, name)
    uid = (obj.get("metadata") or {}).get("uid")
    if (obj["metadata"].get("labels") or {}).get(LABEL_QUEUE_NAME) and uid:
        listed = server.list_objects(k8s.WORKLOAD, ns)
        if not any((w["metadata"].get("labels") or {}).get(LABEL_JOB_UID) == uid for w in listed):
            workload_for(server, obj, {"QuotaReserved": True, "Admitted": True})
    generation = int(obj["metadata"].get("generation") or 1)
    apps = {app: {"status": "RUNNING"} for app in _app_names(obj) or ["llm"]}
    workers = sum(
        int(g.get("replicas", g.get("minReplicas", 1)) or 0)
        for g in ((obj.get("spec") or {}).get("rayClusterConfig") or {}).get("workerGroupSpecs") or []
    )
    cluster = _cluster_name(obj)
    # Messages and reasons: ray-project/kuberay ray-operator/controllers/ray/rayservice_controller.go
    # v1.6.2, `calculateConditions`; the cluster is `<name>-<5 random>`; rayClusterStatus is the
    # RayCluster's status (ray-operator/apis/ray/v1/raycluster_types.go `RayClusterStatus`).
    return _rayservice_status(
        server,
        ns,
        name,
        {
            "activeServiceStatus": {
                "applicationStatuses": apps,
                "rayClusterName": cluster,
                "rayClusterStatus": {
                    "state": "ready",
                    "readyWorkerReplicas": workers,
                    "availableWorkerReplicas": workers,
                    "desiredWorkerReplicas": workers,
                    "head": {"podName": f"{cluster}-head-abcde", "serviceName": f"{cluster}-head-svc"},
                },
            },
            "pendingServiceStatus": {},
            "numServeEndpoints": endpoints,
            "serviceStatus": "Running",
        },
        _kuberay_condition(
            "Ready", True, "NonZeroServeEndpoints", "Number of serve endpoints is greater than 0", generation
        ),
        _kuberay_condition(
            "UpgradeInProgress",
            False,
            "NoPendingCluster",
            "Active Ray cluster exists and no pending Ray cluster",
            generation,
        ),
    )


def raycluster_serving(server: K8sApiServer, ns: str, name: str) -> dict[str, Any]:
    """KubeRay's RayCluster for a RayService, built from its rayClusterConfig as
    `constructRayClusterForRayService` does (rayservice_controller.go v1.6.2), and the RayService
    made Ready on it (`rayservice_ready`)."""
    obj = rayservice_ready(server, ns, name)
    config = (obj.get("spec") or {}).get("rayClusterConfig") or {}
    ready = sum(int(g.get("replicas", g.get("minReplicas", 1)) or 0) for g in config.get("workerGroupSpecs") or [])
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": _cluster_name(obj), "namespace": ns, "labels": {"ray.io/originated-from-cr-name": name}},
        "spec": config,
        "status": {"state": "ready", "readyWorkerReplicas": ready, "desiredWorkerReplicas": ready},
    }
    server.put(k8s.RAYCLUSTER, cluster)
    return obj


def _cluster_name(obj: Mapping[str, Any]) -> str:
    digest = hashlib.sha1(str(obj["metadata"].get("uid") or obj["metadata"]["name"]).encode()).hexdigest()
    return f"{obj['metadata']['name']}-{digest[:5]}"


def rayservice_initializing(server: K8sApiServer, ns: str, name: str) -> dict[str, Any]:
    """KubeRay's first status for an admitted RayService: the first Ray cluster is *pending*
    (activeServiceStatus empty) and both conditions are False with reason Initializing
    (rayservice_controller.go v1.6.2, `calculateConditions` on an empty condition list)."""
    obj = _require(server, k8s.RAYSERVICE, ns, name)
    generation = int(obj["metadata"].get("generation") or 1)
    message = "RayService is initializing"
    return _rayservice_status(
        server,
        ns,
        name,
        {"activeServiceStatus": {}, "pendingServiceStatus": {"rayClusterName": _cluster_name(obj)}},
        _kuberay_condition("Ready", False, "Initializing", message, generation),
        _kuberay_condition("UpgradeInProgress", False, "Initializing", message, generation),
    )


def rayservice_app_status(
    server: K8sApiServer, ns: str, name: str, app: str, status: AppStatus, message: str = ""
) -> dict[str, Any]:
    """Set one Serve application's status. KubeRay does not turn DEPLOY_FAILED into a condition."""
    obj = _require(server, k8s.RAYSERVICE, ns, name)
    active = dict((obj.get("status") or {}).get("activeServiceStatus") or {})
    apps = dict(active.get("applicationStatuses") or {})
    apps[app] = {**apps.get(app, {}), "status": status, "message": message}
    active["applicationStatuses"] = apps
    return _rayservice_status(server, ns, name, {"activeServiceStatus": active})


def rayservice_not_ready(
    server: K8sApiServer,
    ns: str,
    name: str,
    reason: NotReadyReason = "InitializingTimeout",
    message: str = "",
) -> dict[str, Any]:
    """Ready=False with KubeRay's reason (e.g. after `ray.io/initializing-timeout` expired)."""
    generation = int(_require(server, k8s.RAYSERVICE, ns, name)["metadata"].get("generation") or 1)
    return _rayservice_status(
        server,
        ns,
        name,
        {"numServeEndpoints": 0, "serviceStatus": ""},
        _kuberay_condition("Ready", False, reason, message or reason, generation),
    )


# --- Kueue -------------------------------------------------------------------------------------


def workload_name(rayservice: Mapping[str, Any]) -> str:
    """Kueue's naming, `rayservice-<name>-<5 hex>`: sha1 of kind, group, name and uid, and for an
    elastic job (annotation `kueue.x-k8s.io/elastic-job: "true"`, the portal's every RayService
    since worker counts are resized in place) also a generation: each slice is a new Workload
    (kubernetes-sigs/kueue pkg/controller/jobframework/workload_names.go v0.19.2, `getHash`,
    `GetWorkloadNameForOwnerWithGVKAndGeneration`). For a RayService it is the active RayCluster's,
    which Kueue records on the RayService as `kueue.x-k8s.io/raycluster-generation` (seen on the
    real plane: generation 1 while the RayService's own was 2)."""
    meta = rayservice["metadata"]
    annotations = meta.get("annotations") or {}
    text = f"RayService\nray.io\n{meta['name']}\n{meta['uid']}"
    if annotations.get("kueue.x-k8s.io/elastic-job") == "true":
        text += f"\n{annotations.get('kueue.x-k8s.io/raycluster-generation', '1')}"
    digest = hashlib.sha1(text.encode()).hexdigest()[:5]
    return f"rayservice-{meta['name']}-{digest}"


def workload_for(
    server: K8sApiServer,
    rayservice: Mapping[str, Any],
    conditions: Mapping[str, bool] | None = None,
    *,
    messages: Mapping[str, str] | None = None,
    cluster_queue: str = "cq",
    flavor: str = "default-flavor",
    gpus: int = 1,
) -> dict[str, Any]:
    """Create (or replace) the Workload Kueue keeps for `rayservice`, with these conditions.

    `rayservice` is the object as read back from the server (it needs `metadata.uid`).
    `conditions` maps type → status, e.g. {"QuotaReserved": True, "Admitted": True};
    default is a pending workload ({"QuotaReserved": False}). When Admitted or QuotaReserved
    is True the workload also gets `status.admission` naming `cluster_queue` and `flavor`.
    """
    meta = rayservice["metadata"]
    if not meta.get("uid"):
        raise ValueError("the RayService has no uid: read it back from the server first")
    conditions = dict(conditions if conditions is not None else {"QuotaReserved": False})
    messages = messages or {}
    ns, name = meta["namespace"], meta["name"]
    queue = (meta.get("labels") or {}).get(LABEL_QUEUE_NAME, "")
    # Pod sets: "head" and one per worker group, named by groupName (kubernetes-sigs/kueue
    # pkg/controller/jobs/raycluster/common.go v0.19.2, `BuildPodSets`).
    groups = ((rayservice.get("spec") or {}).get("rayClusterConfig") or {}).get("workerGroupSpecs") or []
    worker = groups[0].get("groupName", "gpu") if groups else "gpu"
    conds = []
    for type_, value in conditions.items():
        true_reason, false_reason = _WORKLOAD_REASONS.get(type_, (type_, f"Not{type_}"))
        default_message = (
            f"Quota reserved in ClusterQueue {cluster_queue}"
            if type_ == "QuotaReserved" and value
            else f"couldn't assign flavors to pod set {worker}: insufficient unused quota for "
            f"nvidia.com/gpu in flavor {flavor}, {gpus} more needed"
            if type_ == "QuotaReserved"
            else "The workload is admitted"
            if type_ == "Admitted" and value
            else ""
        )
        conds.append(
            condition(
                type_,
                value,
                true_reason if value else false_reason,
                messages.get(type_, default_message),
            )
        )
    status: dict[str, Any] = {"conditions": conds}
    if conditions.get("Admitted") or conditions.get("QuotaReserved"):
        status["admission"] = {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {"name": "head", "count": 1, "flavors": {"cpu": flavor, "memory": flavor}},
                {
                    "name": worker,
                    "count": gpus,
                    "flavors": {"cpu": flavor, "memory": flavor, "nvidia.com/gpu": flavor},
                    "resourceUsage": {"nvidia.com/gpu": str(gpus)},
                },
            ],
        }
    workload = {
        "metadata": {
            "name": workload_name(rayservice),
            "namespace": ns,
            "labels": {LABEL_JOB_UID: meta["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": k8s.RAYSERVICE.api_version,
                    "kind": k8s.RAYSERVICE.kind,
                    "name": name,
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "queueName": queue,
            "podSets": [
                {"name": "head", "count": 1, "template": {"spec": {"containers": []}}},
                {
                    "name": worker,
                    "count": gpus,
                    "template": {
                        "spec": {
                            "containers": [{"name": "ray-worker", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
                        }
                    },
                },
            ],
        },
        "status": status,
    }
    return server.put(k8s.WORKLOAD, workload)


def workload_set_conditions(
    server: K8sApiServer,
    ns: str,
    name: str,
    conditions: Mapping[str, bool],
    messages: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Move an existing Workload's conditions (e.g. admit it, or evict it after preemption)."""
    obj = _require(server, k8s.WORKLOAD, ns, name)
    messages = messages or {}
    new = []
    for type_, value in conditions.items():
        true_reason, false_reason = _WORKLOAD_REASONS.get(type_, (type_, f"Not{type_}"))
        new.append(condition(type_, value, true_reason if value else false_reason, messages.get(type_, "")))
    merged = upsert_conditions((obj.get("status") or {}).get("conditions"), *new)
    return server.patch_object(k8s.WORKLOAD, name, ns, {"status": {"conditions": merged}}, status_only=True)


# --- KServe ------------------------------------------------------------------------------------


def inferenceservice_status(
    server: K8sApiServer,
    ns: str,
    name: str,
    *,
    ready: bool,
    copies: int = 1,
    url: str | None = None,
    failure: tuple[str, str] | None = None,
    model_failed: str | None = None,
) -> dict[str, Any]:
    """Play the KServe controller: write Ready/PredictorReady conditions, url and modelStatus.

    `failure=(reason, message)` sets PredictorReady=False with that reason (e.g. RevisionFailed);
    `model_failed` reports the model failing to load; `copies=0` with ready=True is a service
    scaled to zero.
    """
    _require(server, k8s.INFERENCESERVICE, ns, name)
    conds = [condition("Ready", ready, "Ready" if ready else "PredictorNotReady", "")]
    if failure is not None:
        conds.append(condition("PredictorReady", False, failure[0], failure[1]))
    else:
        conds.append(condition("PredictorReady", ready, "Ready" if ready else "Starting", ""))
    status: dict[str, Any] = {"conditions": conds, "modelStatus": {"copies": {"totalCopies": copies}}}
    if url:
        status["url"] = url
    if model_failed:
        status["modelStatus"].update(
            {
                "transitionStatus": "BlockedByFailedLoad",
                "states": {"activeModelState": "FailedToLoad", "targetModelState": "FailedToLoad"},
                "lastFailureInfo": {"reason": "ModelLoadFailed", "message": model_failed},
            }
        )
    return server.patch_object(k8s.INFERENCESERVICE, name, ns, {"status": status}, status_only=True)
