"""The portal's identity on a control plane: the `llm-portal` ServiceAccount bound to the
project's own ClusterRole (as the Helm chart charts/llm-portal renders it with its defaults), and
a kubeconfig holding a token for it from the TokenRequest API. The tests and `scripts/cluster`
run the portal as this account, so the real authorizer proves the install's grant is enough."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tests.support import chart

if TYPE_CHECKING:
    from tests.support.controlplane.plane import ControlPlane

PORTAL_NAMESPACE = "llm-portal"


RBAC_PLURALS = {
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
}


def grant(plane: ControlPlane, objects: list[dict[str, Any]]) -> list[str]:
    """Create the project's RBAC `objects` (rendered by the chart: tests.support.chart) for the
    `llm-portal` ServiceAccount of PORTAL_NAMESPACE; returns their API paths (to DELETE them
    again)."""
    paths = []
    for doc in objects:
        for subject in doc.get("subjects", []):
            subject["namespace"] = PORTAL_NAMESPACE
        namespace = doc["metadata"].get("namespace")
        where = f"namespaces/{namespace}/" if namespace else ""
        collection = f"/apis/rbac.authorization.k8s.io/v1/{where}{RBAC_PLURALS[doc['kind']]}"
        plane.request("POST", collection, doc)
        paths.append(f"{collection}/{doc['metadata']['name']}")
    return paths


def portal_identity(plane: ControlPlane, *, expiration_seconds: int = 86400) -> Path:
    """Create the account and its bindings; write `portal.kubeconfig` beside the admin one."""
    plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": PORTAL_NAMESPACE}})
    plane.request(
        "POST", f"/api/v1/namespaces/{PORTAL_NAMESPACE}/serviceaccounts", {"metadata": {"name": "llm-portal"}}
    )
    grant(plane, chart.rbac_objects())
    return token_kubeconfig(
        plane, PORTAL_NAMESPACE, "llm-portal", plane.dir / "portal.kubeconfig", expiration_seconds=expiration_seconds
    )


def token_kubeconfig(
    plane: ControlPlane, namespace: str, account: str, path: Path, *, expiration_seconds: int = 86400
) -> Path:
    """Write `path`: the admin kubeconfig with a TokenRequest token of `namespace/account` instead."""
    token = plane.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        },
    )["status"]["token"]
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = account
    path.write_text(yaml.safe_dump(config))
    return path
