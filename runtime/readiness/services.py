"""Readiness: the model-cache claim in each tenant namespace, Prometheus, and the portal's own
permissions (SelfSubjectAccessReview per verb)."""

from __future__ import annotations

import urllib.error
import urllib.request

from runtime import k8s
from runtime.k8s.permissions import READINESS, portal
from runtime.readiness_base import AMBER, GREEN, OPTIONAL_RBAC, RED, Check, ReadinessConfig
from runtime.readiness_base import denied as _denied

MAX_NAMESPACES = 50  # model-cache claims checked per page load


def check_model_cache(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    if not config.model_cache_pvc or not config.namespaces:
        return []
    name = config.model_cache_pvc
    key, title = "pvc:model-cache", f"Model-cache claim {name}"
    missing, pending = [], []
    try:
        for namespace in config.namespaces[:MAX_NAMESPACES]:
            found = cluster.get(k8s.PVC, name, namespace)
            if found is None:
                missing.append(namespace)
            elif (found.get("status") or {}).get("phase") != "Bound":
                pending.append(f"{namespace} ({(found.get('status') or {}).get('phase') or 'no phase'})")
    except k8s.PermanentClusterError as error:
        if not _denied(error):
            raise
        fix = "Grant the portal get on persistentvolumeclaims (the chart's ClusterRole does)."
        return [Check(key, title, AMBER, f"Cannot read claims: {error}", fix)]
    if missing:
        # The renderers mount it in every engine pod while MODEL_CACHE_PVC is set (the default); the
        # Kueue sync creates it (quotas.model_cache). Until then such pods stay Pending.
        detail = f"Missing in {', '.join(missing)}: engine pods there mount it and would stay Pending."
        fix = (
            "The portal creates it when it syncs the tenant (MODEL_CACHE_SIZE_GI GiB of MODEL_CACHE_STORAGE_CLASS): "
            "run the Kueue sync, and if it stays missing read the reason on the tenant's page (Storage and "
            "credentials). Or set MODEL_CACHE_PVC empty so that pods mount no cache (each downloads its model)."
        )
        return [Check(key, title, RED, detail, fix)]
    if pending:
        return [
            Check(key, title, AMBER, f"Not bound in {', '.join(pending)}.", "Check the storage class and the volume.")
        ]
    return [Check(key, title, GREEN, f"Bound in {len(config.namespaces[:MAX_NAMESPACES])} namespace(s).")]


def check_prometheus(config: ReadinessConfig, timeout: float = 3.0) -> list[Check]:
    key, title = "prometheus", "Prometheus"
    if not config.prometheus_url:
        fix = "Set PROMETHEUS_URL (KServe deployments are only measured through Prometheus)."
        return [Check(key, title, AMBER, "Not configured: metrics are scraped from the Ray pods directly.", fix)]
    url = config.prometheus_url.rstrip("/") + "/-/ready"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (configured URL)
            ok = response.status == 200
    except (OSError, urllib.error.URLError) as error:
        return [Check(key, title, RED, f"{url} did not answer: {error}", "Check PROMETHEUS_URL and the network path.")]
    if ok:
        return [Check(key, title, GREEN, f"{url} answers.")]
    return [Check(key, title, RED, f"{url} is not ready.", "Check Prometheus.")]


def check_permissions(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """One SelfSubjectAccessReview per permission; red when the runtime lacks one."""
    missing, optional = [], []
    needed = portal(list(config.backends))  # the enabled backends' kinds, and what every install needs
    for verb, group, resource in needed:
        if not cluster.can_i(verb, group, resource)[0]:
            missing.append(f"{verb} {resource}" + (f" ({group})" if group else ""))
    # Grants limited to one object (resourceNames; the Role ones in Kueue's namespace): RBAC
    # allows only a request that names it.
    namespace, config_map = config.kueue_config
    named = {
        "configmaps": (namespace, config_map),
        "deployments": (namespace, config.kueue_deployment),
        "customresourcedefinitions": (None, "rayservices.ray.io"),
    }
    for verb, group, resource in READINESS:
        where, name = named.get(resource, (None, None))
        if not cluster.can_i(verb, group, resource, namespace=where, name=name)[0]:
            optional.append(f"{verb} {resource}")
    checks = []
    if missing:
        checks.append(
            Check(
                "rbac:portal",
                "The portal's permissions",
                RED,
                f"Missing: {'; '.join(missing)}.",
                "Install or upgrade the Helm chart charts/llm-portal (its ClusterRole, bound to the portal's account).",
            )
        )
    else:
        checks.append(Check("rbac:portal", "The portal's permissions", GREEN, f"All {len(needed)} granted."))
    if optional:
        checks.append(
            Check(
                "rbac:readiness",
                "Readiness reads",
                AMBER,
                f"Missing: {'; '.join(optional)}: some checks cannot tell.",
                f"Apply {OPTIONAL_RBAC}.",
            )
        )
    return checks
