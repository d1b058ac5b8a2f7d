"""What a cluster backend tells an operator about one deployment: its Kubernetes Events, the
tails of its engine containers' logs (bounded, secrets redacted) and the startup markers its
Workload, pods, Events and engine log give (runtime.phases). Mixed into ClusterObjectBackend.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runtime import k8s
from runtime.k8s.reads import event_time
from runtime.manifests.common import LABEL_DEPLOYMENT_ID, LABEL_MANAGED_BY, MANAGED_BY
from runtime.phases import cluster_markers, log_markers
from runtime.redaction import redact
from runtime.spec import DeploymentSpec

# Bounds on what a log read may return: per container, lines then bytes (the API server applies
# both; the local engine's tail applies them here), and how many pods one request reads.
LOG_LINES_DEFAULT = 200
LOG_LINES_MAX = 2000
LOG_BYTES_DEFAULT = 64 * 1024
LOG_BYTES_MAX = 512 * 1024
LOG_PODS_MAX = 16
MARKER_LOG_LINES = 400  # read while weights load, to find the engine's log markers


def bounded(lines: int | None, max_bytes: int | None) -> tuple[int, int]:
    """The log bounds a caller asked for, clamped to the maxima (defaults when None)."""
    lines = LOG_LINES_DEFAULT if lines is None else max(1, min(int(lines), LOG_LINES_MAX))
    max_bytes = LOG_BYTES_DEFAULT if max_bytes is None else max(1, min(int(max_bytes), LOG_BYTES_MAX))
    return lines, max_bytes


def event_row(event: dict[str, Any]) -> dict[str, Any]:
    """A Kubernetes Event as a timeline row (the portal's own events have the same keys)."""
    involved = event.get("involvedObject") or {}
    return {
        "source": "kubernetes",
        "type": event.get("type") or "Normal",
        "reason": (event.get("reason") or "")[:64],
        "message": redact((event.get("message") or "")[:2000]),
        "count": int(event.get("count") or (event.get("series") or {}).get("count") or 1),
        "first": event.get("firstTimestamp") or event.get("eventTime") or event_time(event),
        "last": event_time(event),
        "object": f"{involved.get('kind', '')}/{involved.get('name', '')}",
    }


class ClusterInsight:
    """Events, log tails and startup markers of a deployment's cluster objects."""

    cluster: k8s.Cluster
    kind: k8s.Kind
    log_containers: tuple[str, ...] = ()  # engine containers, in the order to prefer them

    def pods(self, spec: DeploymentSpec) -> list[dict[str, Any]]:
        """The deployment's pods (the portal's labels reach them through the pod templates)."""
        selector = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_DEPLOYMENT_ID: str(spec.deployment_id)}
        pods = self.cluster.list(k8s.POD, spec.namespace, label_selector=selector)
        return sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", ""))

    def related_names(self, obj: dict | None, workload: dict | None, pods: list[dict]) -> set[str]:
        """Names of every object whose Events belong to the deployment: the job, the Workload,
        the pods, and for a RayService its Ray clusters."""
        names = {(o.get("metadata") or {}).get("name") for o in [obj, workload, *pods] if o}
        status = (obj or {}).get("status") or {}
        for side in ("activeServiceStatus", "pendingServiceStatus"):
            names.add((status.get(side) or {}).get("rayClusterName"))
        return {n for n in names if n}

    def _read(self, spec: DeploymentSpec) -> tuple[dict | None, dict | None, list[dict], list[dict]]:
        obj = self.cluster.get(self.kind, spec.name, spec.namespace)
        workload = self._workload(obj) if obj is not None else None  # type: ignore[attr-defined]
        pods = self.pods(spec)
        events = self.cluster.events_for(spec.namespace, self.related_names(obj, workload, pods) | {spec.name})
        return obj, workload, pods, events

    def events(self, spec: DeploymentSpec) -> list[dict[str, Any]]:
        """The Kubernetes Events of the deployment's objects, oldest first."""
        return [event_row(e) for e in self._read(spec)[3]]

    def _container(self, pod: dict) -> str | None:
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        return next((c for c in self.log_containers if c in names), names[0] if names else None)

    def logs(
        self, spec: DeploymentSpec, *, lines: int | None = None, max_bytes: int | None = None, secrets=()
    ) -> list[dict[str, Any]]:
        """Per pod (at most LOG_PODS_MAX), the tail of its engine container's log, redacted."""
        lines, max_bytes = bounded(lines, max_bytes)
        tails = []
        for pod in self.pods(spec)[:LOG_PODS_MAX]:
            name, container = pod["metadata"]["name"], self._container(pod)
            if container is None:
                continue
            try:
                text, error = (
                    self.cluster.pod_log(spec.namespace, name, container, tail_lines=lines, limit_bytes=max_bytes),
                    "",
                )
            except k8s.PermanentClusterError as failure:  # e.g. a container not started yet
                text, error = "", str(failure)
            tails.append(
                {
                    "pod": name,
                    "container": container,
                    "phase": (pod.get("status") or {}).get("phase", ""),
                    "text": redact(text, tuple(secrets)),
                    "error": error,
                    "truncated": len(text.encode()) >= max_bytes or text.count("\n") >= lines,
                }
            )
        return tails

    def startup(self, spec: DeploymentSpec) -> dict[str, Any]:
        """{"markers": phase → datetime, "events": timeline rows} from one read of the objects;
        the engine logs are read only while the pods run and the engine is not ready yet."""
        obj, workload, pods, events = self._read(spec)
        markers = cluster_markers(workload=workload, pods=pods, events=events, ready_object=obj)
        if "image_pulled" in markers and "engine_ready" not in markers:
            now = datetime.now(UTC)
            for pod in pods[:LOG_PODS_MAX]:
                container = self._container(pod)
                if container is None:
                    continue
                try:
                    text = self.cluster.pod_log(
                        spec.namespace,
                        pod["metadata"]["name"],
                        container,
                        tail_lines=MARKER_LOG_LINES,
                        limit_bytes=LOG_BYTES_DEFAULT,
                    )
                except k8s.PermanentClusterError:
                    continue
                found = log_markers(text, now=now)
                if "weights_loading" in found:
                    markers["weights_loading"] = max(
                        markers.get("weights_loading", found["weights_loading"]), found["weights_loading"]
                    )
        return {"markers": markers, "events": [event_row(e) for e in events]}
