"""A tenant endpoint `<public_url>/<tenant>/v1` that routes by model: HTTPRoutes matching the
header a body-based router sets, Kuadrant policies per model, optional InferencePools, and the
route of `/v1/models` to the portal. Pure: no ORM, no I/O.

Routing by the `model` field. Gateway API routes match paths and headers, not bodies; the field's
answer is an ext_proc that copies the body's `model` into the `X-Gateway-Model-Name` header and
clears Envoy's route cache so the route is chosen again with it (kubernetes-sigs/gateway-api-
inference-extension v1.5.0, pkg/bbr/plugins/bodyfieldtoheader/body_field_to_header.go: ModelHeader;
pkg/bbr/handlers/request.go: `ClearRouteCache: true`). It left that repository in v1.6.0 (commit
24daf87c, "Cleanup BBR from main") for llm-d's inference payload processor, whose default plugin
sets the same header (llm-d/llm-d-inference-payload-processor a3af1b0, pkg/plugins/
bodyfieldtoheader/body_field_to_header.go). The router is a platform install (docs/install.md);
the portal renders only what is per tenant. Each served model is one rule: path prefix
`/<tenant>/v1` AND that header, exactly, rewritten to `/v1` for the engine. One match per rule
because the HTTPRoute CRD allows a ReplacePrefixMatch rewrite only on a rule with a single
PathPrefix match; at most 16 rules per route (CRD `rules.maxItems`), so a tenant with more models
gets several routes, chunked by deployment id (ids only grow, so a new model joins the last chunk
and the others keep their route and its counters).

Where the objects live. The route sits in the namespace of the Services it targets: a backendRef
to another namespace is only honoured with a ReferenceGrant in the target's namespace (Gateway API
BackendObjectReference), and a ReferenceGrant admits every route of the `from` namespace — a
tenant able to write routes and Kuadrant policies there could reach a shared model around its
owner's limits. So a tenant's own models are routed from its namespace, and the models another
tenant shares with it from the owner's namespace (one spec per owner, `owner_slug`): no grant is
ever needed, and since Kuadrant counts every limit per HTTPRoute (runtime.manifests.gateway), the
shared route's counters are that consumer's, which is what per-consumer limits are. Kuadrant
policies must be in their route's namespace (AuthPolicy `targetRef` is a LocalPolicyTargetReference).
`/v1/models` is answered by the portal: its route is in the portal's namespace, next to the
portal's Service, again needing no grant; the Gateway's listener must admit routes from there.

Keys. Each model rule has its own AuthPolicy, aimed at the rule by `targetRef.sectionName` (the
HTTPRouteRule's name): Kuadrant enforces the most specific policy, whole, for the requests of that
rule (Kuadrant/kuadrant-operator v1.5.2, doc/overviews/auth.md, "Protect only specific rules within
a HTTPRoute" and "Policy hierarchy": HTTPRouteRule via sectionName is the most specific, atomic
defaults replace the broader policy). The policy is a deployment's usual one (gateway.key_rules):
the keys of the tenant, or the keys scoped to that very deployment. So a deployment-scoped key
reaches only its own model: a request whose header names another model matched another rule,
whose policy does not accept that key; a request with no header (no `model` in the body) matches
no model rule. The routing decision and the key check read the same header, after the router set
it (its filter is inserted first in the chain: the upstream chart's Istio EnvoyFilter,
`operation: INSERT_FIRST`). A client-sent header is overwritten whenever the body has a `model`.
`/v1/models` accepts any key of the tenant, either scope; the portal then lists what that key
may use (it checks the key itself: the gateway passes `Authorization` through).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from runtime.manifests.common import LABEL_DEPLOYMENT_ID, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY
from runtime.manifests.gateway import (
    AUTHPOLICY_API_VERSION,
    GATEWAY_GROUP,
    HTTPROUTE_API_VERSION,
    LABEL_KEY_SCOPE,
    RATELIMITPOLICY_API_VERSION,
    REQUESTS_LIMIT,
    REQUESTS_METERED,
    SCOPE_DEPLOYMENT,
    TOKENRATELIMITPOLICY_API_VERSION,
    TOKENS_LIMIT,
    TOKENS_METERED,
    api_key_identity,
    backend_service,
    key_rules,
    key_selector,
    meter,
    parent_ref,
    published_key_id,
    route_hostnames,
)
from runtime.manifests.syntax import DNS1123_LABEL, DNS1123_LABEL_MAX, LABEL_VALUE, LABEL_VALUE_MAX, QUALIFIED_NAME
from runtime.spec import DeploymentSpec, ModelPoolSpec, RenderError, TenantModelSpec, TenantRouteSpec

# The header the body-based router writes the request's `model` into (module docstring).
MODEL_HEADER = "X-Gateway-Model-Name"
# What a served model name may be: deployments.validation.SERVED_NAME, repeated here because the
# runtime imports no app. Nothing else reaches a header match, so nothing else can reach one.
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
MAX_RULES = 16  # HTTPRoute spec.rules maxItems
ROUTE_NAME = "llm-portal-v1"
MODELS_ROUTE_NAME = "llm-portal-models"
INFERENCE_GROUP = "inference.networking.k8s.io"
INFERENCEPOOL_API_VERSION = f"{INFERENCE_GROUP}/v1"
LABEL_OWNER = "llm-portal.io/owner"  # on a shared route: the tenant whose models it reaches
# On every object of a tenant endpoint (not a deployment's own route): what the portal lists to
# delete those no longer wanted (runtime.backends.tenant_exposure).
LABEL_ENDPOINT = "llm-portal.io/endpoint"
ENDPOINT_TENANT = "tenant"
ROUTE_TOKENS_LIMIT = "tokens-per-route"
ROUTE_REQUESTS_LIMIT = "requests-per-route"
EPP_FAILURE_MODES = ("FailClose", "FailOpen")


# The segment after the tenant in the tenant endpoint's path: a deployment's own route is
# `/<tenant>/<name>` (gateway.route_prefix), so no deployment may be named this.
TENANT_SEGMENT = "v1"


def tenant_prefix(tenant_slug: str) -> str:
    """The tenant endpoint's path on the Gateway."""
    return f"/{tenant_slug}/{TENANT_SEGMENT}"


