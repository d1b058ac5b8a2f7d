"""Exposure on the cluster: the kuberay and kserve backends' route, policies and Try-it key.

These objects belong to the deployment's object set: they are applied when its main object is
created or changed (their hash is folded into the main object's spec hash, so an unchanged
deployment costs no extra read, and the sweep notices a changed tenant limit as drift), and
deleted when it is removed. With no Gateway configured nothing is rendered and nothing is called.
"""

from __future__ import annotations

from typing import Any

from runtime import k8s
from runtime.keys import portal_key
from runtime.manifests.gateway import (
    exposure_objects,
    portal_key_secret_name,
    public_endpoint,
    render_key_secret,
)
from runtime.spec import DeploymentSpec, GatewaySpec

EXPOSURE_KINDS = (k8s.HTTPROUTE, k8s.AUTHPOLICY, k8s.TOKENRATELIMITPOLICY, k8s.RATELIMITPOLICY)


def exposure_digest(spec: DeploymentSpec, gateway: GatewaySpec | None) -> str:
    """A hash of what exposes `spec` ("" when nothing is exposed)."""
    if gateway is None:
        return ""
    from runtime.backends.base import digest

    return digest([o["spec"] for o in exposure_objects(spec, gateway)])


def external_endpoint(spec: DeploymentSpec, gateway: GatewaySpec | None, internal: str | None) -> str | None:
    """The URL users call: the Gateway's once the engine has an endpoint, else the internal one."""
    if gateway is None or internal is None:
        return internal
    return public_endpoint(gateway, spec)


def expose(cluster: k8s.Cluster, spec: DeploymentSpec, gateway: GatewaySpec | None, seed: str) -> None:
    """Apply the route and policies, delete the limit policies the tenant no longer sets, and
    write the Try-it key's Secret. Idempotent."""
    if gateway is None:
        return
    wanted = exposure_objects(spec, gateway)
    for obj in wanted:
        cluster.apply(obj)
    present = {k8s.kind_of(obj) for obj in wanted}
    for kind in EXPOSURE_KINDS:
        if kind not in present:
            cluster.delete(kind, spec.name, spec.namespace)
    cluster.apply(portal_key_secret(spec, gateway, seed))


def unexpose(cluster: k8s.Cluster, spec: DeploymentSpec, gateway: GatewaySpec | None) -> None:
    """Delete the route, the policies and the Try-it key (each delete is idempotent)."""
    if gateway is None:
        return
    for kind in EXPOSURE_KINDS:
        cluster.delete(kind, spec.name, spec.namespace)
    cluster.delete(k8s.SECRET, portal_key_secret_name(spec.deployment_id), gateway.key_namespace)


def portal_key_secret(spec: DeploymentSpec, gateway: GatewaySpec, seed: str) -> dict[str, Any]:
    """The Try-it key as a deployment-scoped key Secret in the key namespace."""
    return render_key_secret(
        name=portal_key_secret_name(spec.deployment_id),
        namespace=gateway.key_namespace,
        tenant_slug=spec.tenant_slug,
        deployment_id=spec.deployment_id,
        api_key=portal_key(seed, spec.deployment_id),
        user_id=f"portal-try-{spec.deployment_id}",
    )
