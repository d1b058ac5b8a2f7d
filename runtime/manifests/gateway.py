"""Endpoint access on the cluster: a deployment's HTTPRoute on the platform Gateway, the Kuadrant
policies on it (API keys, token and request limits) and the API-key Secrets. Pure: no ORM, no I/O.

The pattern is Kuadrant's own: an `AuthPolicy` targeting the route authenticates with Authorino's
API-key identity, which accepts any Secret that carries the selector's labels and lives in the
namespace of the AuthConfig Kuadrant generates — Kuadrant's namespace (`key_namespace`), so a
tenant who can write Secrets in its own namespace cannot mint itself a key. Each Secret holds the
key under `api_key`, carries `authorino.kuadrant.io/managed-by: authorino` (Authorino's default
secret label selector) and names its holder in `secret.kuadrant.io/user-id`.

A deployment accepts two kinds of key: those scoped to it (label `llm-portal.io/deployment-id`)
and those scoped to its whole tenant (`llm-portal.io/key-scope: tenant`): two API-key identities,
either of which authenticates. Every name and label value here comes from validated slugs and
integer ids, never from what a user typed as a key's name.

The tenant's limits count per key, on each endpoint (docs/install.md, step 8 "Endpoint access").
Per key because a limit without `counters` is one counter for every key on the route (Limitador
keys a counter by the limit and the values of its `counters`), so one busy client would starve
the tenant's others. On each endpoint because Kuadrant counts every limit per HTTPRoute, whatever
the policy targets: the Limitador namespace (the rate-limit domain) is the route
(Kuadrant/kuadrant-operator v1.5.2, internal/controller/ratelimit_workflow_helpers.go,
LimitsNamespaceFromRoute, used by limitador_limits_reconciler.go and the wasm action scope), so no
policy, not even one on the Gateway, can count a tenant's endpoints together.

The counter is the key's id, which the limit policies can only see because the AuthPolicy hands it
over: Kuadrant passes on to rate limiting what `response.success.filters` publish, as
`auth.<filter>.<property>`, and Authorino's API-key identity is the key's Secret, whose user-id
annotation names the key (kuadrant-operator v1.5.2, doc/overviews/token-rate-limiting.md,
"Integration with AuthPolicy", the same selector and `counters: [{expression: auth.identity.userid}]`).

A TokenRateLimitPolicy checks a request with 0 hits, then adds the response's `usage.total_tokens`
(ratelimit_workflow_helpers.go, wasmActionSpecsFromTokenLimit: `responseBodyJSON("/usage/total_tokens")`):
a key is refused once its minute's count has reached the limit, and the response that crosses it
is served in full. A streamed response carries usage only when the client asks for it with
`stream_options: {"include_usage": true}` (doc/overviews/token-rate-limiting.md, "Important";
the wasm-shim v0.14.1 that v1.5.2 ships reads it from the stream's last event before `[DONE]`:
src/kuadrant/pipeline/tasks/token_usage.rs, SseStrategy); without it Kuadrant cannot count the
stream's tokens (doc/user-guides/tokenratelimitpolicy/authenticated-token-ratelimiting-tutorial.md).
Nothing here refuses such a request: Kuadrant documents no way to, and a `when` on the request
body (wasm-shim's `requestBodyJSON`) could only answer with a limit's 429 while making the gateway
buffer every body. The requests-per-minute limit bounds them; the endpoint's snippets send the option.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from runtime.manifests.common import LABEL_DEPLOYMENT_ID, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY, deployment_labels
from runtime.spec import DeploymentSpec, GatewaySpec

GATEWAY_GROUP = "gateway.networking.k8s.io"
HTTPROUTE_API_VERSION = f"{GATEWAY_GROUP}/v1"
AUTHPOLICY_API_VERSION = "kuadrant.io/v1"
RATELIMITPOLICY_API_VERSION = "kuadrant.io/v1"
TOKENRATELIMITPOLICY_API_VERSION = "kuadrant.io/v1alpha1"

LABEL_KEY_SCOPE = "llm-portal.io/key-scope"  # "deployment" | "tenant"
LABEL_KEY_ID = "llm-portal.io/key-id"
LABEL_AUTHORINO = "authorino.kuadrant.io/managed-by"
ANNOTATION_USER_ID = "secret.kuadrant.io/user-id"
SECRET_KEY_FIELD = "api_key"
SCOPE_DEPLOYMENT = "deployment"
SCOPE_TENANT = "tenant"

# What the AuthPolicy publishes for the limit policies (`auth.identity.key_id`): the key's id from
# its Secret's user-id annotation ("key-12", or "portal-try-7" for a deployment's Try-it key).
IDENTITY_FILTER = "identity"
IDENTITY_KEY_ID = "key_id"
KEY_COUNTER = f"auth.{IDENTITY_FILTER}.{IDENTITY_KEY_ID}"
TOKENS_LIMIT = "tokens-per-key"
REQUESTS_LIMIT = "requests-per-key"
# Where the tenant sets no limit, each route still carries both limit policies, counted per key
# with a ceiling no minute reaches: Limitador only sees (and counts, per key, for the usage page)
# requests some limit applies to (runtime.manifests.telemetry). Kuadrant's `limit` is an int64.
TOKENS_METERED = "tokens-metered"
REQUESTS_METERED = "requests-metered"
METER_CEILING = 10**15


def route_prefix(spec: DeploymentSpec) -> str:
    """The deployment's path on the Gateway: one per tenant and deployment, predictable."""
    return f"/{spec.tenant_slug}/{spec.name}"


