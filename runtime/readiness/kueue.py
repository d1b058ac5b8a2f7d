"""Readiness: Kueue manages each enabled backend's workloads (the integrations its registry entry
names, runtime.backends Traits.kueue_frameworks: `ray.io/rayservice` for KubeRay, `pod` and
`deployment` for KServe's predictor), read from Kueue's ConfigMap, else asked of Kueue's webhook
where the backend offers a probe (Traits.kueue_probe)."""

from __future__ import annotations

import yaml

from runtime import k8s
from runtime.backends import traits as backend_traits
from runtime.readiness_base import AMBER, GREEN, OPTIONAL_RBAC, RED, Check, ReadinessConfig
from runtime.readiness_base import denied as _denied

RAYSERVICE_FRAMEWORK = "ray.io/rayservice"  # Kueue's integrations.frameworks entry
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"


def check_key(backend: str) -> str:
    """The check's key: `kueue:rayservice` for KubeRay (its integration's name), else the backend's."""
    frameworks = backend_traits(backend).kueue_frameworks
    return f"kueue:{frameworks[0].rpartition('/')[2]}" if len(frameworks) == 1 else f"kueue:{backend}"


def _what(backend: str) -> str:
    kind = backend_traits(backend).kind
    return {"rayservices": "RayServices"}.get(kind.plural, f"{kind.product}'s pods") if kind else backend


def check_kueue_integrations(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    backends = [n for n in config.backends if backend_traits(n).kueue_frameworks]
    if not backends:
        return []
    namespace, name = config.kueue_config
    try:
        found = cluster.get(k8s.CONFIGMAP, name, namespace)
        unread = f"Kueue's configuration {namespace}/{name} was not found: its integrations could not be read."
        amber_fix = "Set KUEUE_CONFIG_NAMESPACE/KUEUE_CONFIG_MAP to Kueue's ConfigMap, so it can be read. "
    except k8s.PermanentClusterError as error:
        if not _denied(error):
            raise
        found, unread, amber_fix = None, f"Cannot read {namespace}/{name}: {error}.", f"Apply {OPTIONAL_RBAC}. "
    manager, broken = {}, ""
    if found is not None:
        try:
            manager = yaml.safe_load((found.get("data") or {}).get(KUEUE_CONFIG_KEY) or "") or {}
        except yaml.YAMLError as error:
            broken = f"{KUEUE_CONFIG_KEY} is not YAML: {error}"
    frameworks = ((manager.get("integrations") or {}).get("frameworks") or []) if isinstance(manager, dict) else []
    return [
        _check_backend(cluster, config, backend, found is not None, broken, frameworks, unread, amber_fix)
        for backend in backends
    ]


def _check_backend(cluster, config, backend, read, broken, frameworks, unread, amber_fix) -> Check:
    namespace, name = config.kueue_config
    wanted = backend_traits(backend).kueue_frameworks
    key, title = check_key(backend), f"Kueue manages {_what(backend)}"
    fix = f"Add {', '.join(wanted)} to integrations.frameworks in ConfigMap {namespace}/{name}, then restart Kueue."
    if broken:
        return Check(key, title, AMBER, broken, fix)
    if not read:
        # Installs name it differently (Helm, a prefix), pass the file another way, or do not grant
        # the optional read (the real plane's portal ServiceAccount): ask Kueue's webhook instead.
        probe = backend_traits(backend).kueue_probe
        if probe is None:
            return Check(key, title, AMBER, unread, amber_fix + fix)
        status, said = probe(cluster, config)
        fixes = {GREEN: "", AMBER: amber_fix + fix, RED: fix}
        return Check(key, title, status, f"{unread} {said}", fixes[status])
    missing = [f for f in wanted if f not in frameworks]
    if not missing:
        return Check(key, title, GREEN, f"{', '.join(wanted)} {'is' if len(wanted) == 1 else 'are'} enabled.")
    enabled = ", ".join(str(f) for f in frameworks) or "none"
    detail = f"Not enabled: {', '.join(missing)} (frameworks: {enabled}): {_what(backend)} would run unqueued."
    return Check(key, title, RED, detail, fix)
