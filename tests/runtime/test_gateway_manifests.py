"""Endpoint access objects: HTTPRoute, AuthPolicy, TokenRateLimitPolicy, RateLimitPolicy and the
API-key Secret — golden files, the real Gateway API / Kuadrant CRD schemas (CEL rules included),
and the behaviour each field is there for.

Regenerate the golden files after an intended change with UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from runtime.manifests.gateway import (
    KEY_COUNTER,
    METER_CEILING,
    REQUESTS_LIMIT,
    REQUESTS_METERED,
    TOKENS_LIMIT,
    TOKENS_METERED,
    backend_service,
    exposure_objects,
    key_selector,
    per_key_limit,
    public_endpoint,
    render_authpolicy,
    render_httproute,
    render_key_secret,
    render_ratelimitpolicy,
    render_tokenratelimitpolicy,
)
from runtime.spec import GatewaySpec
from tests.runtime.test_manifests import small_spec
from tests.support.crd import SchemaError, assert_valid

GOLDEN = Path(__file__).parent / "golden"
GATEWAY = GatewaySpec(
    gateway_name="llm-gateway",
    gateway_namespace="gateway-system",
    public_url="https://llm.example.com",
    key_namespace="kuadrant-system",
)


def limited():
    return small_spec(tokens_per_minute=50_000, requests_per_minute=600)


GOLDEN_CASES = {
    "gateway_httproute": lambda: render_httproute(limited(), GATEWAY),
    "gateway_httproute_kserve": lambda: render_httproute(replace(limited(), backend="kserve"), GATEWAY),
    "gateway_authpolicy": lambda: render_authpolicy(limited()),
    "gateway_tokenratelimitpolicy": lambda: render_tokenratelimitpolicy(limited()),
    "gateway_ratelimitpolicy": lambda: render_ratelimitpolicy(limited()),
    "gateway_key_secret": lambda: render_key_secret(
        name="llm-portal-key-12",
        namespace="kuadrant-system",
        tenant_slug="acme",
        deployment_id=7,
        api_key="llmp_not-a-real-key",
        user_id="key-12",
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_rendered_object_matches_golden_file(case: str) -> None:
    rendered = GOLDEN_CASES[case]()
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(yaml.safe_dump(rendered, sort_keys=False, width=100))
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    assert rendered == yaml.safe_load(path.read_text())


SCHEMA_CASES = {
    **{k: v for k, v in GOLDEN_CASES.items() if k != "gateway_key_secret"},
    "httproute_on_an_ip_address": lambda: render_httproute(
        limited(), replace(GATEWAY, public_url="http://10.0.0.5:8080")
    ),
    "authpolicy_tenant_without_limits": lambda: render_authpolicy(small_spec()),
    "httproute_parked": lambda: render_httproute(limited(), GATEWAY, routed=False),
}
DENY_ALL = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "gateway" / "deny-all-authpolicy.yaml"


class TestCrdSchemas:
    @pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
    def test_rendered_object_is_valid_including_cel_rules(self, case: str) -> None:
        report = assert_valid(SCHEMA_CASES[case]())
        if case.startswith("gateway_authpolicy") or "ratelimit" in case:
            # The Kuadrant policies' rules (targetRef group/kind, limits present) really ran.
            assert report.evaluated, "no CEL rule was evaluated"

    def test_a_policy_aimed_at_a_service_breaks_the_targetref_rule(self) -> None:
        policy = render_authpolicy(small_spec())
        policy["spec"]["targetRef"] = {"group": "", "kind": "Service", "name": "qwen-small-serve-svc"}
        with pytest.raises(SchemaError, match="targetRef"):
            assert_valid(policy)

    def test_a_limit_policy_without_limits_breaks_the_cel_rule(self) -> None:
        policy = render_tokenratelimitpolicy(limited())
        policy["spec"]["limits"] = {}
        with pytest.raises(SchemaError, match="At least one spec.limits"):
            assert_valid(policy)

    @pytest.mark.parametrize("render", [render_tokenratelimitpolicy, render_ratelimitpolicy])
    def test_a_counter_is_checked_against_the_schema(self, render) -> None:
        policy = render(limited())
        (limit,) = policy["spec"]["limits"].values()
        limit["counters"] = [{"expression": ""}]  # minLength 1
        with pytest.raises(SchemaError):
            assert_valid(policy)
        limit["counters"] = [{"selector": KEY_COUNTER}]  # RateLimitPolicy v1beta's word, gone in v1
        with pytest.raises(SchemaError):
            assert_valid(policy)

    def test_a_route_path_rewrite_misspelt_is_caught(self) -> None:
        route = render_httproute(limited(), GATEWAY)
        route["spec"]["rules"][0]["filters"][0]["urlRewrite"]["path"]["replacePrefix"] = "/"
        with pytest.raises(SchemaError):
            assert_valid(route)


class TestBehaviour:
    def test_the_route_is_per_tenant_and_deployment_and_rewritten_for_the_engine(self) -> None:
        route = render_httproute(limited(), GATEWAY)["spec"]
        assert route["parentRefs"][0] | {} == {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "llm-gateway",
            "namespace": "gateway-system",
        }
        assert route["rules"][0]["matches"] == [{"path": {"type": "PathPrefix", "value": "/acme/qwen-small"}}]
        assert route["rules"][0]["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] == "/"
        assert route["hostnames"] == ["llm.example.com"]
        assert public_endpoint(GATEWAY, limited()) == "https://llm.example.com/acme/qwen-small/v1"

    def test_an_ip_address_public_url_sets_no_hostname(self) -> None:
        route = render_httproute(limited(), replace(GATEWAY, public_url="http://10.0.0.5:8080"))
        assert "hostnames" not in route["spec"]

    def test_the_backend_is_the_serve_service_or_the_kserve_predictor(self) -> None:
        assert backend_service(small_spec()) == ("qwen-small-serve-svc", 8000)
        assert backend_service(small_spec(backend="kserve")) == ("qwen-small-predictor", 80)

    def test_the_authpolicy_accepts_deployment_keys_and_tenant_keys_only(self) -> None:
        auth = render_authpolicy(small_spec())["spec"]["rules"]["authentication"]
        deployment = auth["deployment-keys"]["apiKey"]["selector"]["matchLabels"]
        tenant = auth["tenant-keys"]["apiKey"]["selector"]["matchLabels"]
        assert (
            deployment["llm-portal.io/deployment-id"] == "7" and deployment["llm-portal.io/key-scope"] == "deployment"
        )
        assert tenant["llm-portal.io/key-scope"] == "tenant" and "llm-portal.io/deployment-id" not in tenant
        assert deployment["llm-portal.io/tenant"] == tenant["llm-portal.io/tenant"] == "acme"
        # Keys are looked up in the AuthConfig's (Kuadrant's) namespace only, never in tenants'.
        assert "allNamespaces" not in auth["deployment-keys"]["apiKey"]
        assert auth["deployment-keys"]["credentials"] == {"authorizationHeader": {"prefix": "Bearer"}}

    def test_a_key_secret_carries_exactly_the_selector_labels_of_its_scope(self) -> None:
        secret = GOLDEN_CASES["gateway_key_secret"]()
        labels = secret["metadata"]["labels"]
        assert labels == key_selector("acme", 7)
        assert labels["authorino.kuadrant.io/managed-by"] == "authorino"
        assert secret["stringData"] == {"api_key": "llmp_not-a-real-key"}
        assert secret["metadata"]["annotations"] == {"secret.kuadrant.io/user-id": "key-12"}
        auth = render_authpolicy(small_spec())["spec"]["rules"]["authentication"]
        other = render_authpolicy(small_spec(deployment_id=8))["spec"]["rules"]["authentication"]
        assert auth["deployment-keys"]["apiKey"]["selector"]["matchLabels"] == labels
        assert other["deployment-keys"]["apiKey"]["selector"]["matchLabels"] != labels

    def test_limits_come_from_the_tenant_and_zero_renders_the_per_key_meter(self) -> None:
        tokens = render_tokenratelimitpolicy(limited())["spec"]["limits"]
        requests = render_ratelimitpolicy(limited())["spec"]["limits"]
        assert tokens == {TOKENS_LIMIT: per_key_limit(50_000)} and requests == {REQUESTS_LIMIT: per_key_limit(600)}
        # No limit set: both policies still count each key (the usage per key), under a ceiling.
        assert render_tokenratelimitpolicy(small_spec())["spec"]["limits"] == {
            TOKENS_METERED: {
                "rates": [{"limit": METER_CEILING, "window": "1m"}],
                "counters": [{"expression": KEY_COUNTER}],
            }
        }
        assert render_ratelimitpolicy(small_spec())["spec"]["limits"] == {
            REQUESTS_METERED: per_key_limit(METER_CEILING)
        }
        # Apply order: the policies first, the route last (it never exists without its AuthPolicy).
        for spec in (small_spec(), limited()):
            kinds = [o["kind"] for o in exposure_objects(spec, GATEWAY)]
            assert kinds == ["AuthPolicy", "TokenRateLimitPolicy", "RateLimitPolicy", "HTTPRoute"]

    def test_a_parked_route_is_the_same_rule_with_nowhere_to_send_a_request(self) -> None:
        parked = render_httproute(limited(), GATEWAY, routed=False)
        full = render_httproute(limited(), GATEWAY)
        # Same parent, hostnames and match (the same route rule Kuadrant enforces the policy on).
        assert {k: v for k, v in parked["spec"].items() if k != "rules"} == {
            k: v for k, v in full["spec"].items() if k != "rules"
        }
        assert parked["spec"]["rules"] == [{"matches": full["spec"]["rules"][0]["matches"]}]
        assert parked["metadata"] == full["metadata"]


class TestGatewayDenyAll:
    """deploy/k8s/gateway's deny-all AuthPolicy: valid, on the Gateway the settings name, denying."""

    def test_it_is_valid_against_the_authpolicy_crd_including_cel_rules(self) -> None:
        (policy,) = [doc for doc in yaml.safe_load_all(DENY_ALL.read_text()) if doc]
        report = assert_valid(policy)
        assert report.evaluated, "no CEL rule was evaluated"

    def test_it_targets_the_default_gateway_and_denies_as_defaults(self, settings) -> None:
        (policy,) = [doc for doc in yaml.safe_load_all(DENY_ALL.read_text()) if doc]
        spec = policy["spec"]
        assert policy["metadata"]["namespace"] == settings.GATEWAY_NAMESPACE
        assert spec["targetRef"] == {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": settings.GATEWAY_NAME,
        }
        # Defaults (not overrides): a route's own AuthPolicy (the portal's) replaces them there.
        assert set(spec) == {"targetRef", "defaults"} and spec["defaults"]["strategy"] == "atomic"
        assert spec["defaults"]["rules"]["authorization"] == {"deny-all": {"opa": {"rego": "allow = false"}}}

    def test_a_deny_all_aimed_at_a_service_breaks_the_targetref_rule(self) -> None:
        (policy,) = [doc for doc in yaml.safe_load_all(DENY_ALL.read_text()) if doc]
        policy["spec"]["targetRef"] = {"group": "", "kind": "Service", "name": "llm-gateway"}
        with pytest.raises(SchemaError, match="targetRef"):
            assert_valid(policy)


