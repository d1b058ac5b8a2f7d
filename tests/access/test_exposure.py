"""A deployment's exposure on the Gateway, applied by the reconciler with its workload (real
`kubernetes` client against the API test server): route, AuthPolicy, limits from the tenant's
policy, the Try-it key; the external URL shown; all of it removed with the deployment.

Fail closed (runtime.backends.exposure): the policies are applied before the route, the route
sends nothing to the engine and the URL stays hidden until Kuadrant (simulated by
tests.support.kuadrant, writing the conditions kuadrant-operator writes) enforces the AuthPolicy.
"""

from __future__ import annotations

import pytest

from deployments import services
from deployments.choices import State
from deployments.reconcile import reconcile
from quotas.models import Tenant
from runtime import k8s
from runtime.keys import portal_key
from tests.support import operators
from tests.support.crd import assert_valid
from tests.support.factories import draft
from tests.support.kuadrant import policy_status


@pytest.fixture
def gateway(settings):
    settings.GATEWAY_PUBLIC_URL = "https://llm.example.com/"
    settings.GATEWAY_NAME = "llm-gateway"
    settings.GATEWAY_NAMESPACE = "gateway-system"
    settings.API_KEY_NAMESPACE = "kuadrant-system"
    return settings


def approved(world, **kw):
    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, **kw))
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )
    dep.refresh_from_db()
    return dep


def run(dep):
    dep.refresh_from_db()
    result = reconcile(dep)
    dep.refresh_from_db()
    return result


def routed(api, dep) -> bool:
    """Whether the deployment's HTTPRoute sends requests on to a backend (False: parked or absent)."""
    route = api.get_object(k8s.HTTPROUTE, dep.resource_name, "alpha")
    return route is not None and any(rule.get("backendRefs") for rule in route["spec"]["rules"])


def ready_rayservice(api, dep) -> None:
    obj = api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
    operators.workload_for(api, obj, {"QuotaReserved": True, "Admitted": True})
    operators.rayservice_ready(api, "alpha", dep.resource_name)


def exposed_condition(dep) -> dict:
    return next(c for c in dep.conditions if c["type"] == "Exposed")


