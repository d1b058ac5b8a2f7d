"""The kuberay backend: a RayService running the Ray Serve LLM app, admitted by Kueue."""

from __future__ import annotations

import json
from typing import Any

from runtime import k8s
from runtime.backends.base import ClusterObjectBackend, annotation, digest, stamp
from runtime.manifests.common import ANNOTATION_CLUSTER_HASH, ANNOTATION_SPEC_HASH, PORT_METRICS, PORT_SERVE
from runtime.manifests.rayservice import SERVE_APP_NAME, render_rayservice
from runtime.manifests.topology import TAS_ANNOTATION_PREFIX
from runtime.spec import DeploymentSpec
from runtime.status import Observation, rayservice_observation


def _cluster_part(rayservice: dict) -> dict:
    """rayClusterConfig without worker replica counts: KubeRay updates those in place, while any
    other change needs a new Ray cluster (which upgradeStrategy None never creates by itself)."""
    config = json.loads(json.dumps(rayservice["spec"]["rayClusterConfig"]))
    for group in config.get("workerGroupSpecs", []):
        for key in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(key, None)
        # Kueue reads its topology annotations at admission only: a flavor gaining topology
        # levels must not tear down running Ray clusters (new ones are placed by them).
        metadata = (group.get("template") or {}).get("metadata") or {}
        kept = {
            k: v
            for k, v in (metadata.pop("annotations", None) or {}).items()
            if not k.startswith(TAS_ANNOTATION_PREFIX)
        }
        if kept:
            metadata["annotations"] = kept
    return config


def change_impact(old: DeploymentSpec, new: DeploymentSpec) -> tuple[str, str]:
    """How a running RayService takes `new`, for the approval page (pure: renders both).

    Only the Serve application (serveConfigV2) is updated in place. A worker replica change is
    not: seen on Kueue 0.19.2 with KubeRay 1.6.2 (../shared/ARCHITECTURE.md, "Seen on the real
    control plane"), Kueue deletes the Workload that no longer matches the pod counts and
    suspends the job, KubeRay deletes every pod (head included), and Kueue re-admits it. Any
    other cluster change recreates the RayService (upgradeStrategy None, `ensure`).
    """
    from runtime.platform import platform_spec

    platform = platform_spec()
    before, after = render_rayservice(old, platform), render_rayservice(new, platform)
    if before["spec"]["rayClusterConfig"] == after["spec"]["rayClusterConfig"]:
        return "in_place", "Ray Serve redeploys the application on the running Ray cluster; the pods stay."
    if digest(_cluster_part(before)) == digest(_cluster_part(after)):
        return "recreate", (
            "The worker count changes: Kueue re-admits the workload and every pod (the head too) is "
            "recreated, so the endpoint stops answering until the new pods are ready."
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
        stamp(obj, spec)[ANNOTATION_CLUSTER_HASH] = digest(_cluster_part(obj))
        self.expose_stamp(obj, spec)
        return obj

    @staticmethod
    def urls(spec: DeploymentSpec) -> tuple[str, str]:
        host = f"{spec.name}-serve-svc.{spec.namespace}.svc"
        head = f"{spec.name}-head-svc.{spec.namespace}.svc"
        return f"http://{host}:{PORT_SERVE}/v1", f"http://{head}:{PORT_METRICS}/metrics"

    def status(self, spec: DeploymentSpec, obj: dict, workload: dict | None) -> Observation:
        return rayservice_observation(obj, workload, app_name=SERVE_APP_NAME, expected_generation=spec.generation)

    def _observe(self, spec: DeploymentSpec, obj: dict, events: list) -> Observation:
        obs = super()._observe(spec, obj, events)
        obs.endpoint_url, obs.metrics_url = self.urls(spec)
        obs.endpoint_url = self.public_endpoint(spec, obs.endpoint_url)
        return obs

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
                # upgradeStrategy None: KubeRay ignores rayClusterConfig changes, so recreate.
                self.cluster.delete(self.kind, spec.name, spec.namespace)
                return Observation(
                    exists=True,
                    state="provisioning",
                    reason="Recreating",
                    events=[("Normal", "Recreating", "Ray cluster settings changed; recreating the RayService.")],
                    message="Recreating the Ray cluster for the new spec.",
                )
            if annotation(current, ANNOTATION_SPEC_HASH) != want[ANNOTATION_SPEC_HASH]:
                if spec.autoscaling:
                    # The Ray autoscaler owns the worker replica count once running; a forced
                    # apply of `replicas` would scale it back to the minimum on every update.
                    for group in desired["spec"]["rayClusterConfig"].get("workerGroupSpecs", []):
                        group.pop("replicas", None)
                self.expose(spec)
                current = self.cluster.apply(desired)
                events.append(("Normal", "Updated", f"Applied generation {spec.generation}."))
        return self._observe(spec, current, events)
