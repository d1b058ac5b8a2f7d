"""Runtime backends behind one interface (`base.Backend`), looked up by name in a registry.

Built in: kuberay (RayService), kserve (InferenceService), local (a vLLM process on this
machine). `get_backend(dep.backend)` is the only way the apps reach one.

Nothing is imported here at module level beyond the standard library: the local engine's Ray
launcher (`python -m runtime.backends.local.launcher`) runs under this package with the engine's
interpreter, which need not have the Kubernetes client or Django installed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime import k8s
    from runtime.backends.base import Backend

BackendFactory = Callable[[], "Backend"]

_factories: dict[str, BackendFactory] = {}


def register(name: str, factory: BackendFactory) -> None:
    """Make `get_backend(name)` return `factory()`; registering a name again replaces it."""
    _factories[name] = factory


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
            if not settings.KUBERNETES_URL and not settings.KUBECONFIG and not _in_cluster():
                raise k8s.PermanentClusterError(
                    "No Kubernetes cluster is configured: set KUBERNETES_URL or KUBECONFIG "
                    "(or run the portal in the cluster)."
                )
            _clusters[key] = k8s.Cluster.from_settings()
        return _clusters[key]


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _kuberay() -> Backend:
    from runtime.backends.kuberay import KubeRayBackend
    from runtime.platform import platform_spec

    return KubeRayBackend(get_cluster(), platform_spec())


def _kserve() -> Backend:
    from runtime.backends.kserve import KServeBackend
    from runtime.platform import platform_spec

    return KServeBackend(get_cluster(), platform_spec())


def _local() -> Backend:
    from runtime.backends.local.backend import LocalBackend

    return LocalBackend.instance()


register("kuberay", _kuberay)
register("kserve", _kserve)
register("local", _local)
