"""KServe backend: the same request served by an InferenceService running vLLM.

Same lifecycle as kuberay: queued (Kueue Workload not admitted) → provisioning → ready, with
failures read from KServe's conditions and model status. A deployment with min replicas 0
scales to zero; it keeps its GPUs reserved in the portal's quota (see runtime.manifests.kserve).
"""

from __future__ import annotations

from typing import Any

from runtime import k8s
from runtime.backends.base import ClusterObjectBackend, annotation, stale, stamp
from runtime.manifests.common import ANNOTATION_GENERATION
from runtime.manifests.kserve import CONTAINER_NAME, kserve_status, render_inferenceservice
from runtime.spec import DeploymentSpec
from runtime.status import Observation, kueue_story, standard_conditions


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
                current = self.cluster.apply(desired)  # KServe rolls out a new revision itself
                events.append(("Normal", "Updated", f"Applied generation {spec.generation}."))
        return self._observe(spec, current, events)

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
            result.metrics_url = None  # scraped through Prometheus (pods sit behind Knative)
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
