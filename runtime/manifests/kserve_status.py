"""An InferenceService's status read back in the portal's terms (runtime.manifests.kserve renders
the object). Pure: a function of the status dict. KServe facts cite kserve/kserve v0.20.0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Condition reasons that mean "this will not become ready by waiting": a failed Knative
# revision (image missing, crash, progress deadline), or KServe unable to create it at all
# (e.g. an admission webhook refused the pod template). In Standard mode the progress deadline
# is the Deployment's fixed 600 s (reconcilers/deployment/deployment_reconciler.go,
# setDefaultDeploymentSpec), which KServe reports as PredictorReady=False/ProgressDeadlineExceeded
# (inference_service_status.go, PropagateRawStatus) while the Deployment keeps trying: a pod
# queued by Kueue or loading a large model passes it and still turns ready, so it is no failure.
FAILURE_REASONS = frozenset(
    {
        "RevisionFailed",
        "ProgressDeadlineExceeded",
        "ContainerMissing",
        "ReconcileFailed",
        "InvalidGPUAllocation",
        "InvalidWorkerSpecNotSet",
    }
)
# Most specific first: the first one that is not True explains why Ready is not.
_CONDITION_ORDER = (
    "PredictorConfigurationReady",
    "PredictorRouteReady",
    "PredictorReady",
    "IngressReady",
    "LatestDeploymentReady",
    "RoutesReady",
    "Ready",
)
_MODEL_FAILED_TRANSITIONS = frozenset({"BlockedByFailedLoad", "InvalidSpec"})
_RAW_MODES = frozenset({"RawDeployment", "Standard"})
_RAW_NOT_FAILED = frozenset({"ProgressDeadlineExceeded"})


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or [] if "type" in c}


def _model_failure(model_status: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when KServe reports that the model failed to load, else None."""
    states = model_status.get("states") or {}
    model_states = (states.get("activeModelState"), states.get("targetModelState"))
    transition = model_status.get("transitionStatus")
    if transition not in _MODEL_FAILED_TRANSITIONS and "FailedToLoad" not in model_states:
        return None
    info = model_status.get("lastFailureInfo") or {}
    message = info.get("message") or "the model failed to load"
    if info.get("exitCode"):
        message = f"{message} (exit code {info['exitCode']})"
    return info.get("reason") or "ModelLoadFailed", message


def _url(status: dict[str, Any]) -> str | None:
    """The external URL, else the cluster-local address."""
    return status.get("url") or (status.get("address") or {}).get("url") or None


def _first_condition(
    conditions: dict[str, dict[str, Any]], test: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """The most specific condition (in _CONDITION_ORDER) for which `test` holds."""
    return next((conditions[t] for t in _CONDITION_ORDER if t in conditions and test(conditions[t])), None)


def _explain(
    conditions: dict[str, dict[str, Any]], model_status: dict[str, Any], ready: bool | None, raw: bool
) -> tuple[bool, str, str]:
    """(failed, reason, message): a model failure, then a failed condition, then whatever
    condition is not True yet, in that order of importance."""
    model_failure = _model_failure(model_status)
    if model_failure is not None:
        return True, *model_failure
    terminal = FAILURE_REASONS - _RAW_NOT_FAILED if raw else FAILURE_REASONS
    failed = _first_condition(conditions, lambda c: c.get("status") == "False" and c.get("reason") in terminal)
    if failed is not None:
        return True, failed["reason"], failed.get("message", "")
    waiting = _first_condition(conditions, lambda c: c.get("status") != "True")
    if waiting is not None:
        reason = waiting.get("reason") or f"{waiting['type']}{waiting.get('status', 'Unknown')}"
        return False, reason, waiting.get("message", "")
    if ready:
        return False, "Ready", ""
    return False, "Pending", "KServe has not reported a status yet"


def kserve_status(obj: dict[str, Any]) -> dict[str, Any]:
    """What an InferenceService's status says, in the portal's terms.

    Returns `{"ready", "failed", "reason", "message", "url", "scaled_to_zero"}`:
    - ready: the `Ready` condition (True/False), None while absent or Unknown.
    - failed: the model failed to load (`modelStatus`), or a condition is False for a reason
      waiting will not fix (FAILURE_REASONS; in Standard mode not the Deployment's progress
      deadline). Ready=False alone is not a failure: KServe reports it for a stopped service and
      while a Standard-mode deployment starts.
    - scaled_to_zero: Knative mode, Ready, and KServe counts no ready pods
      (`modelStatus.copies.totalCopies` is 0 or omitted). Also true while the first pod of
      a scale-up from zero is still loading.

    `status.observedGeneration` is deliberately not compared with `metadata.generation`:
    KServe copies the Knative Service's generation into it, not the InferenceService's.
    """
    status = obj.get("status") or {}
    conditions = _conditions(status)
    model_status = status.get("modelStatus") or {}
    ready = {"True": True, "False": False}.get((conditions.get("Ready") or {}).get("status", ""))
    raw = status.get("deploymentMode") in _RAW_MODES
    failed, reason, message = _explain(conditions, model_status, ready, raw)

    copies = model_status.get("copies")
    scaled_to_zero = bool(ready and not raw and isinstance(copies, dict) and not copies.get("totalCopies"))
    if scaled_to_zero and reason == "Ready":
        reason, message = "ScaledToZero", "no pods; the next request starts one"
    return {
        "ready": ready,
        "failed": failed,
        "reason": reason,
        "message": message,
        "url": _url(status),
        "scaled_to_zero": scaled_to_zero,
    }