def public_endpoint(gateway: GatewaySpec, spec: DeploymentSpec) -> str:
    """The OpenAI base URL users call: the public URL, the route's prefix, then /v1."""
    return f"{gateway.public_url.rstrip('/')}{route_prefix(spec)}/v1"


def backend_service(spec: DeploymentSpec) -> tuple[str, int]:
    """(Service name, port) the route sends traffic to: the backend's own answer (its registry
    entry's `route`), e.g. KubeRay's serve Service or KServe's predictor Service."""
    from runtime.backends import traits

    route = traits(spec.backend).route
    if route is None:
        raise ValueError(f"backend {spec.backend!r} is not routed through the Gateway")
    return route(spec)


def _metadata(spec: DeploymentSpec) -> dict[str, Any]:
    return {"name": spec.name, "namespace": spec.namespace, "labels": deployment_labels(spec)}


def route_hostnames(gateway: GatewaySpec) -> list[str]:
    """The public URL's host when it is a DNS name (the Gateway API takes no IP addresses)."""
    host = urlsplit(gateway.public_url).hostname or ""
    if not host or host.replace(".", "").isdigit() or ":" in host or "." not in host:
        return []
    return [host]


def parent_ref(gateway: GatewaySpec) -> dict[str, str]:
    """The platform Gateway as an HTTPRoute's parent (in its own namespace)."""
    return {
        "group": GATEWAY_GROUP,
        "kind": "Gateway",
        "name": gateway.gateway_name,
        "namespace": gateway.gateway_namespace,
    }


