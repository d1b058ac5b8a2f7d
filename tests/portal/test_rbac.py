"""Least privilege, derived from the code: record every Kubernetes API call the runtime makes in
its scenarios (kuberay and kserve lifecycles, updates, recreation, sweep, Kueue sync with the
model-cache claims, the tenant's credential Secrets) and check
the portal's ClusterRole grants exactly those (resource, verb) pairs — no more, no less."""

from dataclasses import replace

from django.test import override_settings

from deployments import operating, services
from deployments.reconcile import last_orphans, orphan_delete, reconcile, sweep
from metrics.collect import collect_all
from quotas import flavors
from quotas.kueue import sync_kueue
from quotas.models import GpuFlavor
from quotas.specs import flavor_spec
from runtime.k8s.kinds import TOPOLOGY
from runtime.manifests.topology import render_topology
from tests.support import chart, operators
from tests.support.factories import draft
from tests.support.k8s.startup import put_pod

METHOD_VERB = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def verb_and_resource(method: str, path: str) -> tuple[str, str, str]:
    """('get'|'list'|…, apiGroup, resource) for one request path."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":  # core group: /api/v1/namespaces[/name]
        group, rest = "", parts[2:]
    else:  # /apis/<group>/<version>/...
        group, rest = parts[1], parts[3:]
    if rest and rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]  # namespaced: drop "namespaces/<ns>"
    resource, named = rest[0], len(rest) >= 2
    if len(rest) >= 3:  # a subresource: status, or the visibility API's pendingworkloads
        resource += "/" + rest[2]
    verb = METHOD_VERB.get(method) or ("get" if named else "list")
    return verb, group, resource


def with_apply_creates(used: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """The runtime writes with server-side apply (PATCH), which creates a missing object; the API
    server then authorizes it as `create` too (kubernetes/kubernetes staging/src/k8s.io/apiserver/
    pkg/endpoints/handlers/patch.go, createAuthorizerAttributes). The emulator creates on apply as
    the API server does, so no separate create request is seen: count it here. RayClusters are
    only merge-patched (runtime.backends.kuberay `_resize`), which creates nothing."""
    merged_only = {("ray.io", "rayclusters")}
    return used | {
        ("create", group, resource)
        for verb, group, resource in used
        if verb == "patch" and (group, resource) not in merged_only
    }


def granted() -> set[tuple[str, str, str]]:
    """What the ClusterRole of the Helm chart (charts/llm-portal, `helm template` with its
    defaults) grants the portal's ServiceAccount."""
    chart.require_helm()
    pairs = chart.rules_of(chart.portal_cluster_role())
    assert not any("*" in triple for triple in pairs)
    return pairs


def provision_and_retire_a_pool(world, api) -> None:
    """Node provisioning: a pool, node class and topology applied (the topology on another flavor:
    a flavor has one or the other), then the pool cleared (both deleted), and the Topology of a
    flavor that is gone deleted."""
    admin = world.users["platform_admin"]
    with override_settings(
        KARPENTER_NODE_ROLE="role",
        KARPENTER_SUBNET_TAGS={"k": "v"},
        KARPENTER_SECURITY_GROUP_TAGS={"k": "v"},
        KARPENTER_AMI_ALIAS="al2023@v20240807",
    ):
        flavors.flavor_save(actor=admin, name="h100-sxm5", values={"provisioning": {"capacity_types": ["spot"]}})
        values = {"node_labels": {"cloud.example.com/gpu": "a100"}, "topology_levels": ["kubernetes.io/hostname"]}
        flavors.flavor_save(actor=admin, name="a100-pcie", values=values)
        sync_kueue()
        stale = render_topology(
            replace(flavor_spec(world.h100), name="gone", topology_levels=("kubernetes.io/hostname",))
        )
        api.emulator.objects[TOPOLOGY.key, None, "gone"] = stale
        flavors.flavor_save(actor=admin, name="h100-sxm5", values={"provisioning": {}})
        sync_kueue()


def keep_priority_classes() -> None:
    """Priority tiers (quotas.kueue.sync_priority_classes): a tier's WorkloadPriorityClass applied,
    changed, and deleted once the tier is gone (found by the portal's label)."""
    from quotas.models import PriorityTier

    tier = PriorityTier.objects.create(name="rbac", display_name="RBAC", value=5)
    sync_kueue()
    PriorityTier.objects.filter(pk=tier.pk).update(value=6)
    sync_kueue()
    tier.delete()
    sync_kueue()


