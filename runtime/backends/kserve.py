"""KServe backend: the same request served by an InferenceService running vLLM.

Same lifecycle as kuberay: queued (Kueue Workload not admitted) → provisioning → ready, with
failures read from KServe's conditions and model status. In Knative mode a deployment with min
replicas 0 scales to zero; it keeps its GPUs reserved in the portal's quota (see
runtime.manifests.kserve).

Kueue does not see the InferenceService: its pod integration makes one Workload per predictor
pod, `pod-<pod name>-<hash>`, owned by the pod (kubernetes-sigs/kueue v0.19.2
pkg/controller/jobs/pod; seen on the real control plane, ../shared/k8s README "KServe"). The
deployment's Workload is found through its pods (KServe labels them
`serving.kserve.io/inferenceservice: <name>`): the one still waiting, first in line, while any
waits; else the newest.
"""

from __future__ import annotations

from typing import Any

from runtime import k8s
from runtime.backends.base import ClusterObjectBackend, annotation, stale, stamp
from runtime.manifests.common import ANNOTATION_GENERATION, LABEL_JOB_UID, LABEL_MANAGED_BY, MANAGED_BY
from runtime.manifests.kserve import CONTAINER_NAME, LABEL_COMPONENT, LABEL_ISVC, render_inferenceservice
from runtime.manifests.kserve_status import kserve_status
from runtime.spec import DeploymentSpec
from runtime.status import Observation, current_workload, kueue_story, standard_conditions


def _condition_true(workload: dict, type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (workload.get("status") or {}).get("conditions") or []
    )


def _owner_uids(workload: dict) -> set[str]:
    """The uids a Workload stands for: its owners' and its job-uid label (both the pod's)."""
    meta = workload.get("metadata") or {}
    uids = {ref.get("uid") for ref in meta.get("ownerReferences") or []}
    uids.add((meta.get("labels") or {}).get(LABEL_JOB_UID))
    return {uid for uid in uids if uid}


def deployment_workload(workloads: list[dict]) -> dict | None:
    """The Workload that tells a KServe deployment's Kueue story, among its pods' Workloads: the
    oldest one neither admitted nor finished (first in line, so the position is the deployment's
    next pod's), else the current one (runtime.status.current_workload)."""
    waiting = [wl for wl in workloads if not _condition_true(wl, "Admitted") and not _condition_true(wl, "Finished")]
    if waiting:
        return min(waiting, key=lambda wl: (wl.get("metadata") or {}).get("creationTimestamp") or "")
    return current_workload(workloads)


def pod_workloads(workloads: list[dict], pods: list[dict]) -> list[dict]:
    """The Workloads owned by any of `pods`."""
    uids = {(p.get("metadata") or {}).get("uid") for p in pods}
    return [wl for wl in workloads if _owner_uids(wl) & uids]


def change_impact(old: DeploymentSpec, new: DeploymentSpec) -> tuple[str, str]:
    """How a running InferenceService takes `new`, for the approval page. In Standard mode the
    predictor is a Kubernetes Deployment: KServe applies the new pod template and the Deployment
    rolls it out (default RollingUpdate: a new pod starts beside the old ones before they go)."""
    same_pods = (old.model_source, old.flavor, old.engine, old.tensor_parallel_size, old.pipeline_parallel_size) == (
        new.model_source,
        new.flavor,
        new.engine,
        new.tensor_parallel_size,
        new.pipeline_parallel_size,
    )
    if same_pods and old.served_model_name == new.served_model_name:
        return "in_place", "The predictor is scaled; running pods stay."
    return "rolling", (
        "The predictor rolls out: new pods start beside the old ones, which serve until the new ones are "
        "ready (one extra replica's GPUs during the swap)."
    )


