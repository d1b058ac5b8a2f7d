"""Readiness of endpoint access (runtime/readiness/gateway.py) on the API test server, with a
Gateway configured: Kuadrant's policy APIs, the Gateway's deny-all AuthPolicy (the one in
deploy/k8s/gateway) and whether Kuadrant (simulated: tests.support.kuadrant) enforces each
deployment's AuthPolicy."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from portal.readiness import cluster_readiness
from runtime import k8s
from runtime.manifests.common import LABEL_MANAGED_BY, MANAGED_BY
from tests.portal.test_readiness import by_key, healthy, not_green, prometheus  # noqa: F401 (fixtures)
from tests.support.kuadrant import policy_status

DENY_ALL = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "gateway" / "deny-all-authpolicy.yaml"
TELEMETRY = DENY_ALL.with_name("telemetrypolicy.yaml")
KUADRANT_KINDS = (k8s.AUTHPOLICY, k8s.RATELIMITPOLICY, k8s.TOKENRATELIMITPOLICY)


def deployment_policy(api, namespace: str, name: str) -> None:
    labels = {LABEL_MANAGED_BY: MANAGED_BY}
    api.put(k8s.AUTHPOLICY, {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {}})


@pytest.fixture
def exposing_without_usage(healthy, settings):  # noqa: F811
    """The healthy cluster, deployments exposed on its Gateway, the deny-all installed."""
    settings.GATEWAY_PUBLIC_URL = "https://llm.example.com"
    healthy.declare("gateway.networking.k8s.io/v1/gateways", "Gateway")
    (deny_all,) = [doc for doc in yaml.safe_load_all(DENY_ALL.read_text()) if doc]
    healthy.put(k8s.AUTHPOLICY, deny_all)
    # Every route has its own policy, so Kuadrant reports the Gateway's Accepted, not Enforced.
    policy_status(healthy, "gateway-system", "llm-gateway-deny-all", enforced=False)
    deployment_policy(healthy, "alpha", "chat")
    policy_status(healthy, "alpha", "chat")
    return healthy


@pytest.fixture
def exposing(exposing_without_usage):
    """The same, with the usage-per-key TelemetryPolicy installed and accepted."""
    exposing_without_usage.put(k8s.TELEMETRYPOLICY, yaml.safe_load(TELEMETRY.read_text()))
    policy_status(exposing_without_usage, "gateway-system", "llm-portal-usage", kind=k8s.TELEMETRYPOLICY)
    return exposing_without_usage


def test_with_kuadrant_and_the_deny_all_the_gateway_checks_are_green(exposing):
    checks = by_key()
    assert not_green(checks) == {}
    assert {
        "api:gateway.networking.k8s.io",
        "kuadrant:api",
        "kuadrant:gateway",
        "kuadrant:deployments",
        "kuadrant:usage",
    } <= set(checks)
    assert checks["kuadrant:deployments"]["detail"] == "1 enforced."
    assert checks["kuadrant:usage"]["detail"] == "TelemetryPolicy llm-portal-usage is accepted: counters carry the key."


def test_without_the_usage_labels_the_usage_check_is_amber_and_says_what_to_apply(exposing):
    exposing.delete_object(k8s.TELEMETRYPOLICY, "llm-portal-usage", "gateway-system")
    other = yaml.safe_load(TELEMETRY.read_text())
    other["metadata"]["name"] = "someone-elses"
    other["spec"]["metrics"]["default"]["labels"] = {"user": "auth.identity.userid"}  # not the portal's labels
    exposing.put(k8s.TELEMETRYPOLICY, other)
    checks = by_key()
    assert not_green(checks) == {"kuadrant:usage": "amber"}
    assert "usage per key stays empty" in checks["kuadrant:usage"]["detail"]
    assert "deploy/k8s/gateway/telemetrypolicy.yaml" in checks["kuadrant:usage"]["fix"]


def test_a_usage_policy_kuadrant_refused_is_amber_with_its_reason(exposing):
    policy_status(exposing, "gateway-system", "llm-portal-usage", kind=k8s.TELEMETRYPOLICY, accepted=False)
    checks = by_key()
    assert not_green(checks) == {"kuadrant:usage": "amber"}
    assert checks["kuadrant:usage"]["detail"].startswith(
        "Not accepted by Kuadrant (llm-portal-usage: Accepted is False"
    )


def test_without_the_telemetry_extension_the_usage_check_is_amber(exposing_without_usage):
    exposing_without_usage.undeclare(k8s.TELEMETRYPOLICY)
    checks = by_key()
    assert not_green(checks) == {"kuadrant:usage": "amber"}
    assert "is not served" in checks["kuadrant:usage"]["detail"]


def test_without_kuadrant_exposure_is_red_and_says_nothing_is_exposed(healthy, settings):  # noqa: F811
    settings.GATEWAY_PUBLIC_URL = "https://llm.example.com"
    healthy.declare("gateway.networking.k8s.io/v1/gateways", "Gateway")
    for kind in KUADRANT_KINDS:  # Kuadrant's CRDs are not installed
        healthy.undeclare(kind)
    checks = by_key()
    assert not_green(checks) == {"kuadrant:api": "red"}
    assert "no deployment is exposed" in checks["kuadrant:api"]["detail"]
    assert "Install Kuadrant" in checks["kuadrant:api"]["fix"]
    assert cluster_readiness()["summary"] == "red"


def test_a_missing_limit_kind_is_amber(exposing):
    exposing.undeclare(k8s.TOKENRATELIMITPOLICY)
    checks = by_key()
    assert not_green(checks) == {"kuadrant:api": "amber"}
    assert "tokenratelimitpolicies (v1alpha1)" in checks["kuadrant:api"]["detail"]


def test_no_policy_on_the_gateway_is_amber_and_one_not_accepted_is_red(exposing):
    policy_status(exposing, "gateway-system", "llm-gateway-deny-all", accepted=False)
    checks = by_key()
    assert not_green(checks) == {"kuadrant:gateway": "red"}
    assert "TargetNotFound" in checks["kuadrant:gateway"]["detail"]
    exposing.delete_object(k8s.AUTHPOLICY, "llm-gateway-deny-all", "gateway-system")
    checks = by_key()
    assert not_green(checks) == {"kuadrant:gateway": "amber"}
    assert "deploy/k8s/gateway/deny-all-authpolicy.yaml" in checks["kuadrant:gateway"]["fix"]


def test_a_deployment_policy_kuadrant_does_not_enforce_is_amber_and_named(exposing):
    deployment_policy(exposing, "beta", "code")
    policy_status(exposing, "beta", "code", enforced=False)
    checks = by_key()
    assert not_green(checks) == {"kuadrant:deployments": "amber"}
    detail = checks["kuadrant:deployments"]["detail"]
    assert detail.startswith("1 of 2 not enforced") and "beta/code" in detail and "MissingDependency" in detail
    assert cluster_readiness()["summary"] == "amber"


def test_without_a_gateway_nothing_about_kuadrant_is_checked(healthy):  # noqa: F811
    assert not any(key.startswith("kuadrant:") for key in by_key())


def limit_policy(api, kind: k8s.Kind, namespace: str, name: str) -> None:
    labels = {LABEL_MANAGED_BY: MANAGED_BY}
    api.put(kind, {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {}})


def test_limit_policies_kuadrant_enforces_are_green_and_one_it_does_not_is_amber_and_named(exposing):
    limit_policy(exposing, k8s.TOKENRATELIMITPOLICY, "alpha", "chat")
    policy_status(exposing, "alpha", "chat", kind=k8s.TOKENRATELIMITPOLICY)
    limit_policy(exposing, k8s.RATELIMITPOLICY, "alpha", "chat")
    policy_status(exposing, "alpha", "chat", kind=k8s.RATELIMITPOLICY)
    checks = by_key()
    assert not_green(checks) == {}
    assert checks["kuadrant:limits"]["detail"] == "2 enforced."
    policy_status(exposing, "alpha", "chat", kind=k8s.TOKENRATELIMITPOLICY, enforced=False)
    checks = by_key()
    assert not_green(checks) == {"kuadrant:limits": "amber"}
    assert checks["kuadrant:limits"]["detail"] == (
        "1 of 2 not enforced: those endpoints serve without their limits: TokenRateLimitPolicy alpha/chat "
        "(Enforced is False (MissingDependency: Authorino is not ready))."
    )


def test_a_limit_policy_kuadrant_has_not_reported_on_is_not_counted_enforced(exposing):
    limit_policy(exposing, k8s.TOKENRATELIMITPOLICY, "beta", "code")
    checks = by_key()
    assert not_green(checks) == {"kuadrant:limits": "amber"}
    assert (
        "TokenRateLimitPolicy beta/code (Kuadrant has not reported on its generation 1 yet)"
        in checks["kuadrant:limits"]["detail"]
    )
