"""Usage per API key on the cluster (issue 34): the Kuadrant TelemetryPolicy that labels
Limitador's counters with the key and the model, and the facts the portal reads them back by
(access.gateway_usage). Pure: no ORM, no I/O.

What Limitador counts (Kuadrant/limitador 2981b2bd, limitador-server/src/prometheus_metrics.rs and
envoy_rls/): per rate-limit call, labelled `limitador_namespace` (the HTTPRoute,
`<namespace>/<name>`: runtime.manifests.gateway) plus its "default labels":

- a RateLimitPolicy's check is Envoy's `ShouldRateLimit` (envoy_rls/server.rs): when let through
  it adds 1 to `authorized_calls` and the request's hits (1) to `authorized_hits`;
- a TokenRateLimitPolicy's check is Kuadrant's `CheckRateLimit` (envoy_rls/kuadrant_service.rs):
  `authorized_calls` + 1 only; its `Report`, once the response is served, adds the response's
  `usage.total_tokens` to `authorized_hits`;
- a check that refuses adds 1 to `limited_calls` (429 to the client).

The labels come from a TelemetryPolicy: each label is a CEL expression the wasm-shim evaluates
per request and sends as the second descriptor, which Kuadrant's Limitador turns into labels
(kuadrant-operator ae698811: cmd/extensions/telemetry-policy, the `metrics.labels.<name>`
bindings of pkg/extension/types/types.go, and internal/controller/limitador_reconciler.go,
`MetricLabelsDefault: "descriptors[1]"`). A label whose expression does not resolve is left out
(doc/overviews/telemetrypolicy.md), and the response body is not there when a check runs, so
`SERVED_LABEL` (`responseBodyJSON("/model")`, as OpenShift AI's MaaS labels its token metrics)
is set on a TokenRateLimitPolicy's report only. That tells the two kinds of hit apart:

- hits WITH `SERVED_LABEL`: tokens (`usage.total_tokens`, no input/output split);
- hits WITHOUT it: requests let through (the RateLimitPolicy's 1 per request);
- `limited_calls`: requests refused.

So every route the portal renders carries both policies, with a ceiling no minute reaches where
the tenant sets no limit (gateway.METER_CEILING): a route without a RateLimitPolicy would report
no requests, one without a TokenRateLimitPolicy no tokens.

The policy's CRD takes only a Gateway as its target (CEL rule `self.kind == 'Gateway'`), so there
is one, in the Gateway's namespace, installed with the platform (deploy/k8s/gateway, checked
against this render by tests/runtime/test_telemetry_manifest.py). The label names carry the
portal's prefix so another TelemetryPolicy's labels on the same Gateway cannot collide.
"""

from __future__ import annotations

import re
from typing import Any

from runtime.manifests.common import LABEL_MANAGED_BY, MANAGED_BY
from runtime.manifests.gateway import GATEWAY_GROUP, KEY_COUNTER
from runtime.manifests.tenant_route import MODEL_HEADER
from runtime.spec import GatewaySpec

TELEMETRYPOLICY_API_VERSION = "extensions.kuadrant.io/v1alpha1"
TELEMETRYPOLICY_NAME = "llm-portal-usage"

KEY_LABEL = "llm_portal_key"  # "key-12", or "portal-try-7" (runtime.manifests.gateway.published_key_id)
MODEL_LABEL = "llm_portal_model"  # the request's model, as the body-based router set the header
SERVED_LABEL = "llm_portal_served"  # the response's model: present on token reports only
NAMESPACE_LABEL = "limitador_namespace"  # Limitador's own: "<route namespace>/<route name>"

HITS = ("authorized_hits", "authorized_hits_total")  # the exporter's name, with or without `_total`
LIMITED = ("limited_calls", "limited_calls_total")

# Envoy hands request headers to the wasm-shim with lower-case names (HTTP/2 and Envoy's own
# normalisation); Kuadrant's well-known attribute `request.headers` is that map.
LABELS = {
    KEY_LABEL: KEY_COUNTER,
    MODEL_LABEL: f"request.headers['{MODEL_HEADER.lower()}']",
    SERVED_LABEL: 'responseBodyJSON("/model")',
}

PROMETHEUS_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def render_telemetrypolicy(gateway: GatewaySpec) -> dict[str, Any]:
    """The TelemetryPolicy on the platform Gateway that labels Limitador's counters per key."""
    return {
        "apiVersion": TELEMETRYPOLICY_API_VERSION,
        "kind": "TelemetryPolicy",
        "metadata": {
            "name": TELEMETRYPOLICY_NAME,
            "namespace": gateway.gateway_namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
        },
        "spec": {
            "targetRef": {"group": GATEWAY_GROUP, "kind": "Gateway", "name": gateway.gateway_name},
            "metrics": {"default": {"labels": dict(LABELS)}},
        },
    }


def series_selector() -> str:
    """PromQL for every series the portal counts: hits and refusals that carry a key."""
    names = "|".join(HITS + LIMITED)
    return f'{{__name__=~"{names}",{KEY_LABEL}!=""}}'
