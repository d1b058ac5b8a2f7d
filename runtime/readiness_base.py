"""What every readiness check shares: the three statuses, a check's shape, the settings the
checks read, and how a version verdict (runtime.versions) becomes a status."""

from __future__ import annotations

from dataclasses import dataclass

from runtime import k8s
from runtime.spec import FlavorSpec
from runtime.versions import FAIL, OK

GREEN, AMBER, RED = "green", "amber", "red"
# The optional grant of the readiness page's reads (charts/llm-portal templates/readiness-rbac.yaml).
OPTIONAL_RBAC = "the chart's readiness grant (helm upgrade with --set rbac.readiness.enabled=true)"
VERDICT_STATUS = {OK: GREEN, FAIL: RED}  # a warning (or an unknown version) is amber


@dataclass
class Check:
    key: str
    title: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class ReadinessConfig:
    backends: tuple[str, ...]  # the on-cluster backends enabled (kuberay, kserve)
    flavors: tuple[FlavorSpec, ...] = ()
    namespaces: tuple[str, ...] = ()  # tenant namespaces (where the model-cache claim must be)
    model_cache_pvc: str | None = None
    prometheus_url: str | None = None
    gateway_api: bool = False
    kueue_config: tuple[str, str] = ("kueue-system", "kueue-manager-config")
    kueue_deployment: str = "kueue-controller-manager"  # in kueue_config's namespace
    pools: tuple[str, ...] = ()  # the flavors the portal keeps a Karpenter NodePool for
    topology: bool = False  # some flavor has topology levels (Kueue must serve Topology)
    queueing_strategy: str = "BestEffortFIFO"
    gateway: tuple[str, str] | None = None  # (namespace, name) deployments are exposed on, or None
    kserve_mode: str = "Standard"  # KSERVE_DEPLOYMENT_MODE (runtime.readiness.knative)


def denied(error: k8s.ClusterError) -> bool:
    return error.status in (401, 403)


def cannot_read(key: str, title: str, error: k8s.ClusterError) -> Check:
    """The amber answer of a check whose read the optional grant would allow."""
    return Check(key, title, AMBER, f"Cannot read: {error}", f"Apply {OPTIONAL_RBAC}.")
