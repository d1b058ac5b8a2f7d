"""The kuberay backend: a RayService running the Ray Serve LLM app, admitted by Kueue."""

from __future__ import annotations

import json
from typing import Any

from runtime import k8s
from runtime.backends.base import ClusterObjectBackend, annotation, digest, stale, stamp
from runtime.backends.rayresize import (
    ANNOTATION_RESIZING,
    asked_workers,
    resized_groups,
    resizing_story,
    serving_cluster,
    with_asked_workers,
    worker_counts,
)
from runtime.manifests.common import ANNOTATION_CLUSTER_HASH, PORT_METRICS, PORT_SERVE
from runtime.manifests.karpenter import ANNOTATION_DO_NOT_DISRUPT
from runtime.manifests.rayservice import SERVE_APP_NAME, pods_per_replica, render_rayservice
from runtime.manifests.topology import TAS_ANNOTATION_PREFIX
from runtime.spec import DeploymentSpec
from runtime.status import (
    Observation,
    active_cluster_name,
    rayservice_observation,
    ready_worker_pods,
    stuck_eviction,
    stuck_without_workload,
)


def _cluster_part(rayservice: dict) -> dict:
    """rayClusterConfig as far as a change to it needs a new Ray cluster: all of it except the
    worker pod counts, which move on the running cluster (runtime.backends.rayresize: Kueue takes
    them as a new Workload slice of the elastic job, no eviction)."""
    config = json.loads(json.dumps(rayservice["spec"]["rayClusterConfig"]))
    for group in config.get("workerGroupSpecs", []):
        for field in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(field, None)
    for group in [config.get("headGroupSpec") or {}, *config.get("workerGroupSpecs", [])]:
        # Kueue reads its topology annotations at admission only, Karpenter its do-not-disrupt
        # when it considers a node: a flavor gaining topology levels, or the portal starting to
        # annotate, must not tear down running Ray clusters (new ones carry them).
        metadata = (group.get("template") or {}).get("metadata") or {}
        kept = {
            k: v
            for k, v in (metadata.pop("annotations", None) or {}).items()
            if not k.startswith(TAS_ANNOTATION_PREFIX) and k != ANNOTATION_DO_NOT_DISRUPT
        }
        if kept:
            metadata["annotations"] = kept
    return config


def _counts(rayservice: dict) -> list[tuple]:
    groups = rayservice["spec"]["rayClusterConfig"].get("workerGroupSpecs", [])
    return [(g.get("replicas"), g.get("minReplicas"), g.get("maxReplicas")) for g in groups]


def change_impact(old: DeploymentSpec, new: DeploymentSpec) -> tuple[str, str]:
    """How a running RayService takes `new`, for the approval page (pure: renders both).

    The Serve application (serveConfigV2) and the worker counts change on the running Ray
    cluster; any other change to the Ray cluster (`_cluster_part`) replaces the RayService.
    """
    from runtime.platform import platform_spec

    platform = platform_spec()
    before, after = render_rayservice(old, platform), render_rayservice(new, platform)
    if digest(_cluster_part(before)) != digest(_cluster_part(after)):
        return "recreate", (
            "The Ray cluster settings change: the RayService is deleted and created again, so the endpoint "
            "stops answering until the new cluster is ready."
        )
    if _counts(before) == _counts(after):
        return "in_place", "Ray Serve redeploys the application on the running Ray cluster; the pods stay."
    if new.min_replicas > old.min_replicas:
        return "in_place", (
            "The running Ray cluster grows: its workers keep serving while Kueue admits the larger size "
            "(a new Workload slice); the new workers start once it is admitted and join the endpoint when ready."
        )
    return "in_place", (
        "The running Ray cluster takes the new worker range: no pod restarts; when it shrinks, the "
        "newest workers are removed and Kueue's Workload shrinks with them."
    )


