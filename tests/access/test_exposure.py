"""A deployment's exposure on the Gateway, applied by the reconciler with its workload (real
`kubernetes` client against the API test server): route, AuthPolicy, limits from the tenant's
policy, the Try-it key; the external URL shown; all of it removed with the deployment."""

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
    assert tokens["spec"]["limits"]["tenant-tokens"]["rates"] == [{"limit": 20_000, "window": "1m"}]
    assert cluster_api.get_object(k8s.RATELIMITPOLICY, name, "alpha") is None  # 0 = no limit
    for obj in (route, auth, tokens):  # what the API server stored still validates
        assert_valid({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": name}})
    secret = cluster_api.get_object(k8s.SECRET, f"llm-portal-try-{dep.pk}", "kuadrant-system")
    assert secret["stringData"]["api_key"] == portal_key(settings.SECRET_KEY, dep.pk)

    if backend == "kuberay":
        obj = cluster_api.get_object(k8s.RAYSERVICE, name, "alpha")
        operators.workload_for(cluster_api, obj, {"QuotaReserved": True, "Admitted": True})
        operators.rayservice_ready(cluster_api, "alpha", name)
        run(dep)
        assert dep.state == State.READY
        assert dep.endpoint_url == f"https://llm.example.com/alpha/{name}/v1"

    # The tenant's policy changes: the sweep's hash sees drift and the next reconcile converges.
    Tenant.objects.filter(pk=world.alpha.pk).update(tokens_per_minute=0, requests_per_minute=120)
    run(dep)
    assert cluster_api.get_object(k8s.TOKENRATELIMITPOLICY, name, "alpha") is None
    limits = cluster_api.get_object(k8s.RATELIMITPOLICY, name, "alpha")["spec"]["limits"]
    assert limits["tenant-requests"]["rates"] == [{"limit": 120, "window": "1m"}]

    services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
    for _ in range(2):
        run(dep)
    for kind in (k8s.HTTPROUTE, k8s.AUTHPOLICY, k8s.RATELIMITPOLICY):
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
    obj = cluster_api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
    operators.workload_for(cluster_api, obj, {"QuotaReserved": True, "Admitted": True})
    operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
    run(dep)
    before = len(cluster_api.proxied_requests())
    run(dep)
    settled = cluster_api.proxied_requests()[before:]
    assert [method for method, _ in settled] == ["GET", "GET"], settled  # the RayService, its Workloads
    assert not any(word in path for _, path in settled for word in ("httproutes", "policies", "secrets"))