@pytest.mark.parametrize("backend", ["kuberay", "kserve"])
def test_the_workload_comes_with_its_route_policies_and_try_key_and_leaves_with_them(
    world, cluster_api, gateway, settings, backend
):
    Tenant.objects.filter(pk=world.alpha.pk).update(tokens_per_minute=20_000, requests_per_minute=0)
    dep = approved(world, backend=backend, max_replicas=1)
    run(dep)
    name = dep.resource_name
    route = cluster_api.get_object(k8s.HTTPROUTE, name, "alpha")
    auth = cluster_api.get_object(k8s.AUTHPOLICY, name, "alpha")
    tokens = cluster_api.get_object(k8s.TOKENRATELIMITPOLICY, name, "alpha")
    assert route["spec"]["rules"][0]["matches"][0]["path"]["value"] == f"/alpha/{name}"
    assert tokens["spec"]["limits"]["tokens-per-key"] == {
        "rates": [{"limit": 20_000, "window": "1m"}],
        "counters": [{"expression": "auth.identity.key_id"}],  # what the AuthPolicy publishes
    }
    assert auth["spec"]["rules"]["response"]["success"]["filters"]["identity"]["json"]["properties"] == {
        "key_id": {"selector": r"auth.identity.metadata.annotations.secret\.kuadrant\.io/user-id"}
    }
    # 0 = no limit: the per-key meter, which counts each key's requests (access.gateway_usage)
    requests = cluster_api.get_object(k8s.RATELIMITPOLICY, name, "alpha")
    assert requests["spec"]["limits"] == {
        "requests-metered": {
            "rates": [{"limit": 10**15, "window": "1m"}],
            "counters": [{"expression": "auth.identity.key_id"}],
        }
    }
    for obj in (route, auth, tokens, requests):  # what the API server stored still validates
        assert_valid({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": name}})
    secret = cluster_api.get_object(k8s.SECRET, f"llm-portal-try-{dep.pk}", "kuadrant-system")
    assert secret["stringData"]["api_key"] == portal_key(settings.SECRET_KEY, dep.pk)

    if backend == "kuberay":
        ready_rayservice(cluster_api, dep)
        policy_status(cluster_api, "alpha", name)  # Kuadrant enforces it
        run(dep)
        assert dep.state == State.READY
        assert dep.endpoint_url == f"https://llm.example.com/alpha/{name}/v1"
        assert routed(cluster_api, dep)

    # The tenant's policy changes: the sweep's hash sees drift and the next reconcile converges.
    Tenant.objects.filter(pk=world.alpha.pk).update(tokens_per_minute=0, requests_per_minute=120)
    run(dep)
    tokens = cluster_api.get_object(k8s.TOKENRATELIMITPOLICY, name, "alpha")["spec"]["limits"]
    assert list(tokens) == ["tokens-metered"]  # the limit gone, the meter back
    limits = cluster_api.get_object(k8s.RATELIMITPOLICY, name, "alpha")["spec"]["limits"]
    assert limits["requests-per-key"]["rates"] == [{"limit": 120, "window": "1m"}]
    assert limits["requests-per-key"]["counters"] == [{"expression": "auth.identity.key_id"}]

    services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
    for _ in range(2):
        run(dep)
    for kind in (k8s.HTTPROUTE, k8s.AUTHPOLICY, k8s.RATELIMITPOLICY, k8s.TOKENRATELIMITPOLICY):
        assert cluster_api.get_object(kind, name, "alpha") is None
    assert cluster_api.get_object(k8s.SECRET, f"llm-portal-try-{dep.pk}", "kuadrant-system") is None


def test_without_a_public_url_nothing_is_exposed_and_the_internal_url_stays(world, cluster_api, settings):
    settings.GATEWAY_PUBLIC_URL = None
    dep = approved(world, max_replicas=1)
    run(dep)
    assert cluster_api.list_objects(k8s.HTTPROUTE, "alpha") == []
    assert cluster_api.list_objects(k8s.AUTHPOLICY, "alpha") == []
    obj = cluster_api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
    operators.workload_for(cluster_api, obj, {"QuotaReserved": True, "Admitted": True})
    operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
    run(dep)
    assert dep.endpoint_url == f"http://{dep.resource_name}-serve-svc.alpha.svc:8000/v1"
    page = world.browser("member").get(f"/deployments/{dep.pk}/").content.decode()
    assert "Cluster-internal URL" in page and "$API_KEY" in page and "nothing checks a key" in page


def test_an_unchanged_exposed_deployment_costs_no_extra_call(world, cluster_api, gateway):
    """The exposure objects' hash rides on the workload's spec hash: a settled reconcile reads
    the RayService and its Workload as before, and touches no route, policy or Secret."""
    Tenant.objects.filter(pk=world.alpha.pk).update(tokens_per_minute=1000, requests_per_minute=60)
    dep = approved(world, max_replicas=1)
    run(dep)
    ready_rayservice(cluster_api, dep)
    policy_status(cluster_api, "alpha", dep.resource_name)
    run(dep)
    assert dep.endpoint_url and dep.observed_generation == dep.generation
    before = len(cluster_api.proxied_requests())
    run(dep)
    settled = cluster_api.proxied_requests()[before:]
    assert [method for method, _ in settled] == ["GET", "GET"], settled  # the RayService, its Workloads
    assert not any(word in path for _, path in settled for word in ("httproutes", "policies", "secrets"))


class TestFailClosed:
    """No moment with a routed model that Kuadrant does not guard, and no URL shown before."""

    def test_the_policies_are_applied_before_the_route(self, world, cluster_api, gateway):
        Tenant.objects.filter(pk=world.alpha.pk).update(tokens_per_minute=1000, requests_per_minute=60)
        dep = approved(world, max_replicas=1)
        run(dep)
        writes = [path for method, path in cluster_api.proxied_requests() if method in ("PATCH", "POST")]
        first = {
            kind: next(i for i, path in enumerate(writes) if f"/{kind}/" in path or path.endswith(f"/{kind}"))
            for kind in ("authpolicies", "tokenratelimitpolicies", "ratelimitpolicies", "httproutes")
        }
        assert (
            first["authpolicies"] < first["tokenratelimitpolicies"] < first["ratelimitpolicies"] < first["httproutes"]
        )

    def test_the_route_routes_and_the_url_shows_only_once_kuadrant_enforces_the_policy(
        self, world, cluster_api, gateway
    ):
        dep = approved(world, max_replicas=1)
        run(dep)
        name = dep.resource_name
        route = cluster_api.get_object(k8s.HTTPROUTE, name, "alpha")
        # Parked: it exists for Kuadrant to enforce the policy on, matches the same path, goes nowhere.
        assert route["spec"]["rules"] == [{"matches": [{"path": {"type": "PathPrefix", "value": f"/alpha/{name}"}}]}]
        assert_valid({k: route[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": name}})
        ready_rayservice(cluster_api, dep)
        for accepted, enforced, generation in (
            (False, None, None),
            (True, None, None),
            (True, False, None),
            (True, True, 0),
        ):
            policy_status(cluster_api, "alpha", name, accepted=accepted, enforced=enforced, generation=generation)
            run(dep)
            assert dep.state == State.READY and not routed(cluster_api, dep), (accepted, enforced, generation)
            assert dep.endpoint_url == "" and exposed_condition(dep)["status"] == "False"
        assert exposed_condition(dep)["reason"] == "AuthPolicyNotEnforced"
        assert "generation 1" in exposed_condition(dep)["message"]  # a status of an older spec says nothing
        for client in (world.client("member"), world.browser("member")):  # neither the API nor the page shows it
            assert "llm.example.com" not in client.get(f"/api/v1/deployments/{dep.pk}/").content.decode()
        page = world.browser("member").get(f"/deployments/{dep.pk}/").content.decode()
        assert "llm.example.com" not in page and "Not exposed yet: Waiting for Kuadrant to enforce" in page

        policy_status(cluster_api, "alpha", name)  # Kuadrant enforces the current generation
        run(dep)
        assert routed(cluster_api, dep) and exposed_condition(dep)["status"] == "True"
        assert dep.endpoint_url == f"https://llm.example.com/alpha/{name}/v1"
        assert world.client("member").get(f"/api/v1/deployments/{dep.pk}/").json()["endpoint_url"] == dep.endpoint_url

    def test_without_kuadrant_nothing_routes_and_the_workload_still_runs(self, world, cluster_api, gateway):
        # Kuadrant's CRDs are not installed: not discovered, and every request for them is a 404.
        cluster_api.undeclare(k8s.AUTHPOLICY)
        cluster_api.inject_faults(1.0, (404,), when=lambda _method, path: "/apis/kuadrant.io/" in path)
        dep = approved(world, max_replicas=1)
        run(dep)
        ready_rayservice(cluster_api, dep)
        run(dep)
        assert dep.state == State.READY and dep.endpoint_url == ""
        assert not routed(cluster_api, dep)
        condition = exposed_condition(dep)
        assert condition["reason"] == "PolicyNotApplied" and "is Kuadrant installed?" in condition["message"]

    def test_the_sweep_retries_an_exposure_still_pending(self, world, cluster_api, gateway):
        from deployments.sweep import _cluster_drifted
        from runtime.backends import get_backend

        dep = approved(world, max_replicas=1)
        run(dep)
        ready_rayservice(cluster_api, dep)
        run(dep)
        backend = get_backend("kuberay")
        obj = cluster_api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
        assert _cluster_drifted(dep, backend, obj, {})  # pending: the sweep enqueues a reconcile
        policy_status(cluster_api, "alpha", dep.resource_name)
        run(dep)
        obj = cluster_api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
        workloads = backend.list_workloads("alpha")
        assert not _cluster_drifted(dep, backend, obj, workloads)

    def test_a_new_spec_keeps_the_enforced_policy_and_the_route(self, world, cluster_api, gateway):
        """The new generation's stray sweep (other backends) must not delete the policy the serving
        backend shares by name: that would re-create it unenforced and park the route."""
        dep = approved(world, max_replicas=1)
        run(dep)
        ready_rayservice(cluster_api, dep)
        policy_status(cluster_api, "alpha", dep.resource_name)
        run(dep)
        uid = cluster_api.get_object(k8s.AUTHPOLICY, dep.resource_name, "alpha")["metadata"]["uid"]
        dep = services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data={"max_model_len": 4096})
        services.deployment_approve(
            deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
        )
        run(dep)
        assert cluster_api.get_object(k8s.AUTHPOLICY, dep.resource_name, "alpha")["metadata"]["uid"] == uid
        assert routed(cluster_api, dep)