class TestLimitsCountPerKey:
    """Each limit means what the policy form says: per API key, on each endpoint.

    Kuadrant (Kuadrant/kuadrant-operator, tag v1.5.2): a limit's `counters` are its Limitador
    variables, so a limit without them is one counter for every key on the route
    (internal/controller/limitador_limits_reconciler.go: `Variables: limit.CountersAsStringList()`);
    the rate-limit pipeline sees only what the AuthPolicy's `response.success.filters` publish, as
    `auth.<filter>.<property>`, and Kuadrant's own example publishes a key's user id with this very
    selector (doc/overviews/token-rate-limiting.md, "Integration with AuthPolicy"); every limit is
    counted per HTTPRoute (internal/controller/ratelimit_workflow_helpers.go, LimitsNamespaceFromRoute).
    """

    @pytest.mark.parametrize("render", [render_tokenratelimitpolicy, render_ratelimitpolicy])
    def test_every_limit_has_one_counter_the_key(self, render) -> None:
        (limit,) = render(limited())["spec"]["limits"].values()
        assert limit["counters"] == [{"expression": "auth.identity.key_id"}]

    def test_the_counter_reads_what_the_authpolicy_publishes(self) -> None:
        root, filter_name, prop = KEY_COUNTER.split(".")
        published = render_authpolicy(limited())["spec"]["rules"]["response"]["success"]["filters"]
        assert root == "auth" and list(published) == [filter_name]
        assert list(published[filter_name]["json"]["properties"]) == [prop]

    def test_the_published_id_is_the_key_secrets_user_id(self) -> None:
        """Resolve the AuthPolicy's selector (gjson: `.` separates, `\\.` is a dot in a key) on what
        Authorino holds for an API key: its Secret as `auth.identity`."""
        published = render_authpolicy(limited())["spec"]["rules"]["response"]["success"]["filters"]
        selector = published["identity"]["json"]["properties"]["key_id"]["selector"]
        assert selector == r"auth.identity.metadata.annotations.secret\.kuadrant\.io/user-id"
        value: object = {"auth": {"identity": GOLDEN_CASES["gateway_key_secret"]()}}
        for key in re.split(r"(?<!\\)\.", selector):
            value = value[key.replace("\\.", ".")]
        assert value == "key-12"

    def test_two_routes_of_a_tenant_keep_their_own_policies(self) -> None:
        """Kuadrant counts per route, so per-endpoint is all a limit can be: each deployment's
        policy targets its own route, with the same per-key limit."""
        first, second = (render_tokenratelimitpolicy(replace(limited(), deployment_id=i, name=f"m{i}")) for i in (7, 8))
        assert first["spec"]["targetRef"]["name"] != second["spec"]["targetRef"]["name"]
        assert first["spec"]["limits"] == second["spec"]["limits"]


class TestTheStreamingRuleIsDocumented:
    """docs/install.md, step 8 "Endpoint access", says how the limits count and what a stream needs."""

    def test_step_8_says_per_key_per_endpoint_and_include_usage(self) -> None:
        install = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
        step = " ".join(install[install.index("**Endpoint access**") : install.index("## Configuration")].split())
        assert "**Limits: per key, on each endpoint.**" in step and "`usage.total_tokens`" in step
        assert '`"stream_options": {"include_usage": true}`' in step and "set requests per minute" in step
