"""Readiness of endpoint access (with a Gateway configured): Kuadrant's policy APIs are served,
an AuthPolicy on the Gateway denies what no route policy covers, and Kuadrant enforces each
deployment's AuthPolicy.

Without Kuadrant nothing is exposed: the portal applies each route parked (no backend) until
Kuadrant enforces its AuthPolicy (runtime.backends.exposure), so a missing Kuadrant is red (no
endpoint works) rather than open. The conditions read are Kuadrant's (runtime.kuadrant).
"""

from __future__ import annotations

from typing import Any

from runtime import k8s
from runtime.kuadrant import accepted, enforcement
from runtime.manifests.common import LABEL_MANAGED_BY, MANAGED_BY
from runtime.manifests.telemetry import LABELS
from runtime.readiness_base import AMBER, GREEN, RED, Check, ReadinessConfig, cannot_read, denied

KUADRANT_GROUP = "kuadrant.io"
# The kinds the portal applies, at the versions runtime.k8s.kinds uses; without AuthPolicy no
# deployment is exposed, without a limit kind only those of tenants that set that limit.
POLICY_APIS = (
    ("v1", "authpolicies", RED),
    ("v1", "ratelimitpolicies", AMBER),
    ("v1alpha1", "tokenratelimitpolicies", AMBER),
)
INSTALL = (
    "Install Kuadrant (kuadrant-operator) with its CRDs: AuthPolicy and RateLimitPolicy kuadrant.io/v1, "
    "TokenRateLimitPolicy kuadrant.io/v1alpha1."
)
DENY_ALL = "deploy/k8s/gateway/deny-all-authpolicy.yaml"
TELEMETRY = "deploy/k8s/gateway/telemetrypolicy.yaml"
SHOWN = 5  # policies named in a detail


