"""Readiness of the kserve backend's install: KServe keeps the portal's annotations off the
predictor's pod template (both modes), and, in Knative mode, Knative Serving is there with the
pod-spec features the portal's predictor uses, its queue-proxy sized as the quota assumes, and no
Gateway in front (runtime.manifests.kserve says why for each).

Knative's feature flags are off by default (knative/serving v0.48.1, the release KServe v0.20.0
builds with: config/core/configmaps/features.yaml, pkg/apis/config/features.go); with one off,
Knative's webhook refuses the revision and KServe reports the InferenceService failed.
"""

from __future__ import annotations

import json
from typing import Any

from runtime import k8s
from runtime.manifests.kserve import KNATIVE_QUEUE_PROXY_CPU_MILLIS, MODE_KNATIVE, PORTAL_ANNOTATIONS
from runtime.readiness_base import AMBER, GREEN, RED, Check, ReadinessConfig, cannot_read, denied

KSERVE_CONFIG = ("kserve", "inferenceservice-config")  # KServe's install: namespace, ConfigMap
KNATIVE_NAMESPACE = "knative-serving"
KNATIVE_GROUP = "serving.knative.dev"
# Every pod the portal renders selects its flavor and tolerates the GPU taint.
ALWAYS = ("kubernetes.podspec-nodeselector", "kubernetes.podspec-tolerations")
# The model cache is a writable PersistentVolumeClaim in the pod template (Hugging Face ids).
CACHE = ("kubernetes.podspec-persistent-volume-claim", "kubernetes.podspec-persistent-volume-write")


