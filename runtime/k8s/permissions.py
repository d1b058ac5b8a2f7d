"""The Kubernetes permissions the portal needs, as (verb, apiGroup, resource) triples. Pure.

`PORTAL` is what the runtime calls: the Helm chart's ClusterRole (charts/llm-portal) grants exactly these
(tests/portal/test_rbac.py records every call and compares all three). `READINESS` is what the
cluster readiness page reads besides (nodes per flavor, Kueue's configuration and Deployment, the
KubeRay and KServe CRDs for their versions, ClusterQueues and ResourceFlavors for quota against
capacity): an optional grant, the chart's rbac.readiness.enabled; without it those checks say they
cannot tell. Its dry-run probes (Kueue's webhooks) use the runtime's own create grants, and its
model-cache check the runtime's own get on claims. Discovery, /version and
SelfSubjectAccessReview need no grant (every authenticated identity has them through
system:discovery, system:public-info-viewer and system:basic-user).
"""

from __future__ import annotations

# What the runtime calls besides each backend's own kind (runtime.backends Traits.permissions).
COMMON: tuple[tuple[str, str, str], ...] = (
    *(
        (verb, "kueue.x-k8s.io", resource)
        for resource in ("clusterqueues", "localqueues", "resourceflavors", "cohorts")
        for verb in ("get", "create", "patch")
    ),
    ("list", "kueue.x-k8s.io", "workloads"),
    ("delete", "kueue.x-k8s.io", "workloads"),
    # Priority tiers (quotas.kueue): one WorkloadPriorityClass each, those of deleted tiers deleted.
    *((verb, "kueue.x-k8s.io", "workloadpriorityclasses") for verb in ("get", "list", "create", "patch", "delete")),
    ("get", "visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads"),
    *((verb, "", "namespaces") for verb in ("get", "create", "patch")),
    ("list", "", "pods"),
    ("list", "", "events"),
    ("get", "", "pods/log"),
    # Node provisioning and topology (quotas.nodepools): kept per flavor, stale ones deleted.
    *(
        (verb, group, resource)
        for group, resource in (
            ("kueue.x-k8s.io", "topologies"),
            ("karpenter.sh", "nodepools"),
            ("karpenter.k8s.aws", "ec2nodeclasses"),
        )
        for verb in ("get", "list", "create", "patch", "delete")
    ),
    # Endpoint access (runtime.backends.exposure): a route and Kuadrant policies per deployment.
    *((verb, "gateway.networking.k8s.io", "httproutes") for verb in ("create", "patch", "delete")),
    *(
        (verb, "kuadrant.io", resource)
        for resource in ("authpolicies", "tokenratelimitpolicies", "ratelimitpolicies")
        for verb in ("create", "patch", "delete")
    ),
    ("get", "kuadrant.io", "authpolicies"),  # enforced yet? the route stays parked until it is
    # Tenant endpoints (runtime.backends.tenant_exposure): found again by label across namespaces,
    # to delete what a tenant no longer routes.
    ("list", "gateway.networking.k8s.io", "httproutes"),
    *(
        ("list", "kuadrant.io", resource)
        for resource in ("authpolicies", "tokenratelimitpolicies", "ratelimitpolicies")
    ),
    # Tenant storage and credentials (quotas.model_cache, quotas.tenant_secrets): the model-cache
    # claim is read, created when absent and its size raised; the tenant's Hugging Face and S3
    # Secrets are written (apply), created and deleted, and never read or listed.
    *((verb, "", "persistentvolumeclaims") for verb in ("get", "create", "patch")),
    *((verb, "", "secrets") for verb in ("create", "patch", "delete")),
)

# API-key Secrets, in the key namespace only (API_KEY_NAMESPACE; the chart's api-keys Role):
# written on mint, deleted on revoke and expiry, never read back.


def portal(backends: list[str] | None = None) -> tuple[tuple[str, str, str], ...]:
    """The ClusterRole's grants: each registered backend's kind (default: every registered
    backend, what the shipped ClusterRole grants), then the common ones."""
    from runtime.backends import names, traits

    own = tuple(rule for name in (names() if backends is None else backends) for rule in traits(name).permissions())
    return (*own, *COMMON)


PORTAL: tuple[tuple[str, str, str], ...] = portal()


def cluster_role(name: str, backends: list[str] | None = None) -> dict:
    """The portal's ClusterRole (rbac.authorization.k8s.io/v1) granting exactly `portal(backends)`:
    one rule per API group and resource, verbs in the order first granted."""
    verbs: dict[tuple[str, str], list[str]] = {}
    for verb, group, resource in portal(backends):
        verbs.setdefault((group, resource), []).append(verb)
    rules = [{"apiGroups": [group], "resources": [resource], "verbs": v} for (group, resource), v in verbs.items()]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }


KEYS: tuple[tuple[str, str, str], ...] = tuple((verb, "", "secrets") for verb in ("create", "patch", "delete"))

READINESS: tuple[tuple[str, str, str], ...] = (
    ("list", "", "nodes"),
    ("get", "", "configmaps"),
    ("list", "karpenter.sh", "nodeclaims"),  # each pool's node claims still on their way
    ("get", "apps", "deployments"),  # Kueue's controller, in Kueue's namespace: its version
    ("get", "apiextensions.k8s.io", "customresourcedefinitions"),  # KubeRay's and KServe's versions
    ("list", "kueue.x-k8s.io", "clusterqueues"),  # GPU quota against node capacity
    ("list", "kueue.x-k8s.io", "resourceflavors"),
    # Kuadrant's policies (the Gateway's deny-all, the deployments' and the tenant endpoints'): listed
    # under the portal's own grant (COMMON), which the tenant endpoints need.
    ("list", "extensions.kuadrant.io", "telemetrypolicies"),  # the usage-per-key labels on the Gateway
)