def check_kuadrant(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    if config.gateway is None:
        return []
    api = check_policy_apis(cluster)
    if api.status == RED:
        return [api]
    return [
        api,
        check_gateway_policy(cluster, config.gateway),
        check_deployment_policies(cluster),
        check_limit_policies(cluster),
        check_usage_labels(cluster, config.gateway),
    ]


def check_policy_apis(cluster: k8s.Cluster) -> Check:
    key, title = "kuadrant:api", f"Kuadrant policy APIs ({KUADRANT_GROUP})"
    served = cluster.api_groups().get(KUADRANT_GROUP)
    if served is None:
        detail = (
            f"Kuadrant is not installed ({KUADRANT_GROUP} is not served): no deployment is exposed; each route "
            "stays parked and its endpoint hidden until Kuadrant enforces its AuthPolicy."
        )
        return Check(key, title, RED, detail, INSTALL)
    resources = {version: cluster.api_resources(KUADRANT_GROUP, version) for version in {v for v, _, _ in POLICY_APIS}}
    missing = [
        (f"{plural} ({version})", bad) for version, plural, bad in POLICY_APIS if plural not in resources[version]
    ]
    if not missing:
        return Check(key, title, GREEN, f"Served: {', '.join(served)}.")
    status = RED if RED in {bad for _, bad in missing} else AMBER
    names = ", ".join(name for name, _ in missing)
    detail = f"{KUADRANT_GROUP} lacks {names}: deployments that need them stay parked (not exposed)."
    return Check(key, title, status, detail, INSTALL)


def _targets_gateway(policy: dict[str, Any], name: str) -> bool:
    ref = (policy.get("spec") or {}).get("targetRef") or {}
    return ref.get("kind") == "Gateway" and ref.get("name") == name


def check_gateway_policy(cluster: k8s.Cluster, gateway: tuple[str, str]) -> Check:
    """An AuthPolicy on the Gateway itself, Accepted: any route without its own is denied. (Kuadrant
    reports it Enforced only while some route relies on it, so Accepted is what is checked.)"""
    namespace, name = gateway
    key, title = "kuadrant:gateway", f"Deny-all AuthPolicy on Gateway {namespace}/{name}"
    try:
        policies = [p for p in cluster.list(k8s.AUTHPOLICY, namespace) if _targets_gateway(p, name)]
    except k8s.PermanentClusterError as error:
        if not denied(error):
            raise
        return cannot_read(key, title, error)
    fix = f"Apply {DENY_ALL} (kubectl apply -k deploy/k8s/gateway) with the Gateway's name and namespace."
    if not policies:
        detail = "No AuthPolicy targets the Gateway: a route attached to it without an AuthPolicy of its own is open."
        return Check(key, title, AMBER, detail, fix)
    verdicts = [(p["metadata"]["name"], *accepted(p)) for p in policies]
    good = [policy for policy, ok, _ in verdicts if ok]
    if good:
        return Check(
            key, title, GREEN, f"AuthPolicy {', '.join(good)} is accepted: routes without their own are denied."
        )
    said = "; ".join(f"{policy}: {why}" for policy, _, why in verdicts)
    status = RED if any(ok is False for _, ok, _ in verdicts) else AMBER
    return Check(key, title, status, f"Not accepted by Kuadrant ({said}).", fix)


def check_deployment_policies(cluster: k8s.Cluster) -> Check:
    """Each deployment's AuthPolicy is enforced (until it is, its route is parked)."""
    key, title = "kuadrant:deployments", "Deployments' AuthPolicies enforced"
    try:
        policies = cluster.list(k8s.AUTHPOLICY, None, label_selector={LABEL_MANAGED_BY: MANAGED_BY})
    except k8s.PermanentClusterError as error:
        if not denied(error):
            raise
        return cannot_read(key, title, error)
    verdicts = [(p["metadata"], *enforcement(p)) for p in policies]
    pending = [f"{meta.get('namespace')}/{meta['name']} ({why})" for meta, enforced, why in verdicts if not enforced]
    if not pending:
        return Check(key, title, GREEN, f"{len(policies)} enforced." if policies else "No deployment is exposed yet.")
    shown = "; ".join(pending[:SHOWN]) + (f"; and {len(pending) - SHOWN} more" if len(pending) > SHOWN else "")
    detail = f"{len(pending)} of {len(policies)} not enforced: their routes stay parked and endpoints hidden: {shown}."
    fix = "Check Kuadrant's and Authorino's pods and the Gateway; `kubectl describe authpolicy` says why."
    return Check(key, title, AMBER, detail, fix)


LIMIT_KINDS = (k8s.TOKENRATELIMITPOLICY, k8s.RATELIMITPOLICY)


def check_limit_policies(cluster: k8s.Cluster) -> Check:
    """Each tenant limit the portal applied (TokenRateLimitPolicy, RateLimitPolicy) is enforced.
    The route does not wait for these (the key check is what keeps an endpoint closed), so a limit
    Kuadrant does not enforce is an endpoint serving without the limit its form promised: amber,
    named. A limit kind the cluster does not serve is already said by check_policy_apis."""
    key, title = "kuadrant:limits", "Deployments' token and request limits enforced"
    served = set(cluster.api_resources(KUADRANT_GROUP, "v1")) | set(cluster.api_resources(KUADRANT_GROUP, "v1alpha1"))
    policies = []
    for kind in LIMIT_KINDS:
        if kind.plural not in served:
            continue
        try:
            found = cluster.list(kind, None, label_selector={LABEL_MANAGED_BY: MANAGED_BY})
        except k8s.PermanentClusterError as error:
            if not denied(error):
                raise
            return cannot_read(key, title, error)
        policies += [(kind.kind, p) for p in found]
    verdicts = [(kind, p["metadata"], *enforcement(p)) for kind, p in policies]
    pending = [
        f"{kind} {meta.get('namespace')}/{meta['name']} ({why})"
        for kind, meta, enforced, why in verdicts
        if not enforced
    ]
    if not pending:
        return Check(key, title, GREEN, f"{len(policies)} enforced." if policies else "No limit is set yet.")
    shown = "; ".join(pending[:SHOWN]) + (f"; and {len(pending) - SHOWN} more" if len(pending) > SHOWN else "")
    detail = f"{len(pending)} of {len(policies)} not enforced: those endpoints serve without their limits: {shown}."
    fix = "Check Kuadrant's Limitador and the Gateway; `kubectl describe tokenratelimitpolicy` says why."
    return Check(key, title, AMBER, detail, fix)


def check_usage_labels(cluster: k8s.Cluster, gateway: tuple[str, str]) -> Check:
    """The portal's TelemetryPolicy on the Gateway, accepted: without it Limitador's counters carry
    no key, and the usage per key on the cluster stays empty (access.gateway_usage). Amber: the
    endpoints work without it."""
    namespace, name = gateway
    key, title = "kuadrant:usage", f"Usage per key: TelemetryPolicy on Gateway {namespace}/{name}"
    kind = k8s.TELEMETRYPOLICY
    fix = f"Apply {TELEMETRY} (kubectl apply -k deploy/k8s/gateway) with the Gateway's name and namespace."
    if kind.plural not in cluster.api_resources(kind.group, kind.version):
        detail = (
            f"Kuadrant's TelemetryPolicy ({kind.group}/{kind.version}) is not served: Limitador's counters "
            "carry no key, so the usage per key stays empty on the cluster."
        )
        return Check(key, title, AMBER, detail, "Install a Kuadrant with its extensions (1.3 or later), then " + fix)
    try:
        found = [p for p in cluster.list(kind, namespace) if _targets_gateway(p, name)]
    except k8s.PermanentClusterError as error:
        if not denied(error):
            raise
        return cannot_read(key, title, error)
    ours = [p for p in found if ((p.get("spec") or {}).get("metrics") or {}).get("default", {}).get("labels") == LABELS]
    if not ours:
        detail = "No TelemetryPolicy on the Gateway sets the portal's labels: the usage per key stays empty."
        return Check(key, title, AMBER, detail, fix)
    verdicts = [(p["metadata"]["name"], *accepted(p)) for p in ours]
    good = [policy for policy, ok, _ in verdicts if ok]
    if good:
        return Check(key, title, GREEN, f"TelemetryPolicy {', '.join(good)} is accepted: counters carry the key.")
    said = "; ".join(f"{policy}: {why}" for policy, _, why in verdicts)
    return Check(key, title, AMBER, f"Not accepted by Kuadrant ({said}).", fix)
