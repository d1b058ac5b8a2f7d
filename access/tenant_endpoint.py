"""Each tenant's endpoint on the cluster Gateway (issue 34): `<GATEWAY_PUBLIC_URL>/<tenant>/v1`,
routing by model to the tenant's running cluster deployments and to the ones other tenants share
with it, under each subscription's limits; `/v1/models` to the portal (access.api.gateway_views).
Built from the database here, rendered by runtime.manifests.tenant_route, applied fail-closed by
runtime.backends.tenant_exposure.

A beat task applies every tenant's endpoint (`apply_tenant_endpoints`): a change (a deployment
starting or stopping, a subscription, a renamed model, a new limit) reaches the Gateway within
its period, and a rule Kuadrant had not enforced yet is routed on a later run. What was applied is
remembered per tenant (a digest in the cache) so an unchanged, fully routed endpoint costs one
database read and no call to the API server.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace

from django.conf import settings
from django.core.cache import cache

from deployments.models import ModelDeployment
from deployments.specs import deployment_spec
from deployments.states import RUNNING
from quotas.models import Tenant
from runtime.backends import cluster_configured, enabled, get_cluster, names
from runtime.backends.tenant_exposure import TenantExposure, expose_tenant
from runtime.manifests.tenant_route import tenant_model, tenant_prefix
from runtime.platform import gateway_spec
from runtime.spec import RenderError, TenantModelSpec, TenantRouteSpec
from sharing.models import Subscription

log = logging.getLogger(__name__)
APPLIED_KEY = "tenant-endpoint:{}"
APPLIED_SECONDS = 3600  # a digest forgotten after an hour: the endpoint is applied again anyway


def _model(dep: ModelDeployment, subscription: Subscription | None = None) -> TenantModelSpec | None:
    try:
        model = tenant_model(deployment_spec(dep))
    except (RenderError, ValueError) as error:  # a deployment whose spec cannot render is left out
        log.warning("deployment %s left off its tenant endpoint: %s", dep.pk, error)
        return None
    if subscription is None:
        return model
    return replace(
        model,
        tokens_per_minute=subscription.tokens_per_minute or 0,
        requests_per_minute=subscription.requests_per_minute or 0,
    )


def tenant_specs(tenant: Tenant) -> list[TenantRouteSpec]:
    """What `tenant`'s endpoint is made of ([] without a Gateway): its own running cluster
    deployments, and per owner the running ones shared with it whose names it does not serve."""
    gateway = gateway_spec()
    if gateway is None or tenant.archived:
        return []
    on_cluster = names(on_cluster=True)
    own_deps = ModelDeployment.objects.filter(tenant=tenant, state__in=RUNNING, backend__in=on_cluster)
    own = [m for m in (_model(d) for d in own_deps.select_related("tenant", "flavor").order_by("pk")) if m]
    portal = {
        "portal_namespace": settings.PORTAL_SERVICE_NAMESPACE,
        "portal_service": settings.PORTAL_SERVICE_NAME,
        "portal_port": settings.PORTAL_SERVICE_PORT,
    }
    base = {"tenant_slug": tenant.slug, "gateway": gateway, **portal}
    limits = {"tokens_per_minute": tenant.tokens_per_minute, "requests_per_minute": tenant.requests_per_minute}
    specs = [TenantRouteSpec(namespace=tenant.namespace, models=tuple(own), **base, **limits)]
    taken = {m.served_name for m in own}
    by_owner: dict[int, tuple[Tenant, list[TenantModelSpec]]] = {}
    subscriptions = (
        Subscription.objects.active()
        .filter(consumer=tenant, publication__deployment__state__in=RUNNING)
        .filter(publication__deployment__backend__in=on_cluster)
        .select_related("publication__deployment__tenant", "publication__deployment__flavor")
        .order_by("publication__deployment_id")
    )
    for sub in subscriptions:
        dep = sub.publication.deployment
        model = _model(dep, sub)
        if model is None or model.served_name in taken:
            continue  # its own model wins the name (and the lower deployment id of two shared ones)
        taken.add(model.served_name)
        by_owner.setdefault(dep.tenant_id, (dep.tenant, []))[1].append(model)
    for owner, models in by_owner.values():
        specs.append(
            TenantRouteSpec(namespace=owner.namespace, owner_slug=owner.slug, models=tuple(models), **base, **limits)
        )
    return specs


def endpoints(tenants) -> list[dict]:
    """Each tenant's OpenAI base URLs: on the Gateway (`gateway`) and on the local gateway
    (`local`, its port kept for good once given), None where there is none."""
    gateway = gateway_spec()
    local = None
    if settings.LOCAL_GATEWAY and "local" in enabled(on_cluster=False):
        from runtime.backends.local.backend import LocalBackend

        local = LocalBackend.instance()
    return [
        {
            "tenant": t.slug,
            "gateway": f"{gateway.public_url}{tenant_prefix(t.slug)}" if gateway else None,
            "local": local.tenant_endpoint(t.slug) if local else None,
        }
        for t in tenants
        if not t.archived
    ]


def _digest(specs: list[TenantRouteSpec]) -> str:
    return hashlib.sha256(json.dumps([repr(s) for s in specs]).encode()).hexdigest()


def apply_tenant_endpoint(tenant: Tenant) -> TenantExposure | None:
    """Apply `tenant`'s endpoint unless the same one was applied with every rule routed; None
    when nothing was called (no Gateway, no cluster, nothing changed)."""
    if gateway_spec() is None or not cluster_configured():
        return None
    specs = tenant_specs(tenant)
    wanted = _digest(specs)
    if cache.get(APPLIED_KEY.format(tenant.pk)) == wanted:
        return None
    # A tenant with no model to route has no endpoint objects (leftovers are deleted).
    done = expose_tenant(get_cluster(), tenant.slug, specs if any(s.models for s in specs) else [])
    if not done.problem and not done.parked:
        cache.set(APPLIED_KEY.format(tenant.pk), wanted, APPLIED_SECONDS)
    elif done.problem:
        log.warning("tenant %s: %s", tenant.slug, done.problem)
    return done


def apply_tenant_endpoints() -> dict[str, int]:
    """Every tenant's endpoint (the beat task): how many were applied, and their parked rules."""
    applied = parked = 0
    for tenant in Tenant.objects.order_by("pk"):
        done = apply_tenant_endpoint(tenant)
        if done is not None:
            applied += 1
            parked += len(done.parked)
    return {"applied": applied, "parked": parked}
