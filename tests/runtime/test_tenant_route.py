"""The tenant endpoint's cluster objects (runtime.manifests.tenant_route): exact shapes, the real
Gateway API / Inference Extension / Kuadrant CRD schemas with their CEL rules, which key reaches
which model, and what a served name may not do to a manifest."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from runtime.manifests.gateway import key_selector, render_key_secret
from runtime.manifests.tenant_route import (
    MODEL_HEADER,
    chunks,
    models_api_path,
    render_inferencepools,
    render_models_authpolicy,
    render_models_httproute,
    render_tenant_authpolicies,
    render_tenant_httproutes,
    render_tenant_limit_policies,
    tenant_endpoint,
    tenant_model,
    tenant_route_objects,
)
from runtime.spec import EndpointPickerSpec, ModelPoolSpec, RenderError, TenantModelSpec, TenantRouteSpec
from tests.runtime.test_gateway_manifests import GATEWAY
from tests.runtime.test_manifests import small_spec
from tests.support.crd import SchemaError, assert_valid

KSERVE_POOL = ModelPoolSpec((("component", "predictor"), ("serving.kserve.io/inferenceservice", "qwen-small")), 8080)


def model(i: int, served: str | None = None, **changes) -> TenantModelSpec:
    return TenantModelSpec(f"model-{i}" if served is None else served, i, f"m{i}", f"m{i}-serve-svc", 8000, **changes)


def tenant(*models: TenantModelSpec, **changes) -> TenantRouteSpec:
    spec = TenantRouteSpec(
        tenant_slug="acme",
        namespace="tenant-acme",
        gateway=GATEWAY,
        models=models,
        portal_namespace="llm-portal",
        portal_service="llm-portal-web",
        portal_port=80,
    )
    return replace(spec, **changes)


def two_models(**changes) -> TenantRouteSpec:
    own = tenant_model(small_spec())  # deployment 7, qwen-0.5b, KubeRay's serve Service
    return tenant(own, model(8, "org/Model-8"), **changes)


def shared(**changes) -> TenantRouteSpec:
    """Models of tenant `globex` shared with `acme`: rendered in globex's namespace."""
    return tenant(
        model(20, "globex/llama"),
        **{
            "namespace": "tenant-globex",
            "owner_slug": "globex",
            "tokens_per_minute": 1000,
            "route_tokens_per_minute": 50_000,
            "route_requests_per_minute": 300,
            **changes,
        },
    )


def pooled() -> TenantRouteSpec:
    kserve = tenant_model(small_spec(backend="kserve"), KSERVE_POOL)
    return tenant(
        kserve, model(8), endpoint_picker=EndpointPickerSpec(), tokens_per_minute=5000, requests_per_minute=60
    )