def tenant_endpoint(spec: TenantRouteSpec) -> str:
    """The OpenAI base URL of the tenant's endpoint."""
    return f"{spec.gateway.public_url.rstrip('/')}{tenant_prefix(spec.tenant_slug)}"


def models_api_path(tenant_slug: str) -> str:
    """The portal's API path answering `<endpoint>/models` (and `<endpoint>/models/<model>`)."""
    return f"/api/v1/gateway/{tenant_slug}/models"


def tenant_model(spec: DeploymentSpec, pool: ModelPoolSpec | None = None) -> TenantModelSpec:
    """A deployment as a model of its tenant's endpoint: its served name and its backend's Service."""
    service, port = backend_service(spec)
    return TenantModelSpec(spec.served_model_name, spec.deployment_id, spec.name, service, port, pool)


def rule_name(model: TenantModelSpec) -> str:
    """The HTTPRouteRule of `model`: its AuthPolicy's `targetRef.sectionName`."""
    return f"deployment-{model.deployment_id}"


def route_base_name(spec: TenantRouteSpec) -> str:
    return f"{ROUTE_NAME}-{spec.tenant_slug}" if spec.owner_slug else ROUTE_NAME


def chunks(spec: TenantRouteSpec) -> list[tuple[str, tuple[TenantModelSpec, ...]]]:
    """(route name, its models): `MAX_RULES` models a route, by deployment id; none without models."""
    _check(spec)
    models = sorted(spec.models, key=lambda m: m.deployment_id)
    base = route_base_name(spec)
    return [
        (base if i == 0 else f"{base}-{i // MAX_RULES + 1}", tuple(models[i : i + MAX_RULES]))
        for i in range(0, len(models), MAX_RULES)
    ]


def _labels(spec: TenantRouteSpec, model: TenantModelSpec | None = None) -> dict[str, str]:
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TENANT: spec.tenant_slug, LABEL_ENDPOINT: ENDPOINT_TENANT}
    if spec.owner_slug:
        labels[LABEL_OWNER] = spec.owner_slug
    if model is not None:
        labels[LABEL_DEPLOYMENT_ID] = str(model.deployment_id)
    return labels


def _metadata(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels}


def _backend_ref(spec: TenantRouteSpec, model: TenantModelSpec) -> dict[str, Any]:
    if _pooled(spec, model):
        return {"group": INFERENCE_GROUP, "kind": "InferencePool", "name": model.deployment_name}
    return {"group": "", "kind": "Service", "name": model.service, "port": model.port}


