"""KServe backend: the same request served by an InferenceService running vLLM.

Same lifecycle as kuberay: queued (Kueue Workload not admitted) → provisioning → ready, with
failures read from KServe's conditions and model status. A deployment with min replicas 0
scales to zero; it keeps its GPUs reserved in the portal's quota (see runtime.kserve).
"""

from __future__ import annotations

from typing import Any

from runtime import k8s
from runtime.backends import ANNOTATION_GENERATION, ANNOTATION_SPEC_HASH, KubeRayBackend, digest
from runtime.kserve import kserve_status, render_inferenceservice
from runtime.spec import DeploymentSpec
from runtime.status import Observation, absent_observation, cond, kueue_story


class KServeBackend(KubeRayBackend):
    """InferenceService instead of RayService; listing, Workload lookup and removal are shared."""

    name = "kserve"
    kind = k8s.INFERENCESERVICE

    def desired(self, spec: DeploymentSpec) -> dict[str, Any]:
        obj = render_inferenceservice(spec, self.platform)
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations[ANNOTATION_GENERATION] = str(spec.generation)
        annotations[ANNOTATION_SPEC_HASH] = digest(obj["spec"])
        return obj

    def ensure(self, spec: DeploymentSpec) -> Observation:
        desired = self.desired(spec)
        current = self.cluster.get(self.kind, spec.name, spec.namespace)
        events: list[tuple[str, str, str]] = []
        if current is None:
            current = self.cluster.apply(desired)
            events.append(("Normal", "Created", f"InferenceService {spec.name} created in {spec.namespace}."))
        elif ((current.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH) != desired[
            "metadata"
        ]["annotations"][ANNOTATION_SPEC_HASH]:
            current = self.cluster.apply(desired)  # KServe rolls out a new revision itself
            events.append(("Normal", "Updated", f"Applied generation {spec.generation}."))
        return self._observe(spec, current, events)

    def _observe(self, spec: DeploymentSpec, obj: dict, events: list) -> Observation:
        return self._status(spec, obj, self._workload(obj), events)

    def sweep_observation(self, spec: DeploymentSpec, obj: dict, workloads: dict[str, dict]) -> Observation:
        uid = (obj.get("metadata") or {}).get("uid")
        return self._status(spec, obj, workloads.get(uid), [])

    def _status(self, spec: DeploymentSpec, obj: dict, workload: dict | None, events: list) -> Observation:
        status = kserve_status(obj)
        admitted, q_reason, q_message, q_events = kueue_story(workload)
        ours = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_GENERATION)
        result = Observation(
            exists=True,
            uid=(obj.get("metadata") or {}).get("uid"),
            converged=ours == str(spec.generation) and status["ready"] is True,
            events=events + q_events,
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
            result.endpoint_url = status["url"].rstrip("/") + "/v1"
            result.metrics_url = None  # scraped through Prometheus (pods sit behind Knative)
        result.conditions = [
            cond("Ready", result.state == "ready", result.reason, result.message),
            cond("Admitted", admitted, q_reason, q_message),
            cond(
                "Progressing",
                result.state in ("queued", "provisioning"),
                "Starting" if result.state in ("queued", "provisioning") else "Stable",
                "",
            ),
            cond(
                "Degraded",
                result.state == "failed",
                result.reason if result.state == "failed" else "Healthy",
                result.message if result.state == "failed" else "",
            ),
        ]
        return result

    def observe(self, spec: DeploymentSpec) -> Observation:
        current = self.cluster.get(self.kind, spec.name, spec.namespace)
        if current is None:
            return absent_observation(reason="NotFound", message="The InferenceService does not exist.")
        return self._observe(spec, current, [])