def render_httproute(spec: DeploymentSpec, gateway: GatewaySpec, *, routed: bool = True) -> dict[str, Any]:
    """The HTTPRoute: `<prefix>/...` on the platform Gateway, rewritten to `/...` for the engine.

    `routed=False` renders it parked: the same parent, hostnames and match (the same route rule
    for Kuadrant, which enforces an AuthPolicy only on a route that exists and its Gateway
    accepted), but no filter and no backend, so nothing it matches reaches the engine (Gateway
    API HTTPRouteRule.backendRefs: with no valid backend and no filter, every matching request
    gets a 500). The exposure keeps it so until Kuadrant enforces the AuthPolicy
    (runtime.backends.exposure).
    """
    service, port = backend_service(spec)
    rule: dict[str, Any] = {"matches": [{"path": {"type": "PathPrefix", "value": route_prefix(spec)}}]}
    if routed:
        rule["filters"] = [
            {"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}
        ]
        rule["backendRefs"] = [{"group": "", "kind": "Service", "name": service, "port": port}]
    route: dict[str, Any] = {"parentRefs": [parent_ref(gateway)], "rules": [rule]}
    hostnames = route_hostnames(gateway)
    if hostnames:
        route["hostnames"] = hostnames
    return {"apiVersion": HTTPROUTE_API_VERSION, "kind": "HTTPRoute", "metadata": _metadata(spec), "spec": route}


def _target(spec: DeploymentSpec) -> dict[str, str]:
    return {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": spec.name}


def key_selector(tenant_slug: str, deployment_id: int | None) -> dict[str, str]:
    """The labels of the keys a deployment accepts (deployment-scoped when an id is given)."""
    labels = {LABEL_AUTHORINO: "authorino", LABEL_MANAGED_BY: MANAGED_BY, LABEL_TENANT: tenant_slug}
    if deployment_id is None:
        labels[LABEL_KEY_SCOPE] = SCOPE_TENANT
    else:
        labels[LABEL_KEY_SCOPE] = SCOPE_DEPLOYMENT
        labels[LABEL_DEPLOYMENT_ID] = str(deployment_id)
    return labels


def _selector_path(*keys: str) -> str:
    """A gjson path into Authorino's authorization JSON; the dots inside a key are escaped."""
    return ".".join(key.replace(".", "\\.") for key in keys)


def render_authpolicy(spec: DeploymentSpec) -> dict[str, Any]:
    """API keys from labelled Secrets: the deployment's own keys, or its tenant's; the key's id
    published for the limit policies' per-key counter (`KEY_COUNTER`)."""
    return {
        "apiVersion": AUTHPOLICY_API_VERSION,
        "kind": "AuthPolicy",
        "metadata": _metadata(spec),
        "spec": {"targetRef": _target(spec), "rules": key_rules(spec.tenant_slug, spec.deployment_id)},
    }


def api_key_identity(selector: dict[str, str]) -> dict[str, Any]:
    """An Authorino API-key identity: the Secrets carrying `selector`'s labels, read from the
    `Authorization: Bearer` header (what OpenAI clients send)."""
    return {
        "apiKey": {"selector": {"matchLabels": selector}},
        "credentials": {"authorizationHeader": {"prefix": "Bearer"}},
    }


def key_rules(tenant_slug: str, deployment_id: int) -> dict[str, Any]:
    """An AuthPolicy's `rules` for one deployment: its own keys or its tenant's, and the key's id
    published for the limit policies' per-key counter (`KEY_COUNTER`)."""
    authentication = {
        name: api_key_identity(key_selector(tenant_slug, scope))
        for name, scope in (("deployment-keys", deployment_id), ("tenant-keys", None))
    }
    return {"authentication": authentication, "response": {"success": {"filters": published_key_id()}}}


def published_key_id() -> dict[str, Any]:
    """`response.success.filters` publishing the key's id (its Secret's user-id annotation)."""
    key_id = {"selector": _selector_path("auth", "identity", "metadata", "annotations", ANNOTATION_USER_ID)}
    return {IDENTITY_FILTER: {"json": {"properties": {IDENTITY_KEY_ID: key_id}}}}


def per_key_limit(per_minute: int) -> dict[str, Any]:
    """One limit counted per key (on this route): `per_minute` for each key's own counter."""
    return {"rates": [{"limit": per_minute, "window": "1m"}], "counters": [{"expression": KEY_COUNTER}]}


def meter(per_minute: int, limit_name: str, metered_name: str) -> dict[str, Any]:
    """The limit a policy carries: the tenant's, per key, or where the tenant sets none the
    per-key meter whose ceiling no minute reaches (it counts, runtime.manifests.telemetry)."""
    if per_minute > 0:
        return {limit_name: per_key_limit(per_minute)}
    return {metered_name: per_key_limit(METER_CEILING)}


def render_tokenratelimitpolicy(spec: DeploymentSpec) -> dict[str, Any]:
    """The tenant's tokens per minute, per key on this route: the responses' `usage.total_tokens`
    (the meter where the policy sets no limit: its reports are the key's tokens)."""
    return {
        "apiVersion": TOKENRATELIMITPOLICY_API_VERSION,
        "kind": "TokenRateLimitPolicy",
        "metadata": _metadata(spec),
        "spec": {"targetRef": _target(spec), "limits": meter(spec.tokens_per_minute, TOKENS_LIMIT, TOKENS_METERED)},
    }


def render_ratelimitpolicy(spec: DeploymentSpec) -> dict[str, Any]:
    """The tenant's requests per minute, per key on this route: the bound where tokens are not
    counted (a stream without usage) or not yet (requests in flight); the meter where the policy
    sets no limit (its checks are the key's requests)."""
    return {
        "apiVersion": RATELIMITPOLICY_API_VERSION,
        "kind": "RateLimitPolicy",
        "metadata": _metadata(spec),
        "spec": {
            "targetRef": _target(spec),
            "limits": meter(spec.requests_per_minute, REQUESTS_LIMIT, REQUESTS_METERED),
        },
    }


def policy_objects(spec: DeploymentSpec) -> list[dict[str, Any]]:
    """The Kuadrant policies on `spec`'s route: the AuthPolicy first, then the limits it sets."""
    return [render_authpolicy(spec), render_tokenratelimitpolicy(spec), render_ratelimitpolicy(spec)]


def exposure_objects(spec: DeploymentSpec, gateway: GatewaySpec) -> list[dict[str, Any]]:
    """Every object that exposes `spec` on the Gateway, in apply order: the policies before the
    route, so the route never exists without the policy that guards it."""
    return [*policy_objects(spec), render_httproute(spec, gateway)]


def key_secret_name(key_id: int) -> str:
    return f"llm-portal-key-{key_id}"


def portal_key_secret_name(deployment_id: int) -> str:
    return f"llm-portal-try-{deployment_id}"


def render_key_secret(
    *, name: str, namespace: str, tenant_slug: str, deployment_id: int | None, api_key: str, user_id: str
) -> dict[str, Any]:
    """One API key as Authorino reads it: `api_key`, the selector's labels, the holder's id."""
    labels = key_selector(tenant_slug, deployment_id)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {ANNOTATION_USER_ID: user_id},
        },
        "type": "Opaque",
        "stringData": {SECRET_KEY_FIELD: api_key},
    }
