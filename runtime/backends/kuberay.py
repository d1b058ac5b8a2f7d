"""The kuberay backend: a RayService running the Ray Serve LLM app, admitted by Kueue."""

from __future__ import annotations

import json
from typing import Any

from runtime import k8s
from runtime.backends.base import ClusterObjectBackend, annotation, digest, stale, stamp
from runtime.manifests.common import ANNOTATION_CLUSTER_HASH, PORT_METRICS, PORT_SERVE
from runtime.manifests.karpenter import ANNOTATION_DO_NOT_DISRUPT
from runtime.manifests.rayservice import SERVE_APP_NAME, render_rayservice
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


def _cluster_part(rayservice: dict, *, autoscaling: bool = False) -> dict:
    """rayClusterConfig as far as a change to it needs a new Ray cluster: all of it, worker pod
    counts included, except `replicas` under the Ray autoscaler (which owns it).

    Kueue admits a RayService's pod counts once: patching `replicas` / `minReplicas` /
    `maxReplicas` in place makes Kueue delete the Workload that no longer matches and suspend
    the job, KubeRay deletes every pod (the head too), and when min, max and replicas all change
    Kueue never creates a new Workload (Kueue 0.19.2 with KubeRay 1.6.2, tests/cluster/
    test_replica_edit.py; kubernetes-sigs/kueue pkg/controller/jobframework/reconciler.go v0.19.2,
    "Deleted not matching Workload"). So a count change replaces the RayService: a new object,
    a new Workload, admitted for the new size.
    """
    config = json.loads(json.dumps(rayservice["spec"]["rayClusterConfig"]))
    for group in config.get("workerGroupSpecs", []):
        if autoscaling:
            group.pop("replicas", None)
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

    Only the Serve application (serveConfigV2) is updated in place. Any change to the Ray
    cluster, worker counts included (see `_cluster_part`), replaces the RayService.
    """
    from runtime.platform import platform_spec

    platform = platform_spec()
    before, after = render_rayservice(old, platform), render_rayservice(new, platform)
    if before["spec"]["rayClusterConfig"] == after["spec"]["rayClusterConfig"]:
        return "in_place", "Ray Serve redeploys the application on the running Ray cluster; the pods stay."
    if digest(_cluster_part(before, autoscaling=new.autoscaling)) == digest(
        _cluster_part(after, autoscaling=new.autoscaling)
    ):
        return "in_place", "The Ray autoscaler takes the new replica count within the admitted range; the pods stay."
    if _counts(before) != _counts(after):
        return "recreate", (
            "The worker count changes: Kueue cannot resize an admitted Ray cluster, so the RayService is "
            "replaced and admitted again for the new size; the endpoint stops answering until the new "
            "pods are ready."
        )
    return "recreate", (
        "The Ray cluster settings change: the RayService is deleted and created again, so the endpoint "
        "stops answering until the new cluster is ready."
    )


class KubeRayBackend(ClusterObjectBackend):
    """RayService with a Ray Serve LLM app; Kueue admits it through the tenant's LocalQueue."""

    name = "kuberay"
    kind = k8s.RAYSERVICE
    log_containers = ("ray-worker", "ray-head")  # vLLM runs in the workers; the head holds Serve

    def desired(self, spec: DeploymentSpec) -> dict[str, Any]:
        obj = render_rayservice(spec, self.platform)
        stamp(obj, spec)[ANNOTATION_CLUSTER_HASH] = digest(_cluster_part(obj, autoscaling=spec.autoscaling))
        self.expose_stamp(obj, spec)
        return obj

    @staticmethod
    def urls(spec: DeploymentSpec) -> tuple[str, str]:
        host = f"{spec.name}-serve-svc.{spec.namespace}.svc"
        head = f"{spec.name}-head-svc.{spec.namespace}.svc"
        return f"http://{host}:{PORT_SERVE}/v1", f"http://{head}:{PORT_METRICS}/metrics"

    def status(self, spec: DeploymentSpec, obj: dict, workload: dict | None) -> Observation:
        obs = rayservice_observation(obj, workload, app_name=SERVE_APP_NAME, expected_generation=spec.generation)
        if obs.reason == "WorkersNotReady" and (cluster_name := active_cluster_name(obj)):
            # The worker count KubeRay mirrors into the RayService can stay behind (see
            # runtime.status.cluster_story): only then, the pods of the active cluster say.
            pods = self.cluster.list(k8s.POD, spec.namespace, label_selector={"ray.io/cluster": cluster_name})
            obs = rayservice_observation(
                obj,
                workload,
                app_name=SERVE_APP_NAME,
                expected_generation=spec.generation,
                ready_workers=ready_worker_pods(pods, cluster_name),
            )
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
        for pod in self.cluster.list(k8s.POD, spec.namespace, label_selector={"ray.io/cluster": cluster_name}):
            status = pod.get("status") or {}
            if status.get("phase") == "Pending":
                for condition in status.get("conditions") or []:
                    if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                        name = (pod.get("metadata") or {}).get("name", "")
                        return f"Pod {name} is Pending: {condition.get('message') or condition.get('reason', '')}"
                return f"Pod {(pod.get('metadata') or {}).get('name', '')} is Pending."
        return ""

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
                # upgradeStrategy None: KubeRay ignores rayClusterConfig changes, and Kueue cannot
                # resize an admitted one (`_cluster_part`): recreate.
                self.cluster.delete(self.kind, spec.name, spec.namespace)
                return Observation(
                    exists=True,
                    state="provisioning",
                    reason="Recreating",
                    events=[("Normal", "Recreating", "Ray cluster settings changed; recreating the RayService.")],
                    message="Recreating the Ray cluster for the new spec.",
                )
            if stale(current, desired):
                if spec.autoscaling:
                    # The Ray autoscaler owns the worker replica count once running; a forced
                    # apply of `replicas` would scale it back to the minimum on every update.
                    for group in desired["spec"]["rayClusterConfig"].get("workerGroupSpecs", []):
                        group.pop("replicas", None)
                self.expose(spec, desired, events)
                if stale(current, desired):  # not when only an exposure still pending was retried
                    current = self.cluster.apply(desired)
                    events.append(("Normal", "Updated", f"Applied generation {spec.generation}."))
        obs = self._observe(spec, current, events)
        if why := stuck_eviction(current, obs.conditions):
            said = f"Preempted by Kueue ({why}); the Ray cluster was suspended. Queued again for quota."
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