class KServeBackend(ClusterObjectBackend):
    """InferenceService instead of RayService; listing, Workload lookup and removal are shared."""

    name = "kserve"
    kind = k8s.INFERENCESERVICE
    log_containers = (CONTAINER_NAME,)

    def desired(self, spec: DeploymentSpec) -> dict[str, Any]:
        obj = render_inferenceservice(spec, self.platform)
        stamp(obj, spec)
        self.expose_stamp(obj, spec)
        return obj

    def ensure(self, spec: DeploymentSpec) -> Observation:
        desired = self.desired(spec)
        current = self.cluster.get(self.kind, spec.name, spec.namespace)
        events: list[tuple[str, str, str]] = []
        if current is None:
            current = self._create(spec, desired, events)
        elif stale(current, desired):
            self.expose(spec, desired, events)
            if stale(current, desired):  # not when only an exposure still pending was retried
                current = self.cluster.apply(desired)  # KServe rolls the Deployment (or revision) itself
                events.append(("Normal", "Updated", f"Applied generation {spec.generation}."))
        return self._observe(spec, current, events)

    def predictor_pods(self, namespace: str, name: str) -> list[dict]:
        """The InferenceService's predictor pods (KServe's labels, both modes)."""
        return self.cluster.list(k8s.POD, namespace, label_selector={LABEL_ISVC: name, LABEL_COMPONENT: "predictor"})

    def _workload(self, obj: dict) -> dict | None:
        """The Workload of the predictor's pods (`deployment_workload`); None before any pod."""
        meta = obj.get("metadata") or {}
        pods = self.predictor_pods(meta.get("namespace", ""), meta.get("name", ""))
        if not pods:
            return None
        return deployment_workload(pod_workloads(self.cluster.list(k8s.WORKLOAD, meta["namespace"]), pods))

    def index_workloads(
        self, namespace: str, workloads: list[dict], owned: dict[int, dict[str, Any]] | None
    ) -> dict[str, dict]:
        """Every Workload by its job uid (as every backend has it), and each InferenceService's
        by the InferenceService's uid, found through its pods: Kueue's pod integration makes one
        Workload per predictor pod, owned by the pod (kubernetes-sigs/kueue v0.19.2
        pkg/controller/jobs/pod). Lists the InferenceServices unless `owned` gives them, and the
        portal's pods when there are any."""
        found = super().index_workloads(namespace, workloads, owned)
        if owned is None:
            owned = super().list_owned(namespace)
        if not owned:
            return found
        by_isvc: dict[str, list[dict]] = {}
        for pod in self.cluster.list(k8s.POD, namespace, label_selector={LABEL_MANAGED_BY: MANAGED_BY}):
            name = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ISVC)
            if name:
                by_isvc.setdefault(name, []).append(pod)
        for obj in owned.values():
            meta = obj.get("metadata") or {}
            mine = pod_workloads(workloads, by_isvc.get(meta.get("name"), []))
            if meta.get("uid") and mine:
                found[meta["uid"]] = deployment_workload(mine)
        return found

    def status(self, spec: DeploymentSpec, obj: dict, workload: dict | None) -> Observation:
        status = kserve_status(obj)
        admitted, q_reason, q_message, q_events = kueue_story(workload)
        result = Observation(
            exists=True,
            uid=(obj.get("metadata") or {}).get("uid"),
            converged=annotation(obj, ANNOTATION_GENERATION) == str(spec.generation) and status["ready"] is True,
            events=q_events,
            endpoint_url=None,
            metrics_url=None,
        )
        if status["failed"]:
            result.state, result.reason = "failed", status["reason"] or "Failed"
        elif status["ready"]:
            result.state, result.reason = "ready", "ScaledToZero" if status["scaled_to_zero"] else "Ready"
        elif admitted is False or (admitted is None and not obj.get("status")):
            result.state, result.reason = "queued", q_reason
        else:
            result.state, result.reason = "provisioning", status["reason"] or "Provisioning"
        result.message = status["message"] or (q_message if result.state == "queued" else "")
        if status["scaled_to_zero"]:
            result.message = "Scaled to zero: the first request wakes it (GPUs stay reserved)."
        if status["url"]:
            result.endpoint_url = self.public_endpoint(spec, obj, status["url"].rstrip("/") + "/v1")
            result.metrics_url = None  # read from the pods or through Prometheus, not one URL
        result.conditions = standard_conditions(
            ready=(result.state == "ready", result.reason, result.message),
            admitted=(admitted, q_reason, q_message),
            progressing=(
                result.state in ("queued", "provisioning"),
                "Starting" if result.state in ("queued", "provisioning") else "Stable",
                "",
            ),
            degraded=(
                result.state == "failed",
                result.reason if result.state == "failed" else "Healthy",
                result.message if result.state == "failed" else "",
            ),
        )
        return result
