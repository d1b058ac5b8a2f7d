"""Is this cluster set up for the portal? Each check reads the cluster (or Prometheus) once and
answers green / amber / red with what to do about it.

Checks: the API server's version; the APIs the portal writes are served at the versions it uses
(KubeRay, Kueue, KServe, Gateway API when configured; discovery, so no grant is needed — an
enabled backend whose API group is absent is not installed: amber, red only when no enabled
backend is); Kueue runs (its webhook answers) at a supported version, and so are KubeRay and KServe
(runtime.readiness_install, against runtime.versions); Kueue manages each enabled backend's workloads; each GPU flavor
has schedulable nodes (labels, allocatable GPUs, taints tolerated; none yet is amber), an
accelerator type Ray Serve knows (runtime.accelerators) and its quota fits them; the model-cache
claim is bound in each tenant namespace, Prometheus answers, and
the portal holds each permission it needs (SelfSubjectAccessReview per verb); with a Gateway,
Kuadrant's policy APIs are served, the Gateway has its deny-all AuthPolicy and each
deployment's AuthPolicy is enforced (runtime.readiness.gateway). Red: deployments
will fail or never start. Amber: something works less well, or the portal cannot tell.

One module per seam: apis, kueue, nodes, services, gateway; the install checks live in
runtime.readiness_install and runtime.readiness_pools.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from runtime import k8s
from runtime.backends import traits as backend_traits
from runtime.readiness.apis import GATEWAY, KARPENTER, KUEUE, KUEUE_VISIBILITY, Api, backend_api, check_apis
from runtime.readiness.gateway import check_kuadrant
from runtime.readiness.kueue import KUEUE_CONFIG_KEY, RAYSERVICE_FRAMEWORK, check_kueue_integrations
from runtime.readiness.nodes import check_accelerator_types, check_flavors, check_pools, tolerates
from runtime.readiness.services import MAX_NAMESPACES, check_model_cache, check_permissions, check_prometheus
from runtime.readiness_base import AMBER, GREEN, RED, Check, ReadinessConfig
from runtime.readiness_install import (
    check_backend_versions,
    check_kueue_controller,
    check_quota_capacity,
    check_server_version,
)

__all__ = [
    "AMBER",
    "GATEWAY",
    "GREEN",
    "KARPENTER",
    "KUEUE",
    "KUEUE_CONFIG_KEY",
    "KUEUE_VISIBILITY",
    "MAX_NAMESPACES",
    "RAYSERVICE_FRAMEWORK",
    "RED",
    "Api",
    "Check",
    "ReadinessConfig",
    "check_accelerator_types",
    "backend_api",
    "check_apis",
    "check_flavors",
    "check_kuadrant",
    "check_kueue_integrations",
    "check_model_cache",
    "check_permissions",
    "check_pools",
    "check_prometheus",
    "readiness",
    "tolerates",
]


def check_backend_install(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """Each enabled backend's own install checks (runtime.backends Traits.readiness), e.g. KServe's
    annotation list and, in its Knative mode, Knative's feature flags."""
    checks: list[Check] = []
    for name in config.backends:
        own = backend_traits(name).readiness
        if own is not None:
            checks += own(cluster, config)
    return checks


CLUSTER_CHECKS: tuple[Callable[[k8s.Cluster, ReadinessConfig], list[Check]], ...] = (
    check_apis,
    check_server_version,
    check_kueue_controller,
    check_backend_versions,
    check_kueue_integrations,
    check_backend_install,
    check_flavors,
    check_accelerator_types,
    check_quota_capacity,
    check_pools,
    check_model_cache,
    check_permissions,
    check_kuadrant,
)


def readiness(cluster: k8s.Cluster | None, config: ReadinessConfig) -> list[dict[str, Any]]:
    """Every check, in page order, as dicts. A check that cannot reach the API is red itself and
    the others still run."""
    checks: list[Check] = []
    for run in CLUSTER_CHECKS:
        name = run.__name__.removeprefix("check_").replace("_", " ")
        if cluster is None:
            checks.append(
                Check(
                    f"cluster:{name}",
                    f"Cluster ({name})",
                    RED,
                    "No cluster configured.",
                    "Set KUBERNETES_URL or KUBECONFIG, or run the portal in the cluster.",
                )
            )
            break
        try:
            checks += run(cluster, config)
        except k8s.ClusterError as error:
            checks.append(
                Check(
                    f"error:{name}",
                    f"Cluster ({name})",
                    RED,
                    f"Could not check: {error}",
                    "Check the API server's address and the portal's credentials.",
                )
            )
    checks += check_prometheus(config)
    return [asdict(c) for c in checks]
