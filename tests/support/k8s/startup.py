"""A deployment's start as the cluster would show it: pods with their conditions, the kubelet's
Events and an engine log — what KubeRay, the scheduler and the kubelet write, written here the
way `tests.support.operators` writes the operators' status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from runtime import k8s
from runtime.manifests.common import LABEL_DEPLOYMENT_ID, LABEL_MANAGED_BY, MANAGED_BY
from tests.support.k8s.server import K8sApiServer


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def vllm_line(at: datetime, message: str, *, process: str = "EngineCore_DP0 pid=91") -> str:
    """One vLLM log line, in vLLM's own format (month-day and time, UTC in a pod)."""
    return f"({process}) INFO {at.astimezone(UTC).strftime('%m-%d %H:%M:%S')} [core.py:12] {message}\n"


def put_pod(
    api: K8sApiServer,
    namespace: str,
    name: str,
    deployment_id: int,
    *,
    container: str = "ray-worker",
    scheduled: datetime | None = None,
    started: datetime | None = None,
    ready: datetime | None = None,
) -> dict[str, Any]:
    """A portal pod of the deployment with PodScheduled / Ready conditions at the given times."""
    conditions = []
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(scheduled)})
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": iso(ready or scheduled or datetime.now(UTC)),
        }
    )
    statuses = [{"name": container, "state": {"running": {"startedAt": iso(started)}}}] if started else []
    return api.put(
        k8s.POD,
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_DEPLOYMENT_ID: str(deployment_id)},
            },
            "spec": {"containers": [{"name": container}]},
            "status": {
                "phase": "Running" if started else "Pending",
                "conditions": conditions,
                "containerStatuses": statuses,
            },
        },
    )


def put_event(
    api: K8sApiServer,
    namespace: str,
    involved: tuple[str, str],
    reason: str,
    message: str,
    at: datetime,
    *,
    type_: str = "Normal",
    count: int = 1,
) -> dict[str, Any]:
    """A core/v1 Event about `involved` = (kind, name)."""
    kind, name = involved
    return api.put(
        k8s.EVENT,
        {
            "metadata": {"name": f"{name}.{reason.lower()}.{int(at.timestamp())}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
            "reason": reason,
            "message": message,
            "type": type_,
            "count": count,
            "firstTimestamp": iso(at - timedelta(seconds=count - 1)),
            "lastTimestamp": iso(at),
        },
    )
