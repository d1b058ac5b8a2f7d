"""A tenant's endpoint on the Gateway (access.tenant_endpoint, runtime.backends.tenant_exposure),
applied with the real `kubernetes` client against the API test server: alpha's two running models
in alpha's namespace, beta's model shared with alpha in beta's namespace under alpha's limits,
`/v1/models` to the portal; every rule parked until its AuthPolicy is enforced (simulated
Kuadrant, tests.support.kuadrant); what is no longer wanted is deleted, and nothing else."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from access.tenant_endpoint import apply_tenant_endpoint, apply_tenant_endpoints, endpoints
from deployments import services
from deployments.models import ModelDeployment
from runtime import k8s
from sharing.models import Publication, Subscription
from tests.support.crd import assert_valid
from tests.support.factories import draft
from tests.support.kuadrant import policy_status


@pytest.fixture
def gateway(settings):
    settings.GATEWAY_PUBLIC_URL = "https://llm.example.com/"
    settings.PORTAL_SERVICE_NAME = "llm-portal-web"
    settings.PORTAL_SERVICE_NAMESPACE = "llm-portal"
    settings.PORTAL_SERVICE_PORT = 8000
    cache.clear()
    yield settings
    cache.clear()


def running(world, tenant, name, **kw) -> ModelDeployment:
    user = world.users["member"] if tenant == world.alpha else world.users["other_member"]
    dep = services.deployment_create(tenant=tenant, user=user, data=draft(world, name=name, max_replicas=1, **kw))
    ModelDeployment.objects.filter(pk=dep.pk).update(state="ready")
    return ModelDeployment.objects.get(pk=dep.pk)


@pytest.fixture
def endpoint(world, cluster_api, gateway):
    one, two = running(world, world.alpha, "one"), running(world, world.alpha, "two", backend="kserve")
    shared = running(world, world.beta, "shared")
    publication = Publication.objects.create(deployment=shared, to_all=True)
    sub = Subscription.objects.create(
        publication=publication, consumer=world.alpha, state="active", tokens_per_minute=900
    )
    return {"one": one, "two": two, "shared": shared, "subscription": sub}


def rules(api, name: str, namespace: str) -> dict[str, bool]:
    """Each rule of a route: whether it sends requests on (False: parked)."""
    route = api.get_object(k8s.HTTPROUTE, name, namespace)
    return {rule["name"]: bool(rule.get("backendRefs")) for rule in route["spec"]["rules"]}


def test_rules_are_parked_until_kuadrant_enforces_their_policy_then_routed(world, cluster_api, endpoint):
    e = endpoint
    first = apply_tenant_endpoint(world.alpha)
    assert sorted(first.parked) == sorted([e["one"].pk, e["two"].pk, e["shared"].pk]) and first.routed == []
    own = {f"deployment-{e['one'].pk}": False, f"deployment-{e['two'].pk}": False}
    assert rules(cluster_api, "llm-portal-v1", "alpha") == own
    assert rules(cluster_api, "llm-portal-v1-alpha", "beta") == {f"deployment-{e['shared'].pk}": False}
    limit = cluster_api.get_object(k8s.TOKENRATELIMITPOLICY, f"llm-portal-v1-alpha-{e['shared'].pk}", "beta")
    assert limit["spec"]["targetRef"]["sectionName"] == f"deployment-{e['shared'].pk}"
    assert limit["spec"]["limits"] == {"tokens-per-route": {"rates": [{"limit": 900, "window": "1m"}]}}
    models = cluster_api.get_object(k8s.HTTPROUTE, "llm-portal-models-alpha", "llm-portal")
    assert models["spec"]["rules"][0]["backendRefs"] == [
        {"group": "", "kind": "Service", "name": "llm-portal-web", "port": 8000}
    ]
    for kind, name, ns in (
        (k8s.HTTPROUTE, "llm-portal-v1", "alpha"),
        (k8s.TOKENRATELIMITPOLICY, limit["metadata"]["name"], "beta"),
    ):
        obj = cluster_api.get_object(kind, name, ns)
        assert_valid({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": name}})

    for dep, route, ns in (
        (e["one"], "llm-portal-v1", "alpha"),
        (e["two"], "llm-portal-v1", "alpha"),
        (e["shared"], "llm-portal-v1-alpha", "beta"),
    ):
        policy_status(cluster_api, ns, f"{route}-{dep.pk}")
    second = apply_tenant_endpoint(world.alpha)
    assert second.parked == {} and sorted(second.routed) == sorted([e["one"].pk, e["two"].pk, e["shared"].pk])
    assert set(rules(cluster_api, "llm-portal-v1", "alpha").values()) == {True}
    assert rules(cluster_api, "llm-portal-v1-alpha", "beta") == {f"deployment-{e['shared'].pk}": True}
    assert apply_tenant_endpoint(world.alpha) is None  # the same endpoint, all routed: no call at all
    assert endpoints([world.alpha])[0]["gateway"] == "https://llm.example.com/alpha/v1"


def test_what_is_no_longer_wanted_is_deleted_and_nothing_else(world, cluster_api, endpoint):
    e = endpoint
    assert apply_tenant_endpoints() == {"applied": 2, "parked": 4}  # alpha's 3 rules, beta's own 1
    assert rules(cluster_api, "llm-portal-v1", "beta") == {f"deployment-{e['shared'].pk}": False}
    Subscription.objects.filter(pk=e["subscription"].pk).update(state="ended")
    done = apply_tenant_endpoint(world.alpha)
    assert "HTTPRoute beta/llm-portal-v1-alpha" in done.deleted
    for kind in (k8s.HTTPROUTE, k8s.AUTHPOLICY, k8s.TOKENRATELIMITPOLICY):  # beta's own endpoint stays
        left = [
            (o["metadata"]["name"], o["metadata"]["labels"]["llm-portal.io/tenant"])
            for o in cluster_api.list_objects(kind, "beta")
        ]
        assert all(tenant == "beta" for _, tenant in left), (kind, left)
    assert rules(cluster_api, "llm-portal-v1", "beta") == {f"deployment-{e['shared'].pk}": False}
    assert cluster_api.get_object(k8s.HTTPROUTE, "llm-portal-v1", "alpha") is not None
    ModelDeployment.objects.filter(tenant=world.alpha).update(state="stopped")
    apply_tenant_endpoint(world.alpha)
    for kind in (k8s.HTTPROUTE, k8s.AUTHPOLICY):
        assert cluster_api.list_objects(kind, "alpha") == []
        assert [o["metadata"]["name"] for o in cluster_api.list_objects(kind, "llm-portal")] == [
            "llm-portal-models-beta"
        ]


def test_an_own_model_wins_a_shared_name_and_without_a_gateway_nothing_is_called(
    world, cluster_api, endpoint, settings
):
    ModelDeployment.objects.filter(pk=endpoint["one"].pk).update(served_model_name="shared")
    apply_tenant_endpoint(world.alpha)
    assert cluster_api.get_object(k8s.HTTPROUTE, "llm-portal-v1-alpha", "beta") is None
    settings.GATEWAY_PUBLIC_URL = None
    assert apply_tenant_endpoint(world.alpha) is None and endpoints([world.alpha])[0]["gateway"] is None


def test_each_member_reads_the_base_urls_of_their_tenants_over_the_api_and_on_the_keys_page(world, gateway):
    assert world.client("member").get("/api/v1/tenant-endpoints/").json() == [
        {"tenant": "alpha", "gateway": "https://llm.example.com/alpha/v1", "local": None}
    ]
    assert [e["tenant"] for e in world.client("platform_admin").get("/api/v1/tenant-endpoints/").json()] == [
        "alpha",
        "beta",
    ]
    assert world.client("anonymous").get("/api/v1/tenant-endpoints/").status_code == 401
    page = world.browser("viewer").get("/keys/").content.decode()
    assert 'id="tenant-endpoints"' in page and "<code>https://llm.example.com/alpha/v1</code>" in page
    gateway.GATEWAY_PUBLIC_URL = None
    assert 'id="tenant-endpoints"' not in world.browser("viewer").get("/keys/").content.decode()