class TestShape:
    def test_the_model_route_matches_prefix_and_header_and_rewrites_to_v1(self) -> None:
        (route,) = render_tenant_httproutes(two_models())
        assert route == {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {
                "name": "llm-portal-v1",
                "namespace": "tenant-acme",
                "labels": {
                    "app.kubernetes.io/managed-by": "llm-portal",
                    "llm-portal.io/tenant": "acme",
                    "llm-portal.io/endpoint": "tenant",
                },
            },
            "spec": {
                "parentRefs": [
                    {
                        "group": "gateway.networking.k8s.io",
                        "kind": "Gateway",
                        "name": "llm-gateway",
                        "namespace": "gateway-system",
                    }
                ],
                "rules": [
                    {
                        "name": f"deployment-{i}",
                        "matches": [
                            {
                                "path": {"type": "PathPrefix", "value": "/acme/v1"},
                                "headers": [{"type": "Exact", "name": "X-Gateway-Model-Name", "value": served}],
                            }
                        ],
                        "filters": [
                            {
                                "type": "URLRewrite",
                                "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}},
                            }
                        ],
                        "backendRefs": [{"group": "", "kind": "Service", "name": service, "port": 8000}],
                    }
                    for i, served, service in (
                        (7, "qwen-0.5b", "qwen-small-serve-svc"),
                        (8, "org/Model-8", "m8-serve-svc"),
                    )
                ],
                "hostnames": ["llm.example.com"],
            },
        }
        assert tenant_endpoint(two_models()) == "https://llm.example.com/acme/v1"

    def test_the_backend_is_the_backends_own_service(self) -> None:
        assert tenant_model(small_spec(backend="kserve")).service == "qwen-small-predictor"
        assert tenant_model(small_spec(backend="kserve")).port == 80

    def test_models_goes_to_the_portal_from_the_portals_namespace(self) -> None:
        route = render_models_httproute(two_models())
        assert route["metadata"]["name"] == "llm-portal-models-acme"
        assert route["metadata"]["namespace"] == "llm-portal"
        assert route["spec"]["rules"] == [
            {
                "name": "models",
                "matches": [{"path": {"type": "PathPrefix", "value": "/acme/v1/models"}, "method": "GET"}],
                "filters": [
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {
                            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/api/v1/gateway/acme/models"}
                        },
                    }
                ],
                "backendRefs": [{"group": "", "kind": "Service", "name": "llm-portal-web", "port": 80}],
            }
        ]
        assert models_api_path("acme") == "/api/v1/gateway/acme/models"

    def test_a_parked_rule_keeps_its_name_and_match_but_reaches_nothing(self) -> None:
        (full,) = render_tenant_httproutes(two_models())
        (parked,) = render_tenant_httproutes(two_models(), parked={8})
        assert parked["spec"]["rules"][0] == full["spec"]["rules"][0]
        assert parked["spec"]["rules"][1] == {"name": "deployment-8", "matches": full["spec"]["rules"][1]["matches"]}

    def test_an_inferencepool_per_pooled_model_and_the_route_targets_it(self) -> None:
        (pool,) = render_inferencepools(pooled())
        assert pool == {
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": {
                "name": "qwen-small",
                "namespace": "tenant-acme",
                "labels": {
                    "app.kubernetes.io/managed-by": "llm-portal",
                    "llm-portal.io/tenant": "acme",
                    "llm-portal.io/endpoint": "tenant",
                    "llm-portal.io/deployment-id": "7",
                },
            },
            "spec": {
                "selector": {
                    "matchLabels": {"component": "predictor", "serving.kserve.io/inferenceservice": "qwen-small"}
                },
                "targetPorts": [{"number": 8080}],
                "endpointPickerRef": {"name": "qwen-small-epp", "port": {"number": 9002}, "failureMode": "FailClose"},
            },
        }
        (route,) = render_tenant_httproutes(pooled())
        refs = [rule["backendRefs"] for rule in route["spec"]["rules"]]
        assert refs == [
            [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen-small"}],
            [{"group": "", "kind": "Service", "name": "m8-serve-svc", "port": 8000}],  # no pool: its Service
        ]
        # Without a platform endpoint picker, no pool at all, whatever the model offers.
        assert render_inferencepools(replace(pooled(), endpoint_picker=None)) == []

    def test_objects_are_in_apply_order_policies_before_routes(self) -> None:
        kinds = [(o["kind"], o["metadata"]["name"]) for o in tenant_route_objects(pooled())]
        assert kinds == [
            ("InferencePool", "qwen-small"),
            ("AuthPolicy", "llm-portal-v1-7"),
            ("AuthPolicy", "llm-portal-v1-8"),
            ("TokenRateLimitPolicy", "llm-portal-v1"),
            ("RateLimitPolicy", "llm-portal-v1"),
            ("HTTPRoute", "llm-portal-v1"),
            ("AuthPolicy", "llm-portal-models-acme"),
            ("HTTPRoute", "llm-portal-models-acme"),
        ]


SCHEMA_CASES = {
    "two_models": lambda: tenant_route_objects(two_models(tokens_per_minute=1000, requests_per_minute=60)),
    "pooled": lambda: tenant_route_objects(pooled()),
    "parked": lambda: tenant_route_objects(two_models(), parked={7, 8}),
    "shared": lambda: tenant_route_objects(shared()),
    "shared_model_limits": lambda: tenant_route_objects(
        shared(models=(model(20, "globex/llama", tokens_per_minute=900, requests_per_minute=30), model(21)))
    ),
    "seventeen": lambda: tenant_route_objects(tenant(*(model(i) for i in range(1, 18)), requests_per_minute=5)),
    "longest_served_name": lambda: tenant_route_objects(tenant(model(1, "a" * 200))),
    "on_an_ip_address": lambda: tenant_route_objects(
        two_models(gateway=replace(GATEWAY, public_url="http://10.0.0.5:8080"))
    ),
}


class TestCrdSchemas:
    @pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
    def test_every_object_is_valid_including_cel_rules(self, case: str) -> None:
        objects = SCHEMA_CASES[case]()
        assert objects
        for obj in objects:
            report = assert_valid(obj)
            assert report.evaluated, f"{obj['kind']} {obj['metadata']['name']}: no CEL rule was evaluated"

    def test_a_pool_with_a_port_twice_breaks_the_cel_rule(self) -> None:
        (pool,) = render_inferencepools(pooled())
        pool["spec"]["targetPorts"] = [{"number": 8080}, {"number": 8080}]
        with pytest.raises(SchemaError, match="port number must be unique"):
            assert_valid(pool)

    def test_a_picker_service_without_port_breaks_the_cel_rule(self) -> None:
        (pool,) = render_inferencepools(pooled())
        del pool["spec"]["endpointPickerRef"]["port"]
        with pytest.raises(SchemaError, match="port is required"):
            assert_valid(pool)

    def test_two_matches_on_a_rewritten_rule_break_the_cel_rule(self) -> None:
        """Why each model is its own rule: a ReplacePrefixMatch rewrite allows one match."""
        (route,) = render_tenant_httproutes(two_models())
        rule = route["spec"]["rules"][0]
        rule["matches"].append(route["spec"]["rules"][1]["matches"][0])
        with pytest.raises(SchemaError, match="exactly one PathPrefix match"):
            assert_valid(route)

    def test_seventeen_rules_in_one_route_are_refused_by_the_schema(self) -> None:
        (first, second) = render_tenant_httproutes(tenant(*(model(i) for i in range(1, 18))))
        first["spec"]["rules"] += second["spec"]["rules"]
        with pytest.raises(SchemaError, match="rules"):
            assert_valid(first)


def accepts(policy: dict, secret: dict) -> bool:
    """Whether an AuthPolicy's API-key identities accept a key Secret (all selector labels on it)."""
    labels = secret["metadata"]["labels"]
    identities = policy["spec"]["rules"]["authentication"].values()
    return any(labels.items() >= identity["apiKey"]["selector"]["matchLabels"].items() for identity in identities)


def key(tenant_slug: str, deployment_id: int | None) -> dict:
    return render_key_secret(
        name="k",
        namespace="kuadrant-system",
        tenant_slug=tenant_slug,
        deployment_id=deployment_id,
        api_key="x",
        user_id="key-1",
    )


def policy_for(spec: TenantRouteSpec, headers: dict[str, str]) -> dict | None:
    """The AuthPolicy Kuadrant enforces on a POST to the tenant endpoint with `headers`: the one
    aimed at the rule the request matches (the header names are case-insensitive), else None."""
    sent = {name.lower(): value for name, value in headers.items()}
    for route in render_tenant_httproutes(spec):
        for rule in route["spec"]["rules"]:
            (match,) = rule["matches"]
            if all(sent.get(h["name"].lower()) == h["value"] for h in match["headers"]):
                for policy in render_tenant_authpolicies(spec):
                    target = policy["spec"]["targetRef"]
                    if (target["name"], target["sectionName"]) == (route["metadata"]["name"], rule["name"]):
                        return policy
                raise AssertionError(f"rule {rule['name']} has no AuthPolicy")
    return None


class TestWhichKeyReachesWhichModel:
    def test_a_deployment_key_reaches_its_own_model_only(self) -> None:
        spec = two_models()
        assert accepts(policy_for(spec, {MODEL_HEADER: "qwen-0.5b"}), key("acme", 7))
        assert not accepts(policy_for(spec, {MODEL_HEADER: "org/Model-8"}), key("acme", 7))
        assert accepts(policy_for(spec, {"x-gateway-model-name": "org/Model-8"}), key("acme", 8))

    def test_a_tenant_key_reaches_every_model_and_a_foreign_key_none(self) -> None:
        spec = two_models()
        for served in ("qwen-0.5b", "org/Model-8"):
            assert accepts(policy_for(spec, {MODEL_HEADER: served}), key("acme", None))
            assert not accepts(policy_for(spec, {MODEL_HEADER: served}), key("globex", None))
            assert not accepts(policy_for(spec, {MODEL_HEADER: served}), key("globex", 7))

    def test_no_model_or_an_unknown_one_matches_no_model_rule(self) -> None:
        assert policy_for(two_models(), {}) is None
        assert policy_for(two_models(), {MODEL_HEADER: "QWEN-0.5B"}) is None  # exact, case-sensitive

    def test_every_rule_has_exactly_one_policy_with_the_per_key_counter_published(self) -> None:
        spec = tenant(*(model(i) for i in range(1, 18)))
        targets = [p["spec"]["targetRef"] for p in render_tenant_authpolicies(spec)]
        rules = [
            (r["metadata"]["name"], rule["name"]) for r in render_tenant_httproutes(spec) for rule in r["spec"]["rules"]
        ]
        assert sorted((t["name"], t["sectionName"]) for t in targets) == sorted(rules)
        for policy in render_tenant_authpolicies(spec):
            assert list(policy["spec"]["rules"]["response"]["success"]["filters"]) == ["identity"]

    def test_models_accepts_any_key_of_the_tenant_and_no_other(self) -> None:
        policy = render_models_authpolicy(two_models())
        assert policy["spec"]["targetRef"] == {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": "llm-portal-models-acme",
        }
        assert (
            accepts(policy, key("acme", None)) and accepts(policy, key("acme", 7)) and accepts(policy, key("acme", 99))
        )
        assert not accepts(policy, key("globex", None)) and not accepts(policy, key("globex", 7))

    def test_shared_models_take_the_consumers_keys_in_the_owners_namespace(self) -> None:
        spec = shared()
        (route,) = render_tenant_httproutes(spec)
        assert (route["metadata"]["name"], route["metadata"]["namespace"]) == ("llm-portal-v1-acme", "tenant-globex")
        assert route["metadata"]["labels"]["llm-portal.io/owner"] == "globex"
        policy = policy_for(spec, {MODEL_HEADER: "globex/llama"})
        assert accepts(policy, key("acme", None)) and accepts(policy, key("acme", 20))
        assert not accepts(policy, key("globex", None))  # the owner's keys use the owner's endpoint
        assert render_models_httproute(spec) is None  # the consumer's own spec renders /v1/models


class TestLimits:
    def test_shared_routes_count_per_key_and_per_consumer(self) -> None:
        tokens, requests = render_tenant_limit_policies(shared())
        assert tokens["kind"] == "TokenRateLimitPolicy" and requests["kind"] == "RateLimitPolicy"
        assert tokens["spec"]["limits"] == {
            "tokens-per-key": {
                "rates": [{"limit": 1000, "window": "1m"}],
                "counters": [{"expression": "auth.identity.key_id"}],
            },
            "tokens-per-route": {"rates": [{"limit": 50_000, "window": "1m"}]},  # one counter: the consumer's
        }
        assert requests["spec"]["limits"] == {
            "requests-metered": {  # no per-key limit: the meter the usage per key is counted from
                "rates": [{"limit": 10**15, "window": "1m"}],
                "counters": [{"expression": "auth.identity.key_id"}],
            },
            "requests-per-route": {"rates": [{"limit": 300, "window": "1m"}]},
        }
        assert tokens["spec"]["targetRef"] == {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": "llm-portal-v1-acme",
        }

    def test_a_consumers_limits_on_one_shared_model_aim_at_its_rule(self) -> None:
        spec = shared(
            models=(model(20, "globex/llama", tokens_per_minute=900, requests_per_minute=30), model(21)),
            tokens_per_minute=0,
            route_tokens_per_minute=0,
            route_requests_per_minute=0,
        )
        route_tokens, route_requests, tokens, requests = render_tenant_limit_policies(spec)
        assert [p["metadata"]["name"] for p in (route_tokens, route_requests)] == ["llm-portal-v1-acme"] * 2
        assert set(route_tokens["spec"]["limits"]) == {"tokens-metered"}  # the route's: meters only
        assert set(route_requests["spec"]["limits"]) == {"requests-metered"}
        assert (tokens["metadata"]["name"], requests["metadata"]["name"]) == ("llm-portal-v1-acme-20",) * 2
        assert tokens["spec"] == {
            "targetRef": {
                "group": "gateway.networking.k8s.io",
                "kind": "HTTPRoute",
                "name": "llm-portal-v1-acme",
                "sectionName": "deployment-20",
            },
            "limits": {"tokens-per-route": {"rates": [{"limit": 900, "window": "1m"}]}},  # one counter: acme's
        }
        assert requests["spec"]["limits"] == {"requests-per-route": {"rates": [{"limit": 30, "window": "1m"}]}}
        assert tokens["metadata"]["labels"]["llm-portal.io/deployment-id"] == "20"

    @pytest.mark.parametrize("bad", [-1, 2**31, True, 1.5])
    def test_a_limit_that_is_not_a_whole_count_is_refused(self, bad) -> None:
        with pytest.raises(RenderError, match="per-minute limit"):
            render_tenant_limit_policies(shared(models=(model(20, tokens_per_minute=bad),)))

    def test_no_limit_set_renders_the_per_key_meters_only(self) -> None:
        meter = {"rates": [{"limit": 10**15, "window": "1m"}], "counters": [{"expression": "auth.identity.key_id"}]}
        tokens, requests = render_tenant_limit_policies(two_models())
        assert tokens["spec"]["limits"] == {"tokens-metered": meter}
        assert requests["spec"]["limits"] == {"requests-metered": meter}

    def test_a_route_wide_limit_cannot_be_split_over_routes(self) -> None:
        with pytest.raises(RenderError, match="route-wide"):
            render_tenant_httproutes(shared(models=tuple(model(i) for i in range(1, 18))))


class TestSplitting:
    def test_more_than_sixteen_models_split_by_deployment_id_whatever_the_order(self) -> None:
        models = [model(i) for i in range(1, 36)]
        random.Random(4).shuffle(models)
        spec = tenant(*models, tokens_per_minute=100)
        routes = render_tenant_httproutes(spec)
        assert [r["metadata"]["name"] for r in routes] == ["llm-portal-v1", "llm-portal-v1-2", "llm-portal-v1-3"]
        assert [[rule["name"] for rule in r["spec"]["rules"]] for r in routes] == [
            [f"deployment-{i}" for i in range(1, 17)],
            [f"deployment-{i}" for i in range(17, 33)],
            [f"deployment-{i}" for i in range(33, 36)],
        ]
        assert routes == render_tenant_httproutes(
            tenant(*sorted(models, key=lambda m: m.served_name), tokens_per_minute=100)
        )
        limited = [(p["kind"], p["spec"]["targetRef"]["name"]) for p in render_tenant_limit_policies(spec)]
        assert limited == [
            (kind, route)
            for route in ("llm-portal-v1", "llm-portal-v1-2", "llm-portal-v1-3")
            for kind in ("TokenRateLimitPolicy", "RateLimitPolicy")
        ]

    def test_a_new_deployment_joins_the_last_route_and_the_others_stay(self) -> None:
        before = chunks(tenant(*(model(i) for i in range(1, 17))))
        after = chunks(tenant(*(model(i) for i in range(1, 18))))
        assert after[0] == before[0] and [m.deployment_id for m in after[1][1]] == [17]

    def test_a_tenant_without_models_has_no_model_route_but_still_its_models_list(self) -> None:
        spec = tenant(tokens_per_minute=100)
        assert render_tenant_httproutes(spec) == []
        assert render_tenant_authpolicies(spec) == [] and render_tenant_limit_policies(spec) == []
        kinds = [o["kind"] for o in tenant_route_objects(spec)]
        assert kinds == ["AuthPolicy", "HTTPRoute"]  # /v1/models answers an empty list
        assert tenant_route_objects(tenant(portal_service="")) == []


HOSTILE = [
    "",
    " qwen",
    "qwen 7b",
    "-qwen",
    ".hidden",
    "qwen\n",
    "qwen\r\nX-Gateway-Model-Name: other",
    'qwen"}],"backendRefs":[{"name":"x',
    "qwen:7b",
    "qwen\x00",
    "qwén",
    "a" * 201,
]


class TestHostileNames:
    @pytest.mark.parametrize("served", HOSTILE)
    def test_a_name_that_is_not_a_served_name_is_refused(self, served: str) -> None:
        spec = tenant(model(1, served))
        for render in (render_tenant_httproutes, render_tenant_authpolicies, tenant_route_objects):
            with pytest.raises(RenderError, match="served model name"):
                render(spec)

    def test_a_served_name_cannot_add_structure(self) -> None:
        """The longest, oddest valid name stays one header value of one rule."""
        served = "org.x/Model_v2-" + "a" * 185
        (route,) = render_tenant_httproutes(tenant(model(1, served)))
        (rule,) = route["spec"]["rules"]
        assert rule["matches"][0]["headers"] == [{"type": "Exact", "name": MODEL_HEADER, "value": served}]
        assert assert_valid(route).evaluated

    def test_two_models_with_one_served_name_are_refused(self) -> None:
        with pytest.raises(RenderError, match="same served name"):
            render_tenant_httproutes(tenant(model(1, "qwen"), model(2, "qwen")))

    @pytest.mark.parametrize(
        "changes",
        [
            {"tenant_slug": "Acme"},
            {"namespace": "tenant_acme"},
            {"portal_service": "llm-portal/web"},
            {"owner_slug": "acme"},
            {"endpoint_picker": EndpointPickerSpec(failure_mode="Maybe")},
        ],
    )
    def test_names_the_api_server_would_refuse_are_refused(self, changes: dict) -> None:
        with pytest.raises(RenderError):
            tenant_route_objects(two_models(**changes))

    @pytest.mark.parametrize(
        "pool",
        [
            ModelPoolSpec((), 8080),
            ModelPoolSpec((("app", "x y"),), 8080),
            ModelPoolSpec((("bad key!", "x"),), 8080),
            ModelPoolSpec((("app", "x"),), 0),
        ],
    )
    def test_a_pool_with_bad_labels_or_port_is_refused(self, pool: ModelPoolSpec) -> None:
        spec = tenant(model(1, pool=pool), endpoint_picker=EndpointPickerSpec())
        with pytest.raises(RenderError, match="pool|label"):
            render_inferencepools(spec)

    def test_a_picker_service_name_too_long_is_refused(self) -> None:
        long = TenantModelSpec("m", 1, "a" * 61, "svc", 80, ModelPoolSpec((("app", "x"),), 8080))
        with pytest.raises(RenderError, match="endpoint picker"):
            render_inferencepools(tenant(long, endpoint_picker=EndpointPickerSpec()))


def test_key_selectors_are_the_deployment_routes_own() -> None:
    """The tenant route's policies accept exactly the keys a deployment's own route accepts."""
    (policy,) = [
        p for p in render_tenant_authpolicies(two_models()) if p["spec"]["targetRef"]["sectionName"] == "deployment-7"
    ]
    auth = policy["spec"]["rules"]["authentication"]
    assert auth["deployment-keys"]["apiKey"]["selector"]["matchLabels"] == key_selector("acme", 7)
    assert auth["tenant-keys"]["apiKey"]["selector"]["matchLabels"] == key_selector("acme", None)