def exercise(world, api) -> None:
    sync_kueue()
    keep_priority_classes()
    provision_and_retire_a_pool(world, api)
    member, admin = world.users["member"], world.users["platform_admin"]
    for backend in ("kuberay", "kserve"):
        dep = services.deployment_create(
            tenant=world.alpha, user=member, data=draft(world, name=f"rbac-{backend}", backend=backend, max_replicas=1)
        )
        services.deployment_approve(deployment_id=dep.pk, revision=dep.proposed_number, approver=admin)
        for step in range(4):
            dep.refresh_from_db()
            reconcile(dep)
            if step == 0 and backend == "kuberay":
                obj = api.get_object(__import__("runtime.k8s").k8s.RAYSERVICE, dep.resource_name, "alpha")
                operators.workload_for(api, obj, {"QuotaReserved": True, "Admitted": True})
                operators.raycluster_serving(api, "alpha", dep.resource_name)
            if step == 1:  # a serve-config and worker-count change: applied on the running cluster
                data = {"max_model_len": 4096, **({"max_replicas": 2} if backend == "kuberay" else {})}
                dep = services.deployment_update(deployment_id=dep.pk, user=member, data=data)
                services.deployment_approve(deployment_id=dep.pk, revision=dep.proposed_number, approver=admin)
            if step == 2 and backend == "kuberay":  # a cluster change: the RayService is recreated
                dep = services.deployment_update(deployment_id=dep.pk, user=member, data={"tensor_parallel_size": 2})
                services.deployment_approve(deployment_id=dep.pk, revision=dep.proposed_number, approver=admin)
        # Operating visibility: the timeline's live Events read and the engine log tails.
        put_pod(api, "alpha", f"{dep.resource_name}-worker", dep.pk)
        operating.timeline(dep, refresh=True)
        assert operating.logs(dep, member)["tails"]
        sweep()
        if backend == "kuberay":  # the metrics cycle lists the Ray pods (no PROMETHEUS_URL here)
            type(dep).objects.filter(pk=dep.pk).update(state="ready")
            collect_all()
        services.deployment_delete(deployment_id=dep.pk, user=member)
        for _ in range(2):
            dep.refresh_from_db()
            reconcile(dep)
    # An admin deletes what the sweep found orphaned: a RayService, and a Workload whose job is gone
    # (the test server has no garbage collector, so the deleted RayService's Workload stays).
    sweep()
    for orphan in last_orphans():
        orphan_delete(actor=admin, backend=orphan["backend"], namespace=orphan["namespace"], name=orphan["name"])


def expose_and_use_keys(world, settings, tmp_path, monkeypatch) -> None:
    """Endpoint access on: every deployment gets a route and all three Kuadrant policies (the
    tenant sets both limits), and a key is minted and revoked (its Secret written and deleted)."""
    from portal.celery import app
    from quotas.models import Tenant

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    settings.GATEWAY_PUBLIC_URL = "https://llm.example.com"
    settings.API_KEY_NAMESPACE = "kuadrant-system"
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
    Tenant.objects.filter(pk=world.alpha.pk).update(tokens_per_minute=1000, requests_per_minute=60)


def mint_and_revoke_a_key(world, on_commit) -> None:
    from access.services import key_mint, key_revoke

    with on_commit(execute=True):
        key, _ = key_mint(user=world.users["member"], tenant=world.alpha, name="rbac")
    with on_commit(execute=True):
        key_revoke(user=world.users["member"], key_id=key.pk)


def keep_storage_and_credentials(world, api, settings) -> None:
    """Tenant storage and credentials: the model-cache claim (created by the first sync in
    `exercise`) grown, and the tenant's Hugging Face token and S3 credentials set, rotated and
    deleted by a tenant admin (quotas.model_cache, quotas.tenant_secrets)."""
    from quotas import tenant_secrets
    from quotas.models import Tenant
    from runtime import k8s

    bound = {"status": {"phase": "Bound"}}  # the volume controller's part: only a bound claim grows
    api.patch_object(k8s.PVC, settings.MODEL_CACHE_PVC, "alpha", bound, status_only=True)
    Tenant.objects.filter(pk=world.alpha.pk).update(model_cache_size_gi=settings.MODEL_CACHE_SIZE_GI + 100)
    sync_kueue(tenant_id=world.alpha.pk)
    admin = world.users["tenant_admin"]
    values = {
        "hf_token": ({"token": "hf_" + "a" * 34}, {"token": "hf_" + "b" * 34}),
        "s3": tuple({"access_key_id": f"AKIA{n}EXAMPLE", "secret_access_key": f"secret-{n}-key"} for n in (1, 2)),
    }
    for kind, (first, second) in values.items():
        tenant_secrets.secret_set(tenant=world.alpha, user=admin, kind=kind, data=first)
        tenant_secrets.secret_set(tenant=world.alpha, user=admin, kind=kind, data=second)
        assert tenant_secrets.secret_delete(tenant=world.alpha, user=admin, kind=kind)


