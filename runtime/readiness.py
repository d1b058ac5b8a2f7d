"""Is this cluster set up for the portal? Each check reads the cluster (or Prometheus) once and
answers green / amber / red with what to do about it.

Checks: the APIs the portal writes are served at the versions it uses (KubeRay, Kueue, KServe,
Gateway API when configured; discovery, so no grant is needed), Kueue manages RayServices, each
GPU flavor has schedulable nodes (labels, allocatable GPUs, taints tolerated), the model-cache
claim is bound in each tenant namespace, Prometheus answers, and the portal holds each permission
it needs (SelfSubjectAccessReview per verb). Red: deployments will fail or never start. Amber:
something works less well, or the portal cannot tell.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import yaml

from runtime import k8s
from runtime.k8s.permissions import PORTAL, READINESS
from runtime.manifests.common import GPU_RESOURCE
from runtime.readiness_pools import pool_checks, topology_checks
from runtime.spec import FlavorSpec, Toleration

GREEN, AMBER, RED = "green", "amber", "red"
RAYSERVICE_FRAMEWORK = "ray.io/rayservice"  # Kueue's integrations.frameworks entry
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
MAX_NAMESPACES = 50  # model-cache claims checked per page load
OPTIONAL_RBAC = "deploy/k8s/optional/readiness-rbac.yaml"


@dataclass
class Check:
    key: str
    title: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Api:
    """An API the portal needs: `plurals` served at `group/version`."""

    product: str
    group: str
    version: str
    plurals: tuple[str, ...]
    install: str
    missing: str = RED  # how bad its absence is


KUBERAY = Api("KubeRay", "ray.io", "v1", ("rayservices",), "install the KubeRay operator (v1.7 or later) with its CRDs")
KUEUE = Api(
    "Kueue",
    "kueue.x-k8s.io",
    "v1beta2",
    ("workloads", "clusterqueues", "localqueues", "resourceflavors", "cohorts"),
    "install Kueue v0.16 or later (v1beta2 is its storage version)",
)
KUEUE_VISIBILITY = Api(
    "Kueue visibility API",
    "visibility.kueue.x-k8s.io",
    "v1beta1",
    ("clusterqueues",),  # read as clusterqueues/<name>/pendingworkloads
    "enable Kueue's visibility API (its APIService); without it queued deployments show no position",
    missing=AMBER,
)
KARPENTER = Api(
    "Karpenter", "karpenter.sh", "v1", ("nodepools", "nodeclaims"), "install Karpenter v1 or later with its CRDs"
)
KSERVE = Api("KServe", "serving.kserve.io", "v1beta1", ("inferenceservices",), "install KServe with its CRDs")
GATEWAY = Api(
    "Gateway API",
    "gateway.networking.k8s.io",
    "v1",
    ("gateways", "httproutes"),
    "install the Gateway API CRDs (standard channel, v1)",
)


@dataclass(frozen=True)
class ReadinessConfig:
    backends: tuple[str, ...]  # the on-cluster backends enabled (kuberay, kserve)
    flavors: tuple[FlavorSpec, ...] = ()
    namespaces: tuple[str, ...] = ()  # tenant namespaces (where the model-cache claim must be)
    model_cache_pvc: str | None = None
    prometheus_url: str | None = None
    gateway_api: bool = False
    kueue_config: tuple[str, str] = ("kueue-system", "kueue-manager-config")
    pools: tuple[str, ...] = ()  # the flavors the portal keeps a Karpenter NodePool for
    topology: bool = False  # some flavor has topology levels (Kueue must serve Topology)
    queueing_strategy: str = "BestEffortFIFO"


def _denied(error: k8s.ClusterError) -> bool:
    return error.status in (401, 403)


def check_apis(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    apis = [KUEUE, KUEUE_VISIBILITY]
    if "kuberay" in config.backends:
        apis.insert(0, KUBERAY)
    if "kserve" in config.backends:
        apis.append(KSERVE)
    if config.gateway_api:
        apis.append(GATEWAY)
    if config.topology:
        apis[apis.index(KUEUE)] = replace(
            KUEUE, plurals=(*KUEUE.plurals, "topologies"), install="install Kueue v0.16 or later"
        )
    if config.pools:
        apis.append(KARPENTER)
    groups = cluster.api_groups()
    checks = []
    for api in apis:
        key, title = f"api:{api.group}", f"{api.product} API ({api.group}/{api.version})"
        served = groups.get(api.group)
        if served is None:
            checks.append(
                Check(key, title, api.missing, f"{api.group} is not served: its CRDs are missing.", api.install)
            )
            continue
        if api.version not in served:
            checks.append(
                Check(
                    key,
                    title,
                    api.missing,
                    f"{api.group} serves {', '.join(served)}; the portal uses {api.version}.",
                    f"Upgrade: {api.install}.",
                )
            )
            continue
        resources = cluster.api_resources(api.group, api.version)
        absent = [p for p in api.plurals if p not in resources]
        if absent:
            checks.append(
                Check(key, title, api.missing, f"{api.group}/{api.version} lacks {', '.join(absent)}.", api.install)
            )
        else:
            checks.append(Check(key, title, GREEN, f"Served: {', '.join(served)}."))
    return checks


def check_kueue_rayservice(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    if "kuberay" not in config.backends:
        return []
    namespace, name = config.kueue_config
    key, title = "kueue:rayservice", "Kueue manages RayServices"
    fix = f"Add {RAYSERVICE_FRAMEWORK} to integrations.frameworks in ConfigMap {namespace}/{name}, then restart Kueue."
    try:
        found = cluster.get(k8s.CONFIGMAP, name, namespace)
    except k8s.PermanentClusterError as error:
        if not _denied(error):
            raise
        return [Check(key, title, AMBER, f"Cannot read {namespace}/{name}: {error}", f"Apply {OPTIONAL_RBAC}.")]
    if found is None:
        return [
            Check(
                key, title, AMBER, f"Kueue's configuration {namespace}/{name} was not found.", "Set KUEUE_CONFIG_MAP."
            )
        ]
    try:
        manager = yaml.safe_load((found.get("data") or {}).get(KUEUE_CONFIG_KEY) or "") or {}
    except yaml.YAMLError as error:
        return [Check(key, title, AMBER, f"{KUEUE_CONFIG_KEY} is not YAML: {error}", fix)]
    frameworks = ((manager.get("integrations") or {}).get("frameworks") or []) if isinstance(manager, dict) else []
    if RAYSERVICE_FRAMEWORK in frameworks:
        return [Check(key, title, GREEN, f"{RAYSERVICE_FRAMEWORK} is enabled.")]
    enabled = ", ".join(str(f) for f in frameworks) or "none"
    return [Check(key, title, RED, f"Not enabled (frameworks: {enabled}): RayServices would run unqueued.", fix)]


def tolerates(tolerations: tuple[Toleration, ...], taint: dict[str, Any]) -> bool:
    """Whether one of `tolerations` tolerates `taint`, by the Kubernetes rules."""
    for t in tolerations:
        if t.effect and t.effect != taint.get("effect"):
            continue
        if t.operator == "Exists" and (not t.key or t.key == taint.get("key")):
            return True
        if t.key == taint.get("key") and t.value == (taint.get("value") or ""):
            return True
    return False


def _gpus(node: dict) -> int:
    try:
        return int(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE) or 0)
    except ValueError:
        return 0


def check_flavors(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    if not config.flavors:
        return []
    try:
        nodes = cluster.list(k8s.NODE)
    except k8s.PermanentClusterError as error:
        if not _denied(error):
            raise
        return [Check("flavors", "GPU flavors' nodes", AMBER, f"Cannot list nodes: {error}", f"Apply {OPTIONAL_RBAC}.")]
    checks = []
    for flavor in config.flavors:
        key, title = f"flavor:{flavor.name}", f"Nodes for flavor {flavor.name}"
        selector = dict(flavor.node_labels)
        wanted = ", ".join(f"{k}={v}" for k, v in flavor.node_labels) or "(no labels)"
        matching = [n for n in nodes if k8s.labels_match(n, selector)] if selector else []
        with_gpus = [n for n in matching if _gpus(n) > 0]
        hard = ("NoSchedule", "NoExecute")
        usable = [
            n
            for n in with_gpus
            if all(
                tolerates(flavor.tolerations, t)
                for t in (n.get("spec") or {}).get("taints") or []
                if t.get("effect") in hard
            )
        ]
        if not selector:
            checks.append(
                Check(key, title, RED, "The flavor has no node labels.", "Give the flavor its nodes' labels.")
            )
        elif not matching:
            checks.append(
                Check(key, title, RED, f"No node carries {wanted}.", "Label the GPU nodes, or fix the flavor's labels.")
            )
        elif not with_gpus:
            checks.append(
                Check(
                    key,
                    title,
                    RED,
                    f"{len(matching)} node(s) carry {wanted} but none has allocatable {GPU_RESOURCE}.",
                    "Install or fix the NVIDIA device plugin on those nodes.",
                )
            )
        elif not usable:
            taints = sorted(
                {
                    f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
                    for n in with_gpus
                    for t in (n.get("spec") or {}).get("taints") or []
                    if t.get("effect") in hard and not tolerates(flavor.tolerations, t)
                }
            )
            checks.append(
                Check(
                    key,
                    title,
                    RED,
                    f"Every matching node has a taint the flavor does not tolerate: {', '.join(taints)}.",
                    "Add the toleration to the flavor (its ResourceFlavor), or remove the taint.",
                )
            )
        else:
            gpus = sum(_gpus(n) for n in usable)
            odd = sorted({_gpus(n) for n in usable} - {flavor.gpus_per_node})
            status, note = GREEN, ""
            if odd:
                status = AMBER
                note = f" Some nodes have {', '.join(map(str, odd))} GPUs; the flavor says {flavor.gpus_per_node}."
            checks.append(
                Check(
                    key,
                    title,
                    status,
                    f"{len(usable)} node(s), {gpus} GPUs allocatable.{note}",
                    "Fix the flavor's GPUs per node." if odd else "",
                )
            )
    return checks


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
        return [Check(key, title, AMBER, f"Cannot read claims: {error}", f"Apply {OPTIONAL_RBAC}.")]
    if missing:
        return [
            Check(key, title, RED, f"Missing in {', '.join(missing)}.", f"Create PVC {name} in each tenant namespace.")
        ]
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
    for verb, group, resource in PORTAL:
        if not cluster.can_i(verb, group, resource)[0]:
            missing.append(f"{verb} {resource}" + (f" ({group})" if group else ""))
    namespace = config.kueue_config[0]
    for verb, group, resource in READINESS:
        if not cluster.can_i(verb, group, resource, namespace=namespace if resource == "configmaps" else None)[0]:
            optional.append(f"{verb} {resource}")
    checks = []
    if missing:
        checks.append(
            Check(
                "rbac:portal",
                "The portal's permissions",
                RED,
                f"Missing: {'; '.join(missing)}.",
                "Apply deploy/k8s (the ClusterRole llm-portal and its binding to the portal's ServiceAccount).",
            )
        )
    else:
        checks.append(Check("rbac:portal", "The portal's permissions", GREEN, f"All {len(PORTAL)} granted."))
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


def check_pools(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """The queueing strategy, each Karpenter pool's nodes and pending claims, and the topology
    labels of flavors with topology levels (runtime.readiness_pools)."""
    strategy = Check(
        "kueue:queueing",
        "Queueing strategy",
        GREEN,
        f"Tenant ClusterQueues use {config.queueing_strategy}"
        + (
            ": admission in order, a large deployment is never passed."
            if config.queueing_strategy == "StrictFIFO"
            else ": a smaller deployment that fits may pass a larger one that waits."
        ),
        "",
    )
    checks = [strategy, *pool_checks(cluster, config.pools, Check, (GREEN, AMBER, RED), OPTIONAL_RBAC)]
    if any(f.topology_levels for f in config.flavors):
        try:
            nodes = cluster.list(k8s.NODE)
        except k8s.PermanentClusterError as error:
            if not _denied(error):
                raise
            return checks  # check_flavors already says nodes cannot be listed
        checks += topology_checks(nodes, config.flavors, Check, (GREEN, AMBER, RED))
    return checks


CLUSTER_CHECKS: tuple[Callable[[k8s.Cluster, ReadinessConfig], list[Check]], ...] = (
    check_apis,
    check_kueue_rayservice,
    check_flavors,
    check_pools,
    check_model_cache,
    check_permissions,
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
