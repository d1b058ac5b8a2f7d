"""Runtime backends behind one interface (`base.Backend`), looked up by name in a registry.

Built in: kuberay (RayService), kserve (InferenceService), local (a vLLM process on this
machine). `get_backend(dep.backend)` is the only way the apps reach one.

Nothing is imported here at module level beyond the standard library: the local engine's Ray
launcher (`python -m runtime.backends.local.launcher`) runs under this package with the engine's
interpreter, which need not have the Kubernetes client or Django installed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime import k8s
    from runtime.backends.base import Backend
    from runtime.spec import DeploymentSpec

BackendFactory = Callable[[], "Backend"]


@dataclass(frozen=True, kw_only=True)
class ClusterKind:
    """The custom resource an on-cluster backend applies, and what the rest of the portal derives
    from it: the API group readiness looks for, the CRD whose version label it reads, the RBAC
    verbs the ClusterRole grants, the install sentence shown when it is missing."""

    product: str  # "KubeRay"
    group: str  # "ray.io"
    version: str  # "v1"
    plural: str  # "rayservices"
    install: str  # how to install it (readiness's fix), without the tested version
    component: str = ""  # runtime.versions key judging its version ("" for none)

    @property
    def crd(self) -> str:
        return f"{self.plural}.{self.group}"


def _recreate(old: DeploymentSpec, new: DeploymentSpec) -> tuple[str, str]:
    return "recreate", "The workload is replaced: it stops serving until the new one is ready."


@dataclass(frozen=True, kw_only=True)
class FixedKvCache:
    """A KV cache an engine is given outright rather than sized from GPU memory × utilization less
    the weights (vLLM's CPU build: VLLM_CPU_KVCACHE_SPACE), with the engine shape it runs in."""

    bytes: int  # what vLLM divides into blocks
    block_size: int  # tokens a block holds: vLLM's capacity is a whole number of blocks
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1


@dataclass(frozen=True, kw_only=True)
class Traits:
    """What callers may ask about a backend without building it (no cluster needed). Everything
    the portal knows about a backend outside its own package is here, so a backend is one package
    and one `register` call."""

    label: str  # how forms, the API schema and filters name it
    preview: Callable[[DeploymentSpec], Any]  # the object (or Serve config) it would apply
    # How a running workload takes a new spec: ("in_place" | "rolling" | "recreate", a sentence).
    impact: Callable[[DeploymentSpec, DeploymentSpec], tuple[str, str]] = _recreate
    kind: ClusterKind | None = None  # the resource it applies on the cluster (None: runs on this machine)
    # (Service name, port) the Gateway route sends traffic to; None: not behind the Gateway.
    route: Callable[[DeploymentSpec], tuple[str, int]] | None = None
    kueue_frameworks: tuple[str, ...] = ()  # Kueue integrations that must be on for its pods to queue
    # When Kueue's ConfigMap cannot be read: (status, sentence) from asking Kueue's webhook instead.
    kueue_probe: Callable[[Any, Any], tuple[str, str]] | None = None
    # Its own install checks for the readiness page: (cluster, ReadinessConfig) -> [Check].
    readiness: Callable[[Any, Any], list] | None = None
    metrics_from_pods: bool = False  # metrics are read from the workload's pods, not one endpoint URL
    local_paths: bool = False  # model sources may be paths under LOCAL_MODEL_ROOT
    sized_for_gpus: bool = True  # the GPU-memory check applies (False: CPU engine, sized by the host)
    # The KV cache its engine is given whatever the flavor's memory (deployments.sizing sizes with it).
    fixed_kv_cache: Callable[[], FixedKvCache] | None = None
    whole_node_pods: bool = False  # a replica bigger than a node is split into whole-node pods (PP across nodes)
    # Grants it needs besides those on its kind: (verb, group, resource).
    extra_permissions: tuple[tuple[str, str, str], ...] = ()

    @property
    def on_cluster(self) -> bool:
        """A Kubernetes object admitted by Kueue (False: a process on this machine)."""
        return self.kind is not None

    def permissions(self) -> tuple[tuple[str, str, str], ...]:
        """The (verb, group, resource) grants the runtime uses on its kind."""
        if self.kind is None:
            return self.extra_permissions
        return (*((verb, self.kind.group, self.kind.plural) for verb in KIND_VERBS), *self.extra_permissions)


KIND_VERBS = ("get", "list", "create", "patch", "delete")


_factories: dict[str, BackendFactory] = {}
_traits: dict[str, Traits] = {}


def register(name: str, factory: BackendFactory, traits: Traits) -> None:
    """Make `get_backend(name)` return `factory()`; registering a name again replaces it."""
    _factories[name] = factory
    _traits[name] = traits


def unregister(name: str) -> None:
    """Forget backend `name` (tests that register one of their own)."""
    _factories.pop(name, None)
    _traits.pop(name, None)


def traits(name: str) -> Traits:
    """The registered traits of backend `name` (ValueError for an unknown name)."""
    if name not in _traits:
        raise ValueError(f"unknown backend {name!r}")
    return _traits[name]


def names(*, on_cluster: bool | None = None) -> list[str]:
    """Registered backend names, optionally only those that run on (or off) the cluster."""
    return [n for n, t in _traits.items() if on_cluster is None or t.on_cluster == on_cluster]


def enabled(*, on_cluster: bool | None = None) -> list[str]:
    """The registered backends this install offers (RUNTIME_BACKENDS), optionally only those on
    (or off) the cluster."""
    from django.conf import settings

    return [n for n in names(on_cluster=on_cluster) if n in settings.RUNTIME_BACKENDS]


def get_backend(name: str) -> Backend:
    """The backend for a deployment's `backend` field."""
    factory = _factories.get(name)
    if factory is None:
        raise ValueError(f"unknown backend {name!r}")
    return factory()


_cluster_lock = threading.Lock()
_clusters: dict[tuple, k8s.Cluster] = {}


def get_cluster() -> k8s.Cluster:
    """The process-wide cluster client for the current settings (tests change the URL)."""
    from django.conf import settings

    from runtime import k8s

    key = (settings.KUBERNETES_URL, settings.KUBECONFIG, settings.KUBERNETES_TIMEOUT_SECONDS)
    with _cluster_lock:
        if key not in _clusters:
            if not cluster_configured():
                raise k8s.PermanentClusterError(
                    "No Kubernetes cluster is configured: set KUBERNETES_URL or KUBECONFIG "
                    "(or run the portal in the cluster)."
                )
            _clusters[key] = k8s.Cluster.from_settings()
        return _clusters[key]


def cluster_configured() -> bool:
    """Whether a cluster is configured at all (KUBERNETES_URL, KUBECONFIG or in-cluster): without
    one, cluster work is a state to show (the demo), not an error to log."""
    from django.conf import settings

    return bool(settings.KUBERNETES_URL or settings.KUBECONFIG or _in_cluster())


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


# --- is a backend installed on the cluster? ---------------------------------------------------
# A backend whose custom resource type the cluster does not serve (a LIST of its kind answers
# 404: the CRD is absent, e.g. KServe not installed) is not an error: the sweep skips it, the
# request check refuses it, readiness shows it amber. What was last found is kept in the cache,
# one key per backend, so a request costs one cache read and no API call.

PRESENCE_KEY = "runtime:backend-presence:{}"
PRESENCE_SECONDS = 3600  # an answer older than this (no sweep or readiness check since) is unknown
_warned_absent: set[str] = set()  # per process: warn once when a backend flips to absent
_log = logging.getLogger(__name__)


def record_presence(name: str, *, installed: bool, detail: str = "") -> None:
    """Remember whether the cluster serves backend `name`'s resource type (`detail`: what was
    seen, e.g. "the InferenceService resource type is not served"). The sweep and the readiness
    checks call this; it logs a warning once per process when the backend turns out absent,
    instead of at every sweep."""
    from django.core.cache import cache

    from runtime.status import now_iso

    if not installed and name not in _warned_absent:
        _warned_absent.add(name)
        _log.warning("backend %s is not installed on the cluster: %s", name, detail or "its kind is not served")
    elif installed and name in _warned_absent:
        _warned_absent.discard(name)
        _log.info("backend %s is installed on the cluster again", name)
    value = {"installed": installed, "detail": detail, "checked_at": now_iso()}
    cache.set(PRESENCE_KEY.format(name), value, timeout=PRESENCE_SECONDS)


def presence(backends: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """What was last found about each on-cluster backend (default: those in RUNTIME_BACKENDS):
    `{"installed": True | False | None, "detail": str, "checked_at": iso | None}`, None meaning
    nothing has checked yet. One cache read for all of them."""
    from django.core.cache import cache

    if backends is None:
        backends = enabled(on_cluster=True)
    found = cache.get_many([PRESENCE_KEY.format(n) for n in backends])
    unknown = {"installed": None, "detail": "", "checked_at": None}
    return {n: found.get(PRESENCE_KEY.format(n), unknown) for n in backends}


def not_installed(name: str) -> str | None:
    """Why backend `name` cannot be used now, when the last check found its kind absent from
    the cluster; None when it is installed, runs off the cluster, or nothing has checked yet."""
    if name not in _traits or not _traits[name].on_cluster:
        return None
    found = presence([name])[name]
    if found["installed"] is not False:
        return None
    why = f" ({found['detail']})" if found["detail"] else ""
    return f"Backend {name!r} is not installed on the cluster{why}; last checked {found['checked_at']}."


def _kuberay() -> Backend:
    from runtime.backends.kuberay import KubeRayBackend
    from runtime.platform import gateway_spec, platform_spec

    return KubeRayBackend(get_cluster(), platform_spec(), gateway_spec(), _key_seed())


def _kserve() -> Backend:
    from runtime.backends.kserve import KServeBackend
    from runtime.platform import gateway_spec, platform_spec

    return KServeBackend(get_cluster(), platform_spec(), gateway_spec(), _key_seed())


def _key_seed() -> str:
    """What the portal's Try-it keys derive from (runtime.keys): the portal's secret key."""
    from django.conf import settings

    return settings.SECRET_KEY


def _local() -> Backend:
    from runtime.backends.local.backend import LocalBackend

    return LocalBackend.instance()


def _preview_rayservice(spec: DeploymentSpec):
    from runtime.manifests.rayservice import render_rayservice
    from runtime.platform import platform_spec

    return render_rayservice(spec, platform_spec())


def _preview_inferenceservice(spec: DeploymentSpec):
    from runtime.manifests.kserve import render_inferenceservice
    from runtime.platform import platform_spec

    return render_inferenceservice(spec, platform_spec())


def _preview_local(spec: DeploymentSpec):
    """What the local backend runs for `spec` with the configured engine: vLLM's command line
    (the port is the deployment's own, given at its first start), or the single-node Ray app's
    Serve config."""
    from django.conf import settings

    from runtime.backends.local.engine import ENGINES

    engine = ENGINES[settings.LOCAL_ENGINE]()
    config = engine.config(spec)
    if engine.kind == "ray":
        return {"engine": "ray", "serveConfigV2": config}
    return {"engine": engine.kind, "command": engine.argv("python", config, ["<port>"], None)}


def _impact_rayservice(old: DeploymentSpec, new: DeploymentSpec) -> tuple[str, str]:
    from runtime.backends.kuberay import change_impact

    return change_impact(old, new)


def _impact_inferenceservice(old: DeploymentSpec, new: DeploymentSpec) -> tuple[str, str]:
    from runtime.backends.kserve import change_impact

    return change_impact(old, new)


def _local_kv_cache() -> FixedKvCache:
    from django.conf import settings

    from runtime.backends.local.engine import kv_cache

    return kv_cache(settings.LOCAL_KVCACHE_GIB)


def _impact_local(old: DeploymentSpec, new: DeploymentSpec) -> tuple[str, str]:
    return "recreate", (
        "The local engine restarts with the new settings on the same port (the endpoint URL stays): "
        "no answers until it is ready again."
    )


def _rayservice_probe(cluster, config) -> tuple[str, str]:
    from runtime.readiness_install import rayservice_probe

    return rayservice_probe(cluster, config)


def _kserve_readiness(cluster, config) -> list:
    from runtime.readiness.knative import check_knative

    return check_knative(cluster, config)


def _rayservice_route(spec: DeploymentSpec) -> tuple[str, int]:
    from runtime.manifests.rayservice import serve_service

    return serve_service(spec)


def _predictor_route(spec: DeploymentSpec) -> tuple[str, int]:
    from runtime.manifests.kserve import predictor_service
    from runtime.platform import platform_spec

    return predictor_service(spec, platform_spec().kserve_deployment_mode)


register(
    "kuberay",
    _kuberay,
    Traits(
        label="KubeRay RayService (Ray Serve LLM)",
        preview=_preview_rayservice,
        impact=_impact_rayservice,
        kind=ClusterKind(
            product="KubeRay",
            group="ray.io",
            version="v1",
            plural="rayservices",
            install="install the KubeRay operator with its CRDs",
            component="kuberay",
        ),
        route=_rayservice_route,
        # Kueue's RayService integration (kubernetes-sigs/kueue v0.19.2 pkg/controller/jobs/rayservice).
        kueue_frameworks=("ray.io/rayservice",),
        kueue_probe=_rayservice_probe,
        metrics_from_pods=True,
        whole_node_pods=True,
        # A worker-count change moves the running RayCluster's counts (runtime.backends.rayresize).
        extra_permissions=(("get", "ray.io", "rayclusters"), ("patch", "ray.io", "rayclusters")),
    ),
)
register(
    "kserve",
    _kserve,
    Traits(
        label="KServe InferenceService",
        preview=_preview_inferenceservice,
        impact=_impact_inferenceservice,
        kind=ClusterKind(
            product="KServe",
            group="serving.kserve.io",
            version="v1beta1",
            plural="inferenceservices",
            install="install KServe with its CRDs",
            component="kserve",
        ),
        route=_predictor_route,
        # KServe's predictor is a Deployment whose pods Kueue queues one by one: its pod integration
        # (a Workload per pod) and the deployment integration that labels them (../shared/k8s README).
        kueue_frameworks=("pod", "deployment"),
        readiness=_kserve_readiness,
    ),
)
register(
    "local",
    _local,
    Traits(
        label="Local (this machine, vLLM CPU)",
        preview=_preview_local,
        impact=_impact_local,
        local_paths=True,
        sized_for_gpus=False,
        fixed_kv_cache=_local_kv_cache,
    ),
)