def key_namespace_rules() -> set[tuple[str, str, str]]:
    """The Role the chart renders in the key namespace once endpoint access is on."""
    chart.require_helm()
    (role,) = [d for d in chart.api_keys_rbac("kuadrant-system") if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "kuadrant-system"
    return chart.rules_of(role)


def test_the_cluster_role_grants_exactly_what_the_runtime_calls(
    world, cluster_api, settings, tmp_path, monkeypatch, django_capture_on_commit_callbacks
):
    expose_and_use_keys(world, settings, tmp_path, monkeypatch)
    exercise(world, cluster_api)
    keep_storage_and_credentials(world, cluster_api, settings)
    mint_and_revoke_a_key(world, django_capture_on_commit_callbacks)
    from access.tenant_endpoint import apply_tenant_endpoint

    assert apply_tenant_endpoint(world.alpha) is not None  # the tenant endpoint: its objects listed by label
    requests = cluster_api.proxied_requests()
    secrets = {(m, p) for m, p in requests if p.startswith("/api/v1/namespaces/kuadrant-system/secrets")}
    # API-key Secrets: only in the key namespace, only what its Role grants (the chart's api-keys Role).
    # The tenant's credential Secrets: only in its namespace, only the portal's two names (the ClusterRole).
    tenant_secrets = {(m, p) for m, p in requests if "/secrets" in p} - secrets
    assert secrets and tenant_secrets
    assert {p.rsplit("/", 1)[-1] for _, p in tenant_secrets} <= {"llm-portal-hf-token", "llm-portal-s3", "secrets"}
    assert all(p.startswith("/api/v1/namespaces/alpha/secrets") for _, p in tenant_secrets)
    from runtime.k8s.permissions import KEYS

    used_on_secrets = with_apply_creates({verb_and_resource(m, p) for m, p in secrets})
    assert used_on_secrets == key_namespace_rules() == set(KEYS)
    # Discovery (the visibility API's version) is open to every identity: no grant.
    discovery = {(m, p) for m, p in requests if p.rstrip("/") == "/apis"}
    used = with_apply_creates(
        {verb_and_resource(method, path) for method, path in requests if (method, path) not in secrets | discovery}
    )
    assert ("create", "gateway.networking.k8s.io", "httproutes") in used
    assert ("delete", "kuadrant.io", "tokenratelimitpolicies") in used
    assert ("get", "kuadrant.io", "authpolicies") in used  # enforced yet? (the route waits for it)
    assert ("list", "kuadrant.io", "ratelimitpolicies") in used  # the tenant endpoint's leftovers
    assert ("create", "ray.io", "rayservices") in used and ("list", "kueue.x-k8s.io", "workloads") in used
    assert ("list", "", "pods") in used
    assert ("get", "visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads") in used
    assert ("delete", "kueue.x-k8s.io", "workloads") in used
    assert ("list", "", "events") in used and ("get", "", "pods/log") in used
    assert ("patch", "", "persistentvolumeclaims") in used and ("delete", "", "secrets") in used
    missing = used - granted()
    unused = granted() - used
    assert not missing, f"the runtime calls these but the ClusterRole does not grant them: {sorted(missing)}"
    assert not unused, f"the ClusterRole grants these but no runtime code path uses them: {sorted(unused)}"


def test_the_portal_permissions_constant_is_the_cluster_role(world, cluster_api):
    """runtime.k8s.permissions.PORTAL (what the readiness page asks the API server about) and the
    ClusterRole are one list."""
    from runtime.k8s.permissions import PORTAL

    assert set(PORTAL) == granted() and len(PORTAL) == len(set(PORTAL))


def test_the_readiness_checks_read_exactly_the_optional_grant(world, cluster_api, settings):
    """Beyond discovery, /version and access reviews (open to every identity) and its dry-run
    creates (Kueue's webhooks) and the model-cache claims (both under the runtime's own grants), the
    readiness page reads nodes, Kueue's ConfigMap and Deployment, two CRDs, ClusterQueues and ResourceFlavors,
    and (with a Gateway) AuthPolicies: exactly the rules of the chart's optional readiness grant
    (rbac.readiness.enabled)."""
    from portal.readiness import cluster_readiness
    from runtime.k8s.permissions import PORTAL, READINESS

    GpuFlavor.objects.filter(name="h100-sxm5").update(provisioning={"capacity_types": ["spot"]})  # a pool to read
    settings.GATEWAY_PUBLIC_URL = "https://llm.example.com"  # endpoint access: Kuadrant's policies read
    cluster_readiness()
    used = set()
    for method, path in cluster_api.proxied_requests():
        if path.rstrip("/") in ("/apis", "/version") or path.startswith("/apis/authorization.k8s.io/"):
            continue  # discovery root, the server's version, SelfSubjectAccessReview
        if method == "GET" and path.startswith("/apis/") and len([p for p in path.split("/") if p]) == 3:
            continue  # discovery of one group/version
        if verb_and_resource(method, path) in PORTAL:
            continue  # under the runtime's own grant: a dry-run create (dryRun=All), the model-cache claims
        used.add(verb_and_resource(method, path))
    chart.require_helm()
    rules = set()
    for doc in chart.readiness_rbac():
        if doc["kind"] in ("ClusterRole", "Role"):
            rules |= chart.rules_of(doc)
    assert used == rules == set(READINESS)
