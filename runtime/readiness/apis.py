"""Readiness: the APIs the portal writes are served at the versions it uses (discovery, so no
grant is needed). An enabled backend whose API group is absent is not installed: amber, red only
when no enabled backend is."""

from __future__ import annotations

from dataclasses import dataclass, replace

from runtime import k8s
from runtime.backends import traits as backend_traits
from runtime.k8s.kinds import VISIBILITY_GROUP, VISIBILITY_VERSIONS
from runtime.readiness_base import AMBER, GREEN, RED, Check, ReadinessConfig
from runtime.versions import VERSIONS


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
GATEWAY = Api(
    "Gateway API",
    "gateway.networking.k8s.io",
    ("v1",),
    ("gateways", "httproutes"),
    "install the Gateway API CRDs (standard channel, v1)",
)


def backend_api(name: str) -> Api:
    """The API backend `name` applies, from its registry entry (runtime.backends)."""
    kind = backend_traits(name).kind
    if kind is None:
        raise ValueError(f"backend {name!r} applies nothing on the cluster")
    tested = f" ({_tested(kind.component)} is tested)" if kind.component in VERSIONS else ""
    return Api(kind.product, kind.group, (kind.version,), (kind.plural,), f"{kind.install}{tested}", backend=name)


def _api_title(api: Api, version: str) -> str:
    name = api.product if api.product.endswith(" API") else f"{api.product} API"
    return f"{name} ({api.group}/{version})"


def check_apis(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    backends = [backend_api(n) for n in config.backends if backend_traits(n).on_cluster]
    apis = [*backends, KUEUE, KUEUE_VISIBILITY]
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