class KubeRayBackend(ClusterObjectBackend):
    """RayService with a Ray Serve LLM app; Kueue admits it through the tenant's LocalQueue."""

    name = "kuberay"
    kind = k8s.RAYSERVICE
    log_containers = ("ray-worker", "ray-head")  # vLLM runs in the workers; the head holds Serve

    def desired(self, spec: DeploymentSpec) -> dict[str, Any]:
        obj = render_rayservice(spec, self.platform)
        stamp(obj, spec)[ANNOTATION_CLUSTER_HASH] = digest(_cluster_part(obj))
        self.expose_stamp(obj, spec)
        return obj

    @staticmethod
    def urls(spec: DeploymentSpec) -> tuple[str, str]:
        host = f"{spec.name}-serve-svc.{spec.namespace}.svc"
        head = f"{spec.name}-head-svc.{spec.namespace}.svc"
        return f"http://{host}:{PORT_SERVE}/v1", f"http://{head}:{PORT_METRICS}/metrics"

    def status(self, spec: DeploymentSpec, obj: dict, workload: dict | None) -> Observation:
        before = annotation(obj, ANNOTATION_RESIZING)
        obj = with_asked_workers(obj)
        obs = rayservice_observation(obj, workload, app_name=SERVE_APP_NAME, expected_generation=spec.generation)
        if (obs.reason == "WorkersNotReady" or before) and (cluster_name := active_cluster_name(obj)):
            # The worker count KubeRay mirrors into the RayService can stay behind (see
            # runtime.status.cluster_story), and says nothing of a resize: the pods of the active
            # cluster say.
            pods = self.cluster.list(k8s.POD, spec.namespace, label_selector={"ray.io/cluster": cluster_name})
            ready = ready_worker_pods(pods, cluster_name)
            obs = rayservice_observation(
                obj, workload, app_name=SERVE_APP_NAME, expected_generation=spec.generation, ready_workers=ready
            )
            if before and obs.reason in ("Ready", "WorkersNotReady"):
                story = resizing_story(
                    before=_int(before),
                    ready=ready,
                    target=asked_workers(obj) or 0,
                    waiting=_pending_reason(pods),
                )
                if story:
                    obs = _serving_while_resizing(obs, *story)
        if before is not None:
            # Not the approved spec yet, so the reconcile looks again until `_resize` sees the new
            # size run and removes the mark.
            obs.converged = False
        return obs

    def _observe(self, spec: DeploymentSpec, obj: dict, events: list) -> Observation:
        obs = super()._observe(spec, obj, events)
        if obs.state == "provisioning" and (why := self._pending_pod_reason(spec, obj)):
            obs.message = f"{obs.message} {why}"
            for condition in obs.conditions:
                if condition["type"] == "Ready":
                    condition["message"] = obs.message[:1000]
        obs.endpoint_url, obs.metrics_url = self.urls(spec)
        obs.endpoint_url = self.public_endpoint(spec, obj, obs.endpoint_url)
        return obs

    def _pending_pod_reason(self, spec: DeploymentSpec, obj: dict) -> str:
        """The scheduler's word on a worker that is not running (one LIST, only in that state)."""
        status = obj.get("status") or {}
        cluster_name = next(
            (
                (status.get(part) or {}).get("rayClusterName")
                for part in ("pendingServiceStatus", "activeServiceStatus")
                if (status.get(part) or {}).get("rayClusterName")
            ),
            None,
        )
        if not cluster_name:
            return ""
        return _pending_reason(
            self.cluster.list(k8s.POD, spec.namespace, label_selector={"ray.io/cluster": cluster_name})
        )

    def ensure(self, spec: DeploymentSpec) -> Observation:
        """Create or update the RayService so it matches `spec`; at most one write when unchanged
        specs need none."""
        desired = self.desired(spec)
        current = self.cluster.get(self.kind, spec.name, spec.namespace)
        events: list[tuple[str, str, str]] = []
        if current is None:
            current = self._create(spec, desired, events)
        else:
            want = desired["metadata"]["annotations"]
            if (current.get("metadata") or {}).get("deletionTimestamp"):
                return Observation(
                    exists=True,
                    state="provisioning",
                    reason="Recreating",
                    message="Waiting for the previous Ray cluster to be removed.",
                )
            if annotation(current, ANNOTATION_CLUSTER_HASH) != want[ANNOTATION_CLUSTER_HASH]:
                # upgradeStrategy None: KubeRay ignores rayClusterConfig changes (worker counts
                # aside, which `_resize` moves): recreate. RayServices from before every one was
                # an elastic job carry another hash and are replaced once here.
                self.cluster.delete(self.kind, spec.name, spec.namespace)
                return Observation(
                    exists=True,
                    state="provisioning",
                    reason="Recreating",
                    events=[("Normal", "Recreating", "Ray cluster settings changed; recreating the RayService.")],
                    message="Recreating the Ray cluster for the new spec.",
                )
            if spec.autoscaling:
                # The Ray autoscaler owns the worker replica count once running; a forced
                # apply of `replicas` would scale it back to the minimum on every update.
                for group in desired["spec"]["rayClusterConfig"].get("workerGroupSpecs", []):
                    group.pop("replicas", None)
            if stale(current, desired):
                self.expose(spec, desired, events)
                if stale(current, desired):  # not when only an exposure still pending was retried
                    current = self.cluster.apply(desired)
                    events.append(("Normal", "Updated", f"Applied generation {spec.generation}."))
                    current = self._resize(spec, current, events)
            elif _counts_edited(current, desired):
                # Counts edited on the RayService by hand move nothing on an elastic job (Kueue
                # reads the RayCluster's), but KubeRay rebuilds the RayCluster from them whenever
                # it updates it, and the portal reads them as what is asked: set them back.
                current = self.cluster.apply(desired)
                said = "Worker counts edited on the RayService were set back to the approved ones."
                events.append(("Warning", "Updated", said))
            elif annotation(current, ANNOTATION_RESIZING) is not None:
                current = self._resize(spec, current, events)  # a resize under way, or a patch to retry
        obs = self._observe(spec, current, events)
        if why := stuck_eviction(current, obs.conditions):
            said = f"{why}; the Ray cluster was suspended. Queued again for quota."
        elif stuck_without_workload(current, obs.conditions):
            said = "Suspended with no Kueue Workload (its worker counts were edited on the cluster): replaced."
        else:
            return obs
        # Its pods are gone already (suspended): replacing it loses nothing, frees what Kueue holds
        # for it, and the new RayService (the approved spec) queues for quota again.
        self.cluster.delete(self.kind, spec.name, spec.namespace)
        return Observation(
            exists=True,
            state="queued",
            reason="Requeued",
            message=said,
            conditions=obs.conditions,
            events=[*obs.events, ("Warning", "Requeued", said)],
        )

    def _resize(self, spec: DeploymentSpec, current: dict, events: list) -> dict:
        """Move the RayService's Ray cluster to the spec's worker counts in place (see
        runtime.backends.rayresize for why this path keeps serving), marking the RayService until
        the new size runs; returns the RayService as it now reads."""
        name = serving_cluster(current)
        raycluster = self.cluster.get(k8s.RAYCLUSTER, name, spec.namespace) if name else None
        marked = annotation(current, ANNOTATION_RESIZING)
        if raycluster is None:  # none yet: KubeRay builds it from the RayService's counts
            return current
        per = pods_per_replica(spec)
        wanted = {
            "replicas": None if spec.autoscaling else spec.min_replicas * per,
            "min_replicas": spec.min_replicas * per,
            "max_replicas": spec.max_replicas * per,
        }
        groups = resized_groups(raycluster, pods=[], **wanted)
        running = (worker_counts(raycluster["spec"]) or (None,))[0]
        if groups is not None and running is not None and worker_counts({"workerGroupSpecs": groups})[0] < running:
            # Shrinking: name the pods to remove (KubeRay picks none itself under the autoscaler).
            pods = self.cluster.list(k8s.POD, spec.namespace, label_selector={"ray.io/cluster": name})
            groups = resized_groups(raycluster, pods=pods, **wanted)
        if groups is None:
            ready = int((raycluster.get("status") or {}).get("readyWorkerReplicas") or 0)
            if marked is not None and ready >= spec.min_replicas * per:  # the new size runs
                current = self._mark(spec, None)
            return current
        if marked is None:  # first, so that a failed cluster patch is retried by the next reconcile
            current = self._mark(spec, str(running or 0))
        version = (raycluster.get("metadata") or {}).get("resourceVersion")
        try:
            self.cluster.patch_merge(
                k8s.RAYCLUSTER,
                name,
                spec.namespace,
                {"metadata": {"resourceVersion": version}, "spec": {"workerGroupSpecs": groups}},
            )
        except k8s.PermanentClusterError as error:
            if error.status != 409:
                raise
            return current  # the autoscaler or KubeRay wrote it since the read: the next reconcile tries again
        target = worker_counts({"workerGroupSpecs": groups})[0]
        events.append(
            (
                "Normal",
                "Resizing",
                f"Ray cluster {name}: {running} to {target} worker pods on the running cluster; "
                "Kueue admits the new count as a Workload slice.",
            )
        )
        return current

    def _mark(self, spec: DeploymentSpec, before: str | None) -> dict:
        """Set (or, with None, remove) the resize mark on the RayService."""
        body = {"metadata": {"annotations": {ANNOTATION_RESIZING: before}}}
        return self.cluster.patch_merge(self.kind, spec.name, spec.namespace, body)