def _model_rule(spec: TenantRouteSpec, model: TenantModelSpec, routed: bool) -> dict[str, Any]:
    match = {
        "path": {"type": "PathPrefix", "value": tenant_prefix(spec.tenant_slug)},
        "headers": [{"type": "Exact", "name": MODEL_HEADER, "value": model.served_name}],
    }
    rule: dict[str, Any] = {"name": rule_name(model), "matches": [match]}
    if routed:
        rewrite = {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}}
        rule["filters"] = [{"type": "URLRewrite", "urlRewrite": rewrite}]
        rule["backendRefs"] = [_backend_ref(spec, model)]
    return rule


def _route(name: str, namespace: str, labels: dict[str, str], spec: TenantRouteSpec, rules: list) -> dict[str, Any]:
    body: dict[str, Any] = {"parentRefs": [parent_ref(spec.gateway)], "rules": rules}
    hostnames = route_hostnames(spec.gateway)
    if hostnames:
        body["hostnames"] = hostnames
    return {
        "apiVersion": HTTPROUTE_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": _metadata(name, namespace, labels),
        "spec": body,
    }


def render_tenant_httproutes(spec: TenantRouteSpec, *, parked: Collection[int] = ()) -> list[dict[str, Any]]:
    """The model routes, one per chunk of `MAX_RULES` models ([] without models).

    The rule of a deployment id in `parked` keeps its name and match (so its AuthPolicy attaches
    and Kuadrant can enforce it) but has no backend and no filter: nothing it matches reaches the
    engine (as gateway.render_httproute's `routed=False`) until its policy is enforced.
    """
    return [
        _route(
            name, spec.namespace, _labels(spec), spec, [_model_rule(spec, m, m.deployment_id not in parked) for m in ms]
        )
        for name, ms in chunks(spec)
    ]


