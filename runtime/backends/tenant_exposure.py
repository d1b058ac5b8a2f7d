"""A tenant endpoint on the cluster: apply what runtime.manifests.tenant_route renders for a tenant
(its own models' route in its namespace, each owner's shared models' route in the owner's, the
`/v1/models` route in the portal's) and delete the tenant endpoint objects it no longer wants.

Fail closed, as a deployment's exposure (runtime.backends.exposure): the policies are applied
first; a model's rule sends requests to its backend only once Kuadrant reports that rule's
AuthPolicy Accepted and Enforced for its current generation; until then the rule is parked (its
name and match, no backend), so the policy can attach and no request reaches the engine unchecked.
Objects are found again by their labels (tenant_route: LABEL_ENDPOINT and LABEL_TENANT), never by
name alone, so a deployment's own route and another tenant's endpoint are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime import k8s
from runtime.kuadrant import enforcement
from runtime.manifests.common import LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY
from runtime.manifests.tenant_route import (
    ENDPOINT_TENANT,
    LABEL_ENDPOINT,
    chunks,
    tenant_route_objects,
)
from runtime.spec import TenantRouteSpec

# Deleted in this order: routes before the policies that guard them.
TENANT_KINDS = (k8s.HTTPROUTE, k8s.AUTHPOLICY, k8s.TOKENRATELIMITPOLICY, k8s.RATELIMITPOLICY)


@dataclass
class TenantExposure:
    """What one apply did: the models routed, those parked (and why), the objects deleted."""

    routed: list[int] = field(default_factory=list)
    parked: dict[int, str] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    problem: str = ""  # set: nothing could be applied (Kuadrant or the Gateway API is not served)


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta["namespace"], meta["name"]


def expose_tenant(cluster: k8s.Cluster, tenant_slug: str, specs: list[TenantRouteSpec]) -> TenantExposure:
    """Make the cluster hold exactly `specs`' objects for `tenant_slug`'s endpoint (an empty list
    removes the endpoint). Idempotent."""
    done = TenantExposure()
    wanted: set[tuple[str, str, str]] = set()
    try:
        for spec in specs:
            _apply_spec(cluster, spec, done, wanted)
    except k8s.NotFound as error:  # a CRD is not installed: nothing more is applied, nothing deleted
        done.problem = (
            f"The tenant endpoint could not be applied ({error}): are the Gateway API and Kuadrant installed?"
        )
        return done
    selector = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ENDPOINT: ENDPOINT_TENANT, LABEL_TENANT: tenant_slug}
    for kind in TENANT_KINDS:
        try:
            present = cluster.list(kind, None, selector)
        except k8s.NotFound:
            continue
        for obj in present:
            meta = obj["metadata"]
            if (kind.kind, meta["namespace"], meta["name"]) not in wanted:
                cluster.delete(kind, meta["name"], meta["namespace"])
                done.deleted.append(f"{kind.kind} {meta['namespace']}/{meta['name']}")
    return done


def _apply_spec(cluster: k8s.Cluster, spec: TenantRouteSpec, done: TenantExposure, wanted: set) -> None:
    objects = tenant_route_objects(spec)
    for obj in objects:
        wanted.add(_key(obj))
        if obj["kind"] != "HTTPRoute":
            cluster.apply(obj)
    parked = set()
    for route, models in chunks(spec):
        for model in models:
            enforced, said = enforcement(cluster.get(k8s.AUTHPOLICY, f"{route}-{model.deployment_id}", spec.namespace))
            if enforced:
                done.routed.append(model.deployment_id)
            else:
                parked.add(model.deployment_id)
                done.parked[model.deployment_id] = said
    for obj in tenant_route_objects(spec, parked=parked):
        if obj["kind"] == "HTTPRoute":
            cluster.apply(obj)
