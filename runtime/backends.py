"""Runtime backends behind one interface: kuberay (RayService), kserve (InferenceService), local.

A backend knows how to make a deployment's workload exist and match its spec (`ensure`), read
it (`observe`), remove it (`remove`) and list what it owns in a namespace (`list_owned`, used by
the sweep). The reconciler decides *when*; backends only know *how*.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Protocol

from runtime import k8s
from runtime.manifests import SERVE_APP_NAME, render_rayservice
from runtime.spec import (
    LABEL_DEPLOYMENT_ID,
    LABEL_JOB_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    DeploymentSpec,
    PlatformSpec,
)
from runtime.status import Observation, absent_observation, rayservice_observation

ANNOTATION_GENERATION = "llm-portal.io/generation"
ANNOTATION_SPEC_HASH = "llm-portal.io/spec-hash"
ANNOTATION_CLUSTER_HASH = "llm-portal.io/cluster-hash"


class Backend(Protocol):
    name: str

    def ensure(self, spec: DeploymentSpec) -> Observation: ...

    def observe(self, spec: DeploymentSpec) -> Observation: ...

    def remove(self, spec: DeploymentSpec) -> bool: ...

    def list_owned(self, namespace: str) -> dict[int, dict[str, Any]]: ...


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _cluster_part(rayservice: dict) -> dict:
    """rayClusterConfig without worker replica counts: KubeRay updates those in place, while any
    other change needs a new Ray cluster (which upgradeStrategy None never creates by itself)."""
    config = json.loads(json.dumps(rayservice["spec"]["rayClusterConfig"]))
    for group in config.get("workerGroupSpecs", []):
        for key in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(key, None)
    return config


class KubeRayBackend:
    """RayService with a Ray Serve LLM app; Kueue admits it through the tenant's LocalQueue."""

    name = "kuberay"
    kind = k8s.RAYSERVICE

    def __init__(self, cluster: k8s.Cluster, platform: PlatformSpec):
        self.cluster = cluster
        self.platform = platform

    def desired(self, spec: DeploymentSpec) -> dict[str, Any]:
        obj = render_rayservice(spec, self.platform)
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations[ANNOTATION_GENERATION] = str(spec.generation)
        annotations[ANNOTATION_SPEC_HASH] = digest(obj["spec"])
        annotations[ANNOTATION_CLUSTER_HASH] = digest(_cluster_part(obj))
        return obj

    @staticmethod
    def urls(spec: DeploymentSpec) -> tuple[str, str]:
        host = f"{spec.name}-serve-svc.{spec.namespace}.svc"
        head = f"{spec.name}-head-svc.{spec.namespace}.svc"
        return f"http://{host}:8000/v1", f"http://{head}:8080/metrics"

    def _workload(self, obj: dict) -> dict | None:
        uid = (obj.get("metadata") or {}).get("uid")
        if not uid:
            return None
        found = self.cluster.list(k8s.WORKLOAD, obj["metadata"]["namespace"], label_selector={LABEL_JOB_UID: uid})
        return found[0] if found else None

    def _observe(self, spec: DeploymentSpec, obj: dict, events: list) -> Observation:
        obs = rayservice_observation(
            obj, self._workload(obj), app_name=SERVE_APP_NAME, expected_generation=spec.generation
        )
        obs.endpoint_url, obs.metrics_url = self.urls(spec)
        obs.events = events + obs.events
        return obs

    def ensure(self, spec: DeploymentSpec) -> Observation:
        """Create or update the RayService so it matches `spec`; at most one write when unchanged
        specs need none."""
        desired = self.desired(spec)
        current = self.cluster.get(self.kind, spec.name, spec.namespace)
        events: list[tuple[str, str, str]] = []
        if current is None:
            current = self.cluster.apply(desired)
            events.append(("Normal", "Created", f"RayService {spec.name} created in {spec.namespace}."))
        else:
            have = (current.get("metadata") or {}).get("annotations") or {}
            want = desired["metadata"]["annotations"]
            if (current.get("metadata") or {}).get("deletionTimestamp"):
                return Observation(
                    exists=True,
                    state="provisioning",
                    reason="Recreating",
                    message="Waiting for the previous Ray cluster to be removed.",
                )
            if have.get(ANNOTATION_CLUSTER_HASH) != want[ANNOTATION_CLUSTER_HASH]:
                # upgradeStrategy None: KubeRay ignores rayClusterConfig changes, so recreate.
                self.cluster.delete(self.kind, spec.name, spec.namespace)
                return Observation(
                    exists=True,
                    state="provisioning",
                    reason="Recreating",
                    events=[("Normal", "Recreating", "Ray cluster settings changed; recreating the RayService.")],
                    message="Recreating the Ray cluster for the new spec.",
                )
            if have.get(ANNOTATION_SPEC_HASH) != want[ANNOTATION_SPEC_HASH]:
                if spec.autoscaling:
                    # The Ray autoscaler owns the worker replica count once running; a forced
                    # apply of `replicas` would scale it back to the minimum on every update.
                    for group in desired["spec"]["rayClusterConfig"].get("workerGroupSpecs", []):
                        group.pop("replicas", None)
                current = self.cluster.apply(desired)
                events.append(("Normal", "Updated", f"Applied generation {spec.generation}."))
        return self._observe(spec, current, events)

    def observe(self, spec: DeploymentSpec) -> Observation:
        current = self.cluster.get(self.kind, spec.name, spec.namespace)
        if current is None:
            return absent_observation(reason="NotFound", message="The RayService does not exist.")
        return self._observe(spec, current, [])

    def remove(self, spec: DeploymentSpec) -> bool:
        """Delete the RayService; True once it is gone (finalizers may keep it a while)."""
        if self.cluster.get(self.kind, spec.name, spec.namespace) is None:
            return True
        self.cluster.delete(self.kind, spec.name, spec.namespace)
        return self.cluster.get(self.kind, spec.name, spec.namespace) is None

    def list_owned(self, namespace: str) -> dict[int, dict[str, Any]]:
        owned = {}
        for obj in self.cluster.list(self.kind, namespace, label_selector={LABEL_MANAGED_BY: MANAGED_BY}):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            try:
                owned[int(labels.get(LABEL_DEPLOYMENT_ID, ""))] = obj
            except ValueError:
                continue
        return owned

    def list_workloads(self, namespace: str) -> dict[str, dict]:
        by_uid = {}
        for wl in self.cluster.list(k8s.WORKLOAD, namespace):
            uid = ((wl.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_UID)
            if uid:
                by_uid[uid] = wl
        return by_uid

    def sweep_observation(self, spec: DeploymentSpec, obj: dict, workloads: dict[str, dict]) -> Observation:
        """Observation from objects already listed by the sweep (no extra API calls)."""
        uid = (obj.get("metadata") or {}).get("uid")
        return rayservice_observation(
            obj, workloads.get(uid), app_name=SERVE_APP_NAME, expected_generation=spec.generation
        )


_cluster_lock = threading.Lock()
_clusters: dict[tuple, k8s.Cluster] = {}


def get_cluster() -> k8s.Cluster:
    """The process-wide cluster client for the current settings (tests change the URL)."""
    from django.conf import settings

    key = (settings.KUBERNETES_URL, settings.KUBECONFIG, settings.KUBERNETES_TIMEOUT_SECONDS)
    with _cluster_lock:
        if key not in _clusters:
            if not settings.KUBERNETES_URL and not settings.KUBECONFIG and not _in_cluster():
                raise k8s.PermanentClusterError(
                    "No Kubernetes cluster is configured: set KUBERNETES_URL or KUBECONFIG "
                    "(or run the portal in the cluster)."
                )
            _clusters[key] = k8s.Cluster.from_settings()
        return _clusters[key]


def _in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def get_backend(name: str) -> Backend:
    """The backend for a deployment's `backend` field."""
    from runtime.platform import platform_spec

    if name == "kuberay":
        return KubeRayBackend(get_cluster(), platform_spec())
    if name == "kserve":
        from runtime.kserve_backend import KServeBackend

        return KServeBackend(get_cluster(), platform_spec())
    if name == "local":
        from runtime.local import LocalBackend

        return LocalBackend.instance()
    raise ValueError(f"unknown backend {name!r}")
