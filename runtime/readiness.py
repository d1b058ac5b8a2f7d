"""Is this cluster set up for the portal? Each check reads the cluster (or Prometheus) once and
answers green / amber / red with what to do about it.

Checks: the API server's version; the APIs the portal writes are served at the versions it uses
(KubeRay, Kueue, KServe, Gateway API when configured; discovery, so no grant is needed — an
enabled backend whose API group is absent is not installed: amber, red only when no enabled
backend is); Kueue runs (its webhook answers) at a supported version, and so are KubeRay and KServe
(runtime.readiness_install, against runtime.versions); Kueue manages RayServices; each GPU flavor
has schedulable nodes (labels, allocatable GPUs, taints tolerated; none yet is amber) and its
quota fits them; the model-cache claim is bound in each tenant namespace, Prometheus answers, and
the portal holds each permission it needs (SelfSubjectAccessReview per verb). Red: deployments
will fail or never start. Amber: something works less well, or the portal cannot tell.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import yaml

from runtime import k8s
from runtime.k8s.kinds import VISIBILITY_GROUP, VISIBILITY_VERSIONS
from runtime.k8s.permissions import PORTAL, READINESS
from runtime.manifests.common import GPU_RESOURCE
from runtime.readiness_base import AMBER, GREEN, OPTIONAL_RBAC, RED, Check, ReadinessConfig
from runtime.readiness_base import denied as _denied
from runtime.readiness_install import (
    check_backend_versions,
    check_kueue_controller,
    check_quota_capacity,
    check_server_version,
    rayservice_probe,
)
from runtime.readiness_pools import pool_checks, topology_checks
from runtime.spec import Toleration
from runtime.versions import VERSIONS

__all__ = ["AMBER", "GREEN", "RED", "Check", "ReadinessConfig", "readiness"]

RAYSERVICE_FRAMEWORK = "ray.io/rayservice"  # Kueue's integrations.frameworks entry
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
MAX_NAMESPACES = 50  # model-cache claims checked per page load


@dataclass(frozen=True)
class Api:
    """An API the portal needs: `plurals` served at one of `versions` (preferred first)."""

    product: str
    group: str
    versions: tuple[str, ...]
    plurals: tuple[str, ...]
    install: str
    missing: str = RED  # how bad its absence is
    backend: str = ""  # the runtime backend it serves: optional, amber when not installed


def _tested(component: str) -> str:
    return f"v{VERSIONS[component].tested}"


KUBERAY = Api(
    "KubeRay",
    "ray.io",
    ("v1",),
    ("rayservices",),
    f"install the KubeRay operator ({_tested('kuberay')} is tested) with its CRDs",
    backend="kuberay",
)
KUEUE = Api(
    "Kueue",
    "kueue.x-k8s.io",
    ("v1beta2",),
    ("workloads", "clusterqueues", "localqueues", "resourceflavors", "cohorts"),
    f"install Kueue v{VERSIONS['kueue'].minimum} or later (v1beta2 is its storage version; "
    f"{_tested('kueue')} is tested)",
)
KUEUE_VISIBILITY = Api(
    "Kueue visibility",
    VISIBILITY_GROUP,
    VISIBILITY_VERSIONS,
    ("clusterqueues",),  # read as clusterqueues/<name>/pendingworkloads
    "enable Kueue's visibility API (its APIService, v1beta2); without it queued deployments show no position",
    missing=AMBER,
)
KARPENTER = Api(
    "Karpenter", "karpenter.sh", ("v1",), ("nodepools", "nodeclaims"), "install Karpenter v1 or later with its CRDs"
)
KSERVE = Api(
    "KServe",
    "serving.kserve.io",
    ("v1beta1",),
    ("inferenceservices",),
    f"install KServe ({_tested('kserve')} is tested) with its CRDs",
    backend="kserve",
)
GATEWAY = Api(
    "Gateway API",
    "gateway.networking.k8s.io",
    ("v1",),
    ("gateways", "httproutes"),
    "install the Gateway API CRDs (standard channel, v1)",
)


def _api_title(api: Api, version: str) -> str:
    name = api.product if api.product.endswith(" API") else f"{api.product} API"
    return f"{name} ({api.group}/{version})"


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
    # An enabled backend that is not installed only loses its deployments (amber), unless no
    # enabled backend is installed: then nothing can run (red).
    backends = [a for a in apis if a.backend]
    none_installed = bool(backends) and all(a.group not in groups for a in backends)
    return [_check_api(cluster, api, groups, none_installed) for api in apis]


def _check_api(cluster: k8s.Cluster, api: Api, groups: dict[str, list[str]], none_installed: bool) -> Check:
    served = groups.get(api.group)
    version = next((v for v in api.versions if v in (served or ())), None)
    key, title = f"api:{api.group}", _api_title(api, version or api.versions[0])
    if served is None:
        if api.backend:
            status = RED if none_installed else AMBER
            detail = f"{api.product} is not installed ({api.group} not served): its {api.backend} backend cannot run."
            fix = f"Either {api.install}, or remove {api.backend} from RUNTIME_BACKENDS."
            return Check(key, title, status, detail, fix)
        return Check(key, title, api.missing, f"{api.group} is not served: its CRDs are missing.", api.install)
    if version is None:
        wanted = " or ".join(api.versions)
        detail = f"{api.group} serves {', '.join(served)}; the portal uses {wanted}."
        return Check(key, title, api.missing, detail, f"Upgrade: {api.install}.")
    resources = cluster.api_resources(api.group, version)
    absent = [p for p in api.plurals if p not in resources]
    if absent:
        return Check(key, title, api.missing, f"{api.group}/{version} lacks {', '.join(absent)}.", api.install)
    return Check(key, title, GREEN, f"Served: {', '.join(served)}.")


def check_kueue_rayservice(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    if "kuberay" not in config.backends:
        return []
    namespace, name = config.kueue_config
    key, title = "kueue:rayservice", "Kueue manages RayServices"
    fix = f"Add {RAYSERVICE_FRAMEWORK} to integrations.frameworks in ConfigMap {namespace}/{name}, then restart Kueue."
    try:
        found = cluster.get(k8s.CONFIGMAP, name, namespace)
        unread = f"Kueue's configuration {namespace}/{name} was not found: its integrations could not be read."
        amber_fix = f"Set KUEUE_CONFIG_NAMESPACE/KUEUE_CONFIG_MAP to Kueue's ConfigMap, so it can be read. {fix}"
    except k8s.PermanentClusterError as error:
        if not _denied(error):
            raise
        found, unread, amber_fix = None, f"Cannot read {namespace}/{name}: {error}.", f"Apply {OPTIONAL_RBAC}."
    if found is None:
        # Installs name it differently (Helm, a prefix), pass the file another way, or do not grant
        # the optional read (the real plane's portal ServiceAccount): ask Kueue's webhook instead.
        status, said = rayservice_probe(cluster, config)
        fixes = {GREEN: "", AMBER: amber_fix, RED: fix}
        return [Check(key, title, status, f"{unread} {said}", fixes[status])]
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
                Check(
                    key,
                    title,
                    AMBER,  # not yet: nodes (or Karpenter's) may come; deployments of it wait meanwhile
                    f"No node carries {wanted} yet: deployments on this flavor wait for one.",
                    "Add (or label) the flavor's GPU nodes, or fix the flavor's labels.",
                )
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
        # The renderers mount it in every engine pod while MODEL_CACHE_PVC is set (the default), and
        # nothing in the portal creates it: such pods stay Pending ("persistentvolumeclaim not found").
        detail = f"Missing in {', '.join(missing)}: engine pods there mount it and would stay Pending."
        fix = (
            f"Create a ReadWriteMany PVC {name} in each tenant namespace, or set MODEL_CACHE_PVC empty "
            "so that pods mount no cache (each downloads its model)."
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
    for verb, group, resource in PORTAL:
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
    check_server_version,
    check_kueue_controller,
    check_backend_versions,
    check_kueue_rayservice,
    check_flavors,
    check_quota_capacity,
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
