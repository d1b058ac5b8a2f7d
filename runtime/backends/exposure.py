"""Exposure on the cluster: the kuberay and kserve backends' route, policies and Try-it key.

Fail closed: no moment in which the Gateway routes to the engine without Kuadrant checking a key.

1. The Kuadrant policies are applied first: the AuthPolicy, then the limits the tenant sets.
2. The HTTPRoute is applied *parked* (runtime.manifests.gateway.render_httproute, `routed=False`:
   its match, no backend). It cannot simply wait, because Kuadrant enforces an AuthPolicy only on
   a route that exists and its Gateway accepted (an AuthPolicy whose route is missing is not
   Accepted, reason TargetNotFound: runtime.kuadrant); parked, it exists for Kuadrant while no
   request reaches the engine.
3. Only once Kuadrant reports the AuthPolicy Accepted and Enforced for its current generation is
   the route applied with its backend; only then is the public URL shown (`external_endpoint`).

A policy that cannot be applied (Kuadrant's CRDs are missing) or is no longer enforced when the
exposure is next applied parks the route again. The verdict is stamped on the workload object
(ANNOTATION_EXPOSURE: the exposure's hash once enforced, else why not), so observing it costs no
call, and an exposure still pending differs from what is wanted (`stale`): the sweep and the next
reconcile see drift and try again. Routes the portal does not make are covered by the Gateway's
deny-all AuthPolicy (deploy/k8s/gateway/deny-all-authpolicy.yaml).

These objects belong to the deployment's object set: they are applied when its main object is
created or changed (their hash is folded into the main object's spec hash, so an unchanged
deployment costs no extra read, and the sweep notices a changed tenant limit as drift), and
deleted when it is removed. With no Gateway configured nothing is rendered and nothing is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime import k8s
from runtime.keys import portal_key
from runtime.kuadrant import enforcement
from runtime.manifests.common import ANNOTATION_EXPOSURE
from runtime.manifests.gateway import (
    exposure_objects,
    policy_objects,
    portal_key_secret_name,
    public_endpoint,
    render_httproute,
    render_key_secret,
)
from runtime.spec import DeploymentSpec, GatewaySpec
from runtime.status import cond

# Deleted in this order: the route before the policies that guard it.
EXPOSURE_KINDS = (k8s.HTTPROUTE, k8s.AUTHPOLICY, k8s.TOKENRATELIMITPOLICY, k8s.RATELIMITPOLICY)
PARKED = "The route is parked: no request reaches the engine, and the endpoint is not shown."
WAITING = "AuthPolicyNotEnforced"  # the reason while Kuadrant has not enforced the policy yet


@dataclass(frozen=True)
class Exposure:
    """Whether a deployment is exposed on the Gateway, and why (the Exposed condition)."""

    exposed: bool
    reason: str  # CamelCase
    message: str

    def condition(self) -> dict[str, Any]:
        return cond("Exposed", self.exposed, self.reason, self.message)


def exposure_digest(spec: DeploymentSpec, gateway: GatewaySpec | None) -> str:
    """A hash of what exposes `spec` ("" when nothing is exposed)."""
    if gateway is None:
        return ""
    from runtime.backends.base import digest

    return digest([o["spec"] for o in exposure_objects(spec, gateway)])


def expose(cluster: k8s.Cluster, spec: DeploymentSpec, gateway: GatewaySpec | None, seed: str) -> Exposure | None:
    """Apply the policies, then the route (parked unless Kuadrant enforces the AuthPolicy), and
    write the Try-it key's Secret; the verdict (None without a Gateway). Idempotent."""
    if gateway is None:
        return None
    verdict = _apply_policies(cluster, spec)
    if verdict is None:
        where = f"AuthPolicy {spec.namespace}/{spec.name}"
        enforced, said = enforcement(cluster.get(k8s.AUTHPOLICY, spec.name, spec.namespace))
        if enforced:
            verdict = Exposure(True, "AuthPolicyEnforced", f"Kuadrant enforces {where}: {said}.")
        else:
            verdict = Exposure(False, WAITING, f"Waiting for Kuadrant to enforce {where}: {said}. {PARKED}")
    try:
        cluster.apply(render_httproute(spec, gateway, routed=verdict.exposed))
    except k8s.NotFound as error:  # the Gateway API is not served (or the namespace is missing)
        verdict = Exposure(False, "RouteNotApplied", f"The HTTPRoute could not be applied: {error}.")
    cluster.apply(portal_key_secret(spec, gateway, seed))
    return verdict


def _apply_policies(cluster: k8s.Cluster, spec: DeploymentSpec) -> Exposure | None:
    """Apply the policies and delete the limit policies the tenant no longer sets; None when all
    were applied, else why not (Kuadrant's API not served: its CRDs are not installed)."""
    wanted = policy_objects(spec)
    for obj in wanted:
        try:
            cluster.apply(obj)
        except k8s.NotFound as error:
            said = f"{obj['kind']} could not be applied ({error}): is Kuadrant installed? {PARKED}"
            return Exposure(False, "PolicyNotApplied", said)
    present = {k8s.kind_of(obj) for obj in wanted}
    for kind in EXPOSURE_KINDS[1:]:
        if kind not in present:
            cluster.delete(kind, spec.name, spec.namespace)
    return None


def record_exposure(
    obj: dict[str, Any], spec: DeploymentSpec, gateway: GatewaySpec | None, verdict: Exposure | None
) -> None:
    """Stamp `verdict` on the workload object `obj`; without one, what is wanted: exposed."""
    wanted = exposure_digest(spec, gateway)
    if wanted:
        said = wanted if verdict is None or verdict.exposed else f"{verdict.reason}: {verdict.message}"
        obj["metadata"].setdefault("annotations", {})[ANNOTATION_EXPOSURE] = said


def exposure_of(obj: dict[str, Any], spec: DeploymentSpec, gateway: GatewaySpec | None) -> Exposure | None:
    """The verdict stamped on a workload object read from the cluster (None without a Gateway):
    exposed only when it names the exposure of this very spec."""
    if gateway is None:
        return None
    said = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_EXPOSURE) or ""
    if said == exposure_digest(spec, gateway):
        return Exposure(True, "AuthPolicyEnforced", "Kuadrant enforces the AuthPolicy: the route takes keyed requests.")
    reason, _, message = said.partition(": ")
    if not message:
        return Exposure(False, "ExposurePending", f"This spec's exposure has not been applied yet. {PARKED}")
    return Exposure(False, reason, message)


def external_endpoint(
    spec: DeploymentSpec, gateway: GatewaySpec | None, internal: str | None, obj: dict[str, Any]
) -> str | None:
    """The URL users call: the Gateway's once the engine has an endpoint and Kuadrant enforces
    its AuthPolicy ("" until then: no URL, not an unknown one), else the internal one."""
    if gateway is None or internal is None:
        return internal
    verdict = exposure_of(obj, spec, gateway)
    return public_endpoint(gateway, spec) if verdict is not None and verdict.exposed else ""


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
