"""Readiness: Kueue manages RayServices (its ConfigMap's integrations, else its webhook)."""

from __future__ import annotations

import yaml

from runtime import k8s
from runtime.readiness_base import AMBER, GREEN, OPTIONAL_RBAC, RED, Check, ReadinessConfig
from runtime.readiness_base import denied as _denied
from runtime.readiness_install import rayservice_probe

RAYSERVICE_FRAMEWORK = "ray.io/rayservice"  # Kueue's integrations.frameworks entry
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"


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