def render_models_httproute(spec: TenantRouteSpec) -> dict[str, Any] | None:
    """`GET <endpoint>/models[/<model>]` to the portal's API (`models_api_path`), from the portal's
    namespace; None for a shared spec (the consumer's own spec renders it) or without a portal Service."""
    if spec.owner_slug or not spec.portal_service:
        return None
    _check(spec)
    match = {"path": {"type": "PathPrefix", "value": f"{tenant_prefix(spec.tenant_slug)}/models"}, "method": "GET"}
    rewrite = {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": models_api_path(spec.tenant_slug)}}
    rule = {
        "name": "models",
        "matches": [match],
        "filters": [{"type": "URLRewrite", "urlRewrite": rewrite}],
        "backendRefs": [{"group": "", "kind": "Service", "name": spec.portal_service, "port": spec.portal_port}],
    }
    name = f"{MODELS_ROUTE_NAME}-{spec.tenant_slug}"
    return _route(name, spec.portal_namespace, _labels(spec), spec, [rule])


def _authpolicy(name: str, namespace: str, labels: dict[str, str], target: dict[str, str], rules: dict) -> dict:
    return {
        "apiVersion": AUTHPOLICY_API_VERSION,
        "kind": "AuthPolicy",
        "metadata": _metadata(name, namespace, labels),
        "spec": {"targetRef": target, "rules": rules},
    }


def render_tenant_authpolicies(spec: TenantRouteSpec) -> list[dict[str, Any]]:
    """One AuthPolicy per model rule: the tenant's keys, or the keys scoped to that deployment."""
    policies = []
    for route, models in chunks(spec):
        for model in models:
            target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": route, "sectionName": rule_name(model)}
            rules = key_rules(spec.tenant_slug, model.deployment_id)
            name = f"{route}-{model.deployment_id}"
            policies.append(_authpolicy(name, spec.namespace, _labels(spec, model), target, rules))
    return policies


def render_models_authpolicy(spec: TenantRouteSpec) -> dict[str, Any] | None:
    """Any key of the tenant on its `/v1/models` route, either scope (None without that route)."""
    route = render_models_httproute(spec)
    if route is None:
        return None
    deployment_keys = key_selector(spec.tenant_slug, None) | {LABEL_KEY_SCOPE: SCOPE_DEPLOYMENT}
    rules = {
        "authentication": {
            "deployment-keys": api_key_identity(deployment_keys),
            "tenant-keys": api_key_identity(key_selector(spec.tenant_slug, None)),
        },
        "response": {"success": {"filters": published_key_id()}},
    }
    meta = route["metadata"]
    target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": meta["name"]}
    return _authpolicy(meta["name"], meta["namespace"], meta["labels"], target, rules)


def _limits(per_key: int, per_route: int, key_name: str, metered_name: str, route_name: str) -> dict[str, Any]:
    """The tenant's per-key limit, or the per-key meter (gateway._meter), and the route's."""
    limits = meter(per_key, key_name, metered_name)
    if per_route > 0:  # no counters: one count for every key on the route
        limits[route_name] = {"rates": [{"limit": per_route, "window": "1m"}]}
    return limits


def _limit_policy(kind: str, version: str, meta: dict, target: dict, limits: dict) -> dict[str, Any]:
    return {"apiVersion": version, "kind": kind, "metadata": meta, "spec": {"targetRef": target, "limits": limits}}


def render_tenant_limit_policies(spec: TenantRouteSpec) -> list[dict[str, Any]]:
    """Per route: a TokenRateLimitPolicy and a RateLimitPolicy, each with what the spec sets (at
    least the per-key meter, which the usage per key is counted from: runtime.manifests.telemetry); and
    per shared model with a consumer's limits, the same aimed at its rule (`sectionName`), one
    counter each: the route is that consumer's, so the counter is the consumer's use of that model.
    Kuadrant applies the most specific policy of a kind to a rule's requests (doc/overviews/
    rate-limiting.md, "Targeting a HTTPRouteRule"), so the rule's limits replace the route's there."""
    token_limits = _limits(
        spec.tokens_per_minute, spec.route_tokens_per_minute, TOKENS_LIMIT, TOKENS_METERED, ROUTE_TOKENS_LIMIT
    )
    request_limits = _limits(
        spec.requests_per_minute, spec.route_requests_per_minute, REQUESTS_LIMIT, REQUESTS_METERED, ROUTE_REQUESTS_LIMIT
    )
    policies = []
    for route, _ in chunks(spec):
        target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": route}
        for kind, version, limits in (
            ("TokenRateLimitPolicy", TOKENRATELIMITPOLICY_API_VERSION, token_limits),
            ("RateLimitPolicy", RATELIMITPOLICY_API_VERSION, request_limits),
        ):
            meta = _metadata(route, spec.namespace, _labels(spec))
            policies.append(_limit_policy(kind, version, meta, target, limits))
    for route, models in chunks(spec):
        for model in models:
            target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": route, "sectionName": rule_name(model)}
            meta = _metadata(f"{route}-{model.deployment_id}", spec.namespace, _labels(spec, model))
            for kind, version, per_minute, name in (
                ("TokenRateLimitPolicy", TOKENRATELIMITPOLICY_API_VERSION, model.tokens_per_minute, ROUTE_TOKENS_LIMIT),
                ("RateLimitPolicy", RATELIMITPOLICY_API_VERSION, model.requests_per_minute, ROUTE_REQUESTS_LIMIT),
            ):
                if per_minute > 0:
                    limits = {name: {"rates": [{"limit": per_minute, "window": "1m"}]}}
                    policies.append(_limit_policy(kind, version, dict(meta), target, limits))
    return policies


def _pooled(spec: TenantRouteSpec, model: TenantModelSpec) -> bool:
    return spec.endpoint_picker is not None and model.pool is not None


def render_inferencepools(spec: TenantRouteSpec) -> list[dict[str, Any]]:
    """An InferencePool per model whose pods are its model servers, when the platform runs an
    endpoint picker: the pods by label, the engine's port, the picker's Service (the pool's name
    plus its suffix, as the Inference Extension's inferencepool chart names it: v1.5.0,
    config/charts/epplib/templates/_helpers.tpl, `<release>-epp`)."""
    _check(spec)
    picker = spec.endpoint_picker
    pools = []
    for model in sorted(spec.models, key=lambda m: m.deployment_id):
        if picker is None or model.pool is None:
            continue
        ref = {
            "name": f"{model.deployment_name}{picker.service_suffix}",
            "port": {"number": picker.port},
            "failureMode": picker.failure_mode,
        }
        body = {
            "selector": {"matchLabels": dict(model.pool.selector)},
            "targetPorts": [{"number": model.pool.target_port}],
            "endpointPickerRef": ref,
        }
        meta = _metadata(model.deployment_name, spec.namespace, _labels(spec, model))
        pools.append({"apiVersion": INFERENCEPOOL_API_VERSION, "kind": "InferencePool", "metadata": meta, "spec": body})
    return pools


def tenant_route_objects(spec: TenantRouteSpec, *, parked: Collection[int] = ()) -> list[dict[str, Any]]:
    """Every object of the tenant endpoint, in apply order: pools, policies, then routes (a route
    never exists without the policies that guard it)."""
    optional = (render_models_authpolicy(spec), render_models_httproute(spec))
    return [
        *render_inferencepools(spec),
        *render_tenant_authpolicies(spec),
        *render_tenant_limit_policies(spec),
        *render_tenant_httproutes(spec, parked=parked),
        *(o for o in optional if o is not None),
    ]


def _problem(spec: TenantRouteSpec) -> str | None:
    """Why `spec` cannot be rendered, or None."""
    slugs = [spec.tenant_slug] + ([spec.owner_slug] if spec.owner_slug else [])
    names = [spec.namespace] + ([spec.portal_namespace, spec.portal_service] if spec.portal_service else [])
    for value in (*slugs, *names):
        if len(value) > DNS1123_LABEL_MAX or not DNS1123_LABEL.fullmatch(value):
            return f"{value!r} is not a DNS-1123 label"
    if spec.owner_slug == spec.tenant_slug:
        return "a tenant does not share its models with itself"
    if len(spec.models) > MAX_RULES and (spec.route_tokens_per_minute or spec.route_requests_per_minute):
        return f"a route-wide limit counts one route: at most {MAX_RULES} models may share it"
    if spec.endpoint_picker is not None and spec.endpoint_picker.failure_mode not in EPP_FAILURE_MODES:
        return f"endpoint picker failure mode {spec.endpoint_picker.failure_mode!r} is not one of {EPP_FAILURE_MODES}"
    served = [m.served_name for m in spec.models]
    ids = [m.deployment_id for m in spec.models]
    if len(set(served)) != len(served) or len(set(ids)) != len(ids):
        return "two models of a tenant endpoint have the same served name or deployment"
    for model in spec.models:
        said = _model_problem(spec, model)
        if said:
            return f"model {model.served_name!r}: {said}"
    return None


def _model_problem(spec: TenantRouteSpec, model: TenantModelSpec) -> str | None:
    if not SERVED_NAME.fullmatch(model.served_name):
        return "not a served model name (letters, digits and . _ / -, at most 200, a letter or digit first)"
    for value in (model.service, model.deployment_name):
        if len(value) > DNS1123_LABEL_MAX or not DNS1123_LABEL.fullmatch(value):
            return f"{value!r} is not a DNS-1123 label"
    if model.deployment_id < 1 or not 1 <= model.port <= 65535:
        return "deployment id and port must be positive (a port at most 65535)"
    for limit in (model.tokens_per_minute, model.requests_per_minute):
        if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= 2**31 - 1:
            return "a per-minute limit is a whole number from 0 (none) to 2147483647"
    if _pooled(spec, model):
        return _pool_problem(spec, model.deployment_name, model.pool)  # type: ignore[arg-type]
    return None


def _pool_problem(spec: TenantRouteSpec, name: str, pool: ModelPoolSpec) -> str | None:
    suffix = spec.endpoint_picker.service_suffix if spec.endpoint_picker else ""
    if len(name + suffix) > DNS1123_LABEL_MAX or not DNS1123_LABEL.fullmatch(name + suffix):
        return f"its endpoint picker's Service {name + suffix!r} is not a DNS-1123 label"
    if not pool.selector or not 1 <= pool.target_port <= 65535:
        return "its pool needs pod labels and a port from 1 to 65535"
    for key, value in pool.selector:
        prefix, _, key_name = key.rpartition("/")
        bad_prefix = prefix and (len(prefix) > 253 or not all(DNS1123_LABEL.fullmatch(p) for p in prefix.split(".")))
        if bad_prefix or len(key_name) > 63 or not QUALIFIED_NAME.fullmatch(key_name):
            return f"pod label key {key!r} is not a qualified name"
        if len(value) > LABEL_VALUE_MAX or not LABEL_VALUE.fullmatch(value):
            return f"pod label value {value!r} is not a label value"
    return None


def _check(spec: TenantRouteSpec) -> None:
    said = _problem(spec)
    if said:
        raise RenderError(f"Tenant endpoint of {spec.tenant_slug!r}: {said}.")
