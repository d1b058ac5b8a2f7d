"""The portal's Helm chart (charts/llm-portal), rendered with the real helm binary.

`helm` comes from ../shared/k8s/bin/helm.xz, unpacked and checksummed once like the control
plane's binaries (tests.support.controlplane.binaries), or from `KUBEBUILDER_ASSETS`. Without it
the callers skip with the reason (fail under CI). The chart is the one source of the portal's
cluster manifests: the tests, the real control plane's ServiceAccount grant and the install
guide all read what `helm template` renders.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.controlplane.binaries import Unavailable, binaries
from tests.support.shared import PROJECT_ROOT

CHART = PROJECT_ROOT / "charts" / "llm-portal"
RELEASE = "llm-portal"
NAMESPACE = "llm-portal"
# The Kubernetes version `helm template` assumes (the chart's kubeVersion refuses older ones):
# the control plane the tests run on (runtime/versions.py, docs/install.md's matrix).
KUBE_VERSION = "1.36.2"

# Every optional part on, with the values a platform engineer would set for it: Helm's convention,
# the chart's ci/*-values.yaml (scripts/check-chart lints and validates each).
CI_VALUES = CHART / "ci"
ALL_ON: dict[str, Any] = yaml.safe_load((CI_VALUES / "all-on-values.yaml").read_text())
# The Ingress instead of the HTTPRoute (the schema allows one of the two).
WITH_INGRESS: dict[str, Any] = {
    "ingress": {"enabled": True, "className": "nginx", "tlsSecretName": "llm-portal-tls"},
}


def helm() -> Path:
    """The helm binary; raises `Unavailable` with the reason when it is not here."""
    return binaries(("helm",))["helm"]


def require_helm() -> Path:
    """The helm binary, or skip the test (fail under CI) with the reason."""
    try:
        return helm()
    except Unavailable as reason:
        message = f"helm is not available: {reason}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set, so this is an error, not a skip)")
        pytest.skip(message)


def run_helm(*args: str, values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """`helm <args> [-f values.json]` in a private HOME (helm writes nothing of the user's)."""
    binary = helm()
    with tempfile.TemporaryDirectory(prefix="helm-") as home:
        command = [str(binary), *args]
        if values is not None:
            path = Path(home) / "values.json"  # JSON is YAML: helm reads it as a values file
            path.write_text(json.dumps(values))
            command += ["-f", str(path)]
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)


def template_result(values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """The finished `helm template` of the chart with `values` (its output or its refusal)."""
    return run_helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION, values=values
    )


@functools.cache
def _rendered(values_json: str) -> str:
    result = template_result(json.loads(values_json) if values_json else None)
    assert result.returncode == 0, result.stderr
    return result.stdout


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's objects as `helm template` renders them with `values` (a fresh copy); raises
    `Unavailable` without helm."""
    text = _rendered(json.dumps(values, sort_keys=True) if values else "")
    return [doc for doc in yaml.safe_load_all(text) if doc]


def rbac_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rendered RBAC objects (roles and bindings) for the release in NAMESPACE."""
    kinds = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    return [doc for doc in render(values) if doc["kind"] in kinds]


def portal_cluster_role() -> dict[str, Any]:
    """The ClusterRole the portal's ServiceAccount is bound to with the chart's defaults."""
    (role,) = [doc for doc in rbac_objects() if doc["kind"] == "ClusterRole"]
    return role


def readiness_rbac() -> list[dict[str, Any]]:
    """The optional readiness grant (rbac.readiness.enabled): only the objects it adds."""
    base = {(d["kind"], d["metadata"]["name"]) for d in rbac_objects()}
    on = rbac_objects({"rbac": {"readiness": {"enabled": True}}})
    return [d for d in on if (d["kind"], d["metadata"]["name"]) not in base]


def api_keys_rbac(api_key_namespace: str = "kuadrant-system") -> list[dict[str, Any]]:
    """The Role and binding for API-key Secrets, rendered once endpoint access is on."""
    values = {"gateway": {"publicUrl": "https://llm.example.com", "apiKeyNamespace": api_key_namespace}}
    base = {(d["kind"], d["metadata"]["name"]) for d in rbac_objects()}
    return [d for d in rbac_objects(values) if (d["kind"], d["metadata"]["name"]) not in base]


def rules_of(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(verb, apiGroup, resource) triples a Role or ClusterRole grants."""
    return {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