def check_knative(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """The kserve backend's install checks (none when the backend is not enabled)."""
    if "kserve" not in config.backends or "serving.kserve.io" not in cluster.api_groups():
        return []  # not enabled, or not installed (check_apis says so)
    checks = [check_annotation_propagation(cluster)]
    if config.kserve_mode != MODE_KNATIVE:
        return checks
    key, title = "knative:api", f"Knative Serving ({KNATIVE_GROUP}) for KServe's Knative mode"
    if KNATIVE_GROUP not in cluster.api_groups():
        detail = f"KSERVE_DEPLOYMENT_MODE=Knative, but {KNATIVE_GROUP} is not served: KServe refuses every deployment."
        fix = "Install Knative Serving, or set KSERVE_DEPLOYMENT_MODE=Standard (no Knative needed)."
        return [*checks, Check(key, title, RED, detail, fix)]
    checks.append(Check(key, title, GREEN, f"{KNATIVE_GROUP} is served."))
    if config.gateway is not None:
        checks.append(
            Check(
                "knative:gateway",
                "Knative mode behind the portal's Gateway",
                RED,
                "A Knative-mode predictor has no stable Service a Gateway route can target (its `<name>-predictor` "
                "is Knative's ExternalName placeholder, routed by Host header): no deployment is exposed.",
                "Set KSERVE_DEPLOYMENT_MODE=Standard, or unset GATEWAY_PUBLIC_URL.",
            )
        )
    return [*checks, check_features(cluster, config), check_queue_proxy(cluster)]


def _config_map(cluster: k8s.Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The ConfigMap's data (None when absent); raises PermanentClusterError when denied."""
    found = cluster.get(k8s.CONFIGMAP, name, namespace)
    return None if found is None else found.get("data") or {}


def check_annotation_propagation(cluster: k8s.Cluster) -> Check:
    namespace, name = KSERVE_CONFIG
    key, title = "kserve:annotations", "KServe keeps the portal's annotations off the predictor's pods"
    wanted = ", ".join(f'"{a}"' for a in PORTAL_ANNOTATIONS)
    fix = (
        f"In ConfigMap {namespace}/{name}, add {wanted} to inferenceService.serviceAnnotationDisallowedList, "
        "then restart the KServe controller."
    )
    try:
        data = _config_map(cluster, namespace, name)
    except k8s.PermanentClusterError as error:
        if not denied(error):
            raise
        return cannot_read(key, title, error)
    if data is None:
        return Check(key, title, AMBER, f"KServe's ConfigMap {namespace}/{name} was not found.", fix)
    try:
        isvc_config = json.loads(data.get("inferenceService") or "{}") or {}
        listed = set(isvc_config.get("serviceAnnotationDisallowedList") or [])
    except (ValueError, AttributeError) as error:
        return Check(key, title, AMBER, f"inferenceService in {namespace}/{name} is not JSON: {error}", fix)
    missing = [a for a in PORTAL_ANNOTATIONS if a not in listed]
    if not missing:
        return Check(key, title, GREEN, "Listed in serviceAnnotationDisallowedList: a limit change rolls no pod.")
    detail = (
        f"{', '.join(missing)} not in {namespace}/{name} inferenceService.serviceAnnotationDisallowedList: KServe "
        "copies them onto the pod template, so a limit or route change restarts the GPU pods (and reloads the model)."
    )
    return Check(key, title, AMBER, detail, fix)


def check_features(cluster: k8s.Cluster, config: ReadinessConfig) -> Check:
    key, title = "knative:features", "Knative features the predictor's pod uses"
    wanted = ALWAYS + (CACHE if config.model_cache_pvc else ())
    try:
        data = _config_map(cluster, KNATIVE_NAMESPACE, "config-features")
    except k8s.PermanentClusterError as error:
        if not denied(error):
            raise
        return cannot_read(key, title, error)
    off = [flag for flag in wanted if (data or {}).get(flag) != "enabled"]
    if not off:
        return Check(key, title, GREEN, f"Enabled: {', '.join(wanted)}.")
    detail = f"Not enabled in {KNATIVE_NAMESPACE}/config-features: {', '.join(off)}; Knative refuses the predictor."
    fix = (
        f"kubectl -n {KNATIVE_NAMESPACE} patch configmap config-features --type merge -p '"
        + json.dumps({"data": dict.fromkeys(off, "enabled")})
        + "'"
    )
    return Check(key, title, RED, detail, fix)


def _millis(value: str) -> int | None:
    text = value.strip()
    try:
        return int(text[:-1]) if text.endswith("m") else round(float(text) * 1000)
    except ValueError:
        return None


def check_queue_proxy(cluster: k8s.Cluster) -> Check:
    """Knative's queue-proxy shares the pod: the predictor leaves it 25m CPU of the flavor's share
    and no memory (Knative's defaults); other requests make Kueue charge more than the quota holds."""
    key, title = "knative:queue-proxy", "Knative's queue-proxy requests what the quota sizes for"
    try:
        data = _config_map(cluster, KNATIVE_NAMESPACE, "config-deployment")
    except k8s.PermanentClusterError as error:
        if not denied(error):
            raise
        return cannot_read(key, title, error)
    cpu = (data or {}).get("queue-sidecar-cpu-request")
    memory = (data or {}).get("queue-sidecar-memory-request")
    odd = []
    if cpu is not None and _millis(cpu) != KNATIVE_QUEUE_PROXY_CPU_MILLIS:
        odd.append(f"queue-sidecar-cpu-request {cpu}")
    if memory is not None and memory.strip() not in ("", "0"):
        odd.append(f"queue-sidecar-memory-request {memory}")
    if not odd:
        return Check(key, title, GREEN, f"{KNATIVE_QUEUE_PROXY_CPU_MILLIS}m CPU and no memory (Knative's defaults).")
    detail = (
        f"{KNATIVE_NAMESPACE}/config-deployment sets {', '.join(odd)}: Kueue charges each predictor pod more than the "
        "flavor's share per GPU, so a tenant's full quota admits one pod fewer."
    )
    fix = f"Remove those keys from {KNATIVE_NAMESPACE}/config-deployment (Knative's defaults: 25m CPU, no memory)."
    return Check(key, title, AMBER, detail, fix)