def _counts_edited(current: dict, desired: dict) -> bool:
    """Whether the RayService's GPU worker counts differ from the desired ones; `replicas` only
    where the desired object sets it (not under the autoscaler, which owns it)."""
    have = worker_counts(((current.get("spec") or {}).get("rayClusterConfig")) or {})
    want = worker_counts(desired["spec"]["rayClusterConfig"])
    if have is None or want is None:
        return False
    return have[1:] != want[1:] or (want[0] is not None and have[0] != want[0])


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _pending_reason(pods: list[dict]) -> str:
    """The scheduler's word on the first worker pod that is not running, or ""."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") == "Pending" and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            name = (pod.get("metadata") or {}).get("name", "")
            for condition in status.get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                    return f"Pod {name} is Pending: {condition.get('message') or condition.get('reason', '')}"
            return f"Pod {name} is Pending."
    return ""


def _serving_while_resizing(obs: Observation, reason: str, message: str) -> Observation:
    """The Ray cluster serves on the workers it had while it grows: `ready`, saying so."""
    obs.state, obs.reason, obs.message = "ready", reason, message
    for condition in obs.conditions:
        if condition["type"] == "Ready":
            condition.update(status="True", reason=reason, message=message[:1000])
        elif condition["type"] == "Progressing":
            condition.update(status="True", reason=reason, message=message[:1000])
    return obs
