"""A permission matrix over every API endpoint, listed from the URL patterns so a new one cannot
be forgotten (each role's exact status), and tenant isolation of the lists."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import URLResolver

from catalog.models import CatalogModel
from portal.api import token_create
from quotas.models import PriorityTier, QuotaChangeRequest, TenantQuota
from tests.reliability.objects import (
    alpha_audit,
    alpha_quota,
    flavor_body,
    fresh_beta_offer,
    fresh_dep,
    fresh_flavor,
    fresh_key,
    fresh_person,
    fresh_publication,
    fresh_quota_request,
    fresh_subscription,
    names,
)
from tests.support.factories import draft as model_draft
from tests.support.world import ROLES, check_matrix


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()  # a matrix writes fast: throttle histories live in the cache
    yield
    cache.clear()


def expect(anonymous=401, viewer=200, member=200, tenant_admin=200, platform_admin=200, other_member=404):
    return dict(
        anonymous=anonymous,
        viewer=viewer,
        member=member,
        tenant_admin=tenant_admin,
        platform_admin=platform_admin,
        other_member=other_member,
    )


READ_ALL = expect(other_member=200)  # lists and global reads: filtered, never refused
ALPHA_READ = expect()  # an alpha object: 404 for the other tenant
MEMBER_WRITE = expect(viewer=403)
ADMIN_ONLY = expect(viewer=403, member=403, tenant_admin=403)
NO_PORTAL_CREDENTIALS = expect(viewer=401, member=401, tenant_admin=401, platform_admin=401, other_member=401)
NO_SUCH_ORPHAN = {"backend": "kuberay", "namespace": "alpha", "name": "x"}

D = "/api/v1/deployments"
CAT = "/api/v1/catalog/models/"


def _active(world):
    from sharing.services import approve

    return approve(user=world.users["platform_admin"], subscription_id=fresh_subscription(world).pk)


def fresh_catalog_model() -> CatalogModel:
    return CatalogModel.objects.create(name=f"cat{next(names)}", display_name="Cat", source="org/cat", revision="main")


def fresh_tier() -> PriorityTier:
    return PriorityTier.objects.create(name=f"tier-{next(names)}", display_name="Tier", value=10)


TIERS = "/api/v1/priority-tiers/"
TIER_ADMIN = expect(viewer=403, member=403, tenant_admin=403, other_member=403)


# (route name, method) → (call(world, client), expected status per role)
MATRIX = {
    ("api-me", "get"): (lambda w, c: c.get("/api/v1/me/"), READ_ALL),
    ("quota-preview", "get"): (
        lambda w, c: c.get("/api/v1/quota-preview/", {"tenant": "alpha", "flavor": "h100-sxm5", "gpus": 1}),
        ALPHA_READ,
    ),
    ("serving-profiles", "get"): (
        lambda w, c: c.get(
            "/api/v1/serving-profiles/", {"tenant": "alpha", "flavor": "h100-sxm5", "model_source": "org/model"}
        ),
        ALPHA_READ,
    ),
    ("cluster-readiness", "get"): (
        lambda w, c: c.get("/api/v1/cluster/readiness/"),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    ("cluster-sweep", "get"): (
        lambda w, c: c.get("/api/v1/cluster/sweep/"),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    # Nothing was swept in this world: an admin's valid request names no known orphan (404).
    ("cluster-orphan-delete", "post"): (
        lambda w, c: c.post(
            "/api/v1/cluster/orphans/delete/", {"backend": "kuberay", "namespace": "alpha", "name": "x"}
        ),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403, platform_admin=404),
    ),
    ("cluster-usage", "get"): (
        lambda w, c: c.get("/api/v1/cluster/usage/"),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    # Usage and budgets: everyone reads their own tenants' figures; another tenant's is a 404.
    ("usage-report", "get"): (lambda w, c: c.get("/api/v1/usage/", {"tenant": "alpha"}), ALPHA_READ),
    ("usage-csv", "get"): (lambda w, c: c.get("/api/v1/usage/csv/", {"tenant": "alpha"}), ALPHA_READ),
    ("usage-budgets", "get"): (lambda w, c: c.get("/api/v1/usage/budgets/", {"tenant": "alpha"}), ALPHA_READ),
    ("token-list", "get"): (lambda w, c: c.get("/api/v1/tokens/"), READ_ALL),
    ("token-list", "post"): (
        lambda w, c: c.post("/api/v1/tokens/", {"name": "ci"}),
        expect(viewer=201, member=201, tenant_admin=201, platform_admin=201, other_member=201),
    ),
    # A member's token: only its owner sees (and revokes) it.
    ("token-detail", "delete"): (
        lambda w, c: c.delete(f"/api/v1/tokens/{token_create(user=w.users['member'], name='x')[0].token_key}/"),
        expect(viewer=404, member=204, tenant_admin=404, platform_admin=404),
    ),
    ("tenant-list", "get"): (lambda w, c: c.get("/api/v1/tenants/"), READ_ALL),
    ("tenant-detail", "get"): (lambda w, c: c.get("/api/v1/tenants/alpha/"), ALPHA_READ),
    ("tenant-members", "get"): (lambda w, c: c.get("/api/v1/tenants/alpha/members/"), expect(viewer=403, member=403)),
    # Platform administration (portal/platform_api.py): platform admins run tenants; tenant admins
    # manage their own tenant's members only.
    ("tenant-list", "post"): (
        lambda w, c: c.post("/api/v1/tenants/", {"slug": f"t{next(names)}", "display_name": "T"}),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=403),
    ),
    ("tenant-detail", "patch"): (
        lambda w, c: c.patch("/api/v1/tenants/alpha/", {"display_name": "Alpha"}),
        expect(viewer=403, member=403, tenant_admin=403),
    ),
    ("tenant-policy", "get"): (lambda w, c: c.get("/api/v1/tenants/alpha/policy/"), ALPHA_READ),
    # Tenant storage (platform admins set it) and write-only credentials (tenant and platform admins).
    # No cluster is configured in this world: an allowed credential write has nowhere to go and
    # says so (503; tests/quotas/test_tenant_secrets.py writes them to the API test server).
    ("tenant-storage", "get"): (lambda w, c: c.get("/api/v1/tenants/alpha/storage/"), ALPHA_READ),
    ("tenant-storage", "put"): (
        lambda w, c: c.put(
            "/api/v1/tenants/alpha/storage/",
            {"model_cache_size_gi": 300, "model_cache_storage_class": ""},
            format="json",
        ),
        ADMIN_ONLY,
    ),
    ("tenant-credentials", "get"): (lambda w, c: c.get("/api/v1/tenants/alpha/credentials/"), ALPHA_READ),
    ("tenant-credential-hf", "put"): (
        lambda w, c: c.put(
            "/api/v1/tenants/alpha/credentials/hf_token/", {"token": "hf_matrixtoken1234"}, format="json"
        ),
        expect(viewer=403, member=403, tenant_admin=503, platform_admin=503),
    ),
    ("tenant-credential-hf", "delete"): (
        lambda w, c: c.delete("/api/v1/tenants/alpha/credentials/hf_token/"),
        expect(viewer=403, member=403, tenant_admin=204, platform_admin=204),
    ),
    ("tenant-credential-s3", "put"): (
        lambda w, c: c.put(
            "/api/v1/tenants/alpha/credentials/s3/",
            {"access_key_id": "AKIAMATRIX000001", "secret_access_key": "s" * 40},
            format="json",
        ),
        expect(viewer=403, member=403, tenant_admin=503, platform_admin=503),
    ),
    ("tenant-credential-s3", "delete"): (
        lambda w, c: c.delete("/api/v1/tenants/alpha/credentials/s3/"),
        expect(viewer=403, member=403, tenant_admin=204, platform_admin=204),
    ),
    ("tenant-policy", "put"): (
        lambda w, c: c.put(
            "/api/v1/tenants/alpha/policy/",
            {"auto_approve_max_gpus": 1, "max_gpus_per_deployment": 0, "allowed_flavors": []},
            format="json",
        ),
        expect(viewer=403, member=403, tenant_admin=403),
    ),
    ("tenant-archive", "post"): (
        lambda w, c: c.post("/api/v1/tenants/alpha/archive/", {"confirm": "alpha", "reason": "matrix"}),
        expect(viewer=403, member=403, tenant_admin=403),
    ),
    ("tenant-members", "post"): (
        lambda w, c: c.post("/api/v1/tenants/alpha/members/", {"user": fresh_person().username, "role": "viewer"}),
        expect(viewer=403, member=403, tenant_admin=201, platform_admin=201),
    ),
    ("tenant-member", "patch"): (
        lambda w, c: c.patch("/api/v1/tenants/alpha/members/alpha-viewer/", {"role": "viewer"}),
        expect(viewer=403, member=403),
    ),
    ("tenant-member", "delete"): (
        lambda w, c: c.delete(f"/api/v1/tenants/alpha/members/{fresh_person(w.alpha).username}/"),
        expect(viewer=403, member=403, tenant_admin=204, platform_admin=204),
    ),
    ("audit-list", "get"): (lambda w, c: c.get("/api/v1/audit/"), READ_ALL),
    # Tenant admins read their tenant's audit log; viewers and members do not.
    ("audit-detail", "get"): (
        lambda w, c: c.get(f"/api/v1/audit/{alpha_audit(w).pk}/"),
        expect(viewer=404, member=404),
    ),
    # The audit export (JSON lines, CSV): platform admins only, whatever tenant one belongs to.
    ("audit-export-jsonl", "get"): (
        lambda w, c: c.get("/api/v1/audit/export/jsonl/", {"since": "2026-01-01"}),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    ("audit-export-csv", "get"): (
        lambda w, c: c.get("/api/v1/audit/export/csv/", {"until": "2999-01-01T00:00:00Z"}),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    ("invitations", "post"): (
        lambda w, c: c.post("/api/v1/invitations/", {"username": f"invitee-{next(names)}", "email": "i@example.org"}),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=403),
    ),
    ("flavor-list", "get"): (lambda w, c: c.get("/api/v1/flavors/"), READ_ALL),
    ("flavor-list", "post"): (
        lambda w, c: c.post("/api/v1/flavors/", flavor_body(f"new-{next(names)}")),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=403),
    ),
    ("flavor-detail", "get"): (lambda w, c: c.get("/api/v1/flavors/a100-pcie/"), READ_ALL),
    ("flavor-detail", "put"): (
        lambda w, c: (f := fresh_flavor()) and c.put(f"/api/v1/flavors/{f.name}/", flavor_body(f.name)),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    ("flavor-detail", "patch"): (
        lambda w, c: c.patch(f"/api/v1/flavors/{fresh_flavor().name}/", {"price_per_gpu_hour": "0.90"}),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    ("flavor-detail", "delete"): (
        lambda w, c: c.delete(f"/api/v1/flavors/{fresh_flavor().name}/"),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=204, other_member=403),
    ),
    # Priority tiers (issue 35): every signed-in user reads them (a request names one); platform admins write.
    ("priority-tier-list", "get"): (lambda w, c: c.get(TIERS), READ_ALL),
    ("priority-tier-list", "post"): (
        lambda w, c: c.post(TIERS, {"name": f"tier-{next(names)}", "display_name": "T", "value": 5}),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=403),
    ),
    ("priority-tier-detail", "get"): (lambda w, c: c.get(f"{TIERS}{fresh_tier().name}/"), READ_ALL),
    ("priority-tier-detail", "put"): (
        lambda w, c: (
            (t := fresh_tier()) and c.put(f"{TIERS}{t.name}/", {"name": t.name, "display_name": "T", "value": 7})
        ),
        TIER_ADMIN,
    ),
    ("priority-tier-detail", "patch"): (lambda w, c: c.patch(f"{TIERS}{fresh_tier().name}/", {"value": 8}), TIER_ADMIN),
    ("priority-tier-detail", "delete"): (
        lambda w, c: c.delete(f"{TIERS}{fresh_tier().name}/"),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=204, other_member=403),
    ),
    ("quota-list", "get"): (lambda w, c: c.get("/api/v1/quotas/"), READ_ALL),
    ("quota-detail", "get"): (lambda w, c: c.get(f"/api/v1/quotas/{alpha_quota(w).pk}/"), ALPHA_READ),
    # Another tenant's slug is "does not exist" (400), like an unknown one.
    ("quota-list", "post"): (
        lambda w, c: c.post("/api/v1/quotas/", {"tenant": "alpha", "flavor": "a100-pcie", "nominal_gpus": 6}),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=400),
    ),
    ("quota-set-values", "post"): (
        lambda w, c: c.post(
            f"/api/v1/quotas/{alpha_quota(w).pk}/set/",
            {"nominal_gpus": 1000, "borrowing_limit_gpus": 4, "reason": "matrix"},
        ),
        ADMIN_ONLY,
    ),
    ("quota-request-list", "get"): (lambda w, c: c.get("/api/v1/quota-requests/"), READ_ALL),
    # Another tenant's slug is "does not exist" (400), like an unknown one.
    ("quota-request-list", "post"): (
        lambda w, c: (
            fresh_quota_request(w)
            and QuotaChangeRequest.objects.update(status="rejected") >= 0
            and c.post(
                "/api/v1/quota-requests/",
                {"tenant": "alpha", "flavor": "a100-pcie", "nominal_gpus": 6, "justification": "matrix"},
            )
        ),
        expect(viewer=403, member=403, tenant_admin=201, platform_admin=201, other_member=400),
    ),
    ("quota-request-detail", "get"): (
        lambda w, c: c.get(f"/api/v1/quota-requests/{fresh_quota_request(w).pk}/"),
        ALPHA_READ,
    ),
    ("quota-request-approve", "post"): (
        lambda w, c: c.post(f"/api/v1/quota-requests/{fresh_quota_request(w).pk}/approve/", {"comment": "ok"}),
        ADMIN_ONLY,
    ),
    ("quota-request-reject", "post"): (
        lambda w, c: c.post(f"/api/v1/quota-requests/{fresh_quota_request(w).pk}/reject/", {"comment": "no"}),
        ADMIN_ONLY,
    ),
    ("deployment-list", "get"): (lambda w, c: c.get(f"{D}/"), READ_ALL),
    ("deployment-list", "post"): (
        lambda w, c: c.post(
            f"{D}/",
            {**model_draft(w, name=f"n{next(names)}", max_replicas=1), "flavor": "h100-sxm5", "tenant": "alpha"},
        ),
        expect(viewer=403, member=201, tenant_admin=201, platform_admin=201, other_member=400),
    ),
    ("deployment-preview", "post"): (
        lambda w, c: c.post(
            f"{D}/preview/", {**model_draft(w, max_replicas=1), "flavor": "h100-sxm5", "tenant": "alpha"}
        ),
        expect(other_member=400),
    ),
    ("deployment-detail", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/"), ALPHA_READ),
    ("deployment-detail", "patch"): (
        lambda w, c: c.patch(f"{D}/{fresh_dep(w).pk}/", {"max_model_len": 4096}),
        MEMBER_WRITE,
    ),
    ("deployment-detail", "delete"): (
        lambda w, c: c.delete(f"{D}/{fresh_dep(w).pk}/"),
        expect(viewer=403, member=202, tenant_admin=202, platform_admin=202),
    ),
    ("deployment-advice", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/advice/"), ALPHA_READ),
    ("deployment-events", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/events/"), ALPHA_READ),
    ("deployment-timeline", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/timeline/?refresh=true"), ALPHA_READ),
    ("deployment-phases", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/phases/"), ALPHA_READ),
    # Engine logs: tenant members only (Action.LOGS), not viewers nor platform admins.
    ("deployment-logs", "get"): (
        lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/logs/"),
        expect(viewer=403, platform_admin=403),
    ),
    ("deployment-rendered-manifest", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/manifest/"), ALPHA_READ),
    # Anyone who sees the deployment may try it (as on the page); this one has no endpoint yet: 409.
    ("deployment-try-prompt", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w).pk}/try/", {"prompt": "hi"}),
        expect(viewer=409, member=409, tenant_admin=409, platform_admin=409),
    ),
    ("deployment-metrics", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/metrics/"), ALPHA_READ),
    ("deployment-summary", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/summary/"), ALPHA_READ),
    ("deployment-objectives", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/objectives/"), ALPHA_READ),
    ("deployment-objectives", "put"): (
        lambda w, c: c.put(
            f"{D}/{fresh_dep(w).pk}/objectives/",
            {"ttft_p95_objective_s": 1.0, "waiting_floor": 2, "kv_cache_floor_pct": 90, "breach_share_pct": 10},
        ),
        MEMBER_WRITE,
    ),
    ("deployment-objectives", "patch"): (
        lambda w, c: c.patch(f"{D}/{fresh_dep(w).pk}/objectives/", {"ttft_p95_objective_s": 0.5}),
        MEMBER_WRITE,
    ),
    ("deployment-approve", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w).pk}/approve/", {"revision": 1}),
        ADMIN_ONLY,
    ),
    ("deployment-reject", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w).pk}/reject/", {"revision": 1, "reason": "no"}),
        ADMIN_ONLY,
    ),
    ("deployment-withdraw", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w, 'changed').pk}/withdraw/", {"revision": 2}),
        MEMBER_WRITE,
    ),
    # Revisions: history, one, a diff; the decisions on one revision.
    ("api-deployment-revisions", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/revisions/"), ALPHA_READ),
    ("api-deployment-revision", "get"): (lambda w, c: c.get(f"{D}/{fresh_dep(w).pk}/revisions/1/"), ALPHA_READ),
    ("api-deployment-revision-diff", "get"): (
        lambda w, c: c.get(f"{D}/{fresh_dep(w, 'changed').pk}/revisions/diff/?from=1&to=2"),
        ALPHA_READ,
    ),
    ("api-deployment-revision-approve", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w, 'changed').pk}/revisions/2/approve/"),
        ADMIN_ONLY,
    ),
    ("api-deployment-revision-reject", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w, 'changed').pk}/revisions/2/reject/", {"reason": "no"}),
        ADMIN_ONLY,
    ),
    ("api-deployment-revision-withdraw", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w, 'changed').pk}/revisions/2/withdraw/"),
        MEMBER_WRITE,
    ),
    # The tenant endpoint's /v1/models takes an API key, never a portal session or token: every
    # role's portal credentials are refused (tests/access/test_gateway_models.py has the keys).
    ("gateway-models", "get"): (lambda w, c: c.get("/api/v1/gateway/alpha/models"), NO_PORTAL_CREDENTIALS),
    ("tenant-endpoints", "get"): (lambda w, c: c.get("/api/v1/tenant-endpoints/"), READ_ALL),
    # The activator's wake call (issue 35) takes the client's API key only, the same way
    # (tests/access/test_wake_api.py has the keys): a stopped deployment stays stopped.
    ("gateway-wake", "post"): (
        lambda w, c: c.post(f"/api/v1/gateway/wake/{fresh_dep(w, 'stopped').pk}"),
        NO_PORTAL_CREDENTIALS,
    ),
    ("gateway-model", "get"): (
        lambda w, c: c.get(f"/api/v1/gateway/alpha/models/{fresh_dep(w, 'approved').served_model_name}"),
        NO_PORTAL_CREDENTIALS,
    ),
    ("api-deployment-revision-rollback", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w, 'renamed').pk}/revisions/1/rollback/"),
        MEMBER_WRITE,
    ),
    ("deployment-cancel", "post"): (lambda w, c: c.post(f"{D}/{fresh_dep(w).pk}/cancel/"), MEMBER_WRITE),
    ("deployment-stop", "post"): (lambda w, c: c.post(f"{D}/{fresh_dep(w, 'approved').pk}/stop/"), MEMBER_WRITE),
    ("deployment-start", "post"): (lambda w, c: c.post(f"{D}/{fresh_dep(w, 'stopped').pk}/start/"), MEMBER_WRITE),
    ("deployment-scale", "post"): (
        lambda w, c: c.post(f"{D}/{fresh_dep(w).pk}/scale/", {"min_replicas": 1, "max_replicas": 2}),
        MEMBER_WRITE,
    ),
    # API keys (access): viewers list names and dates; members mint for their tenant and revoke
    # their own (a member's key here); tenant admins any of the tenant's.
    ("apikey-list", "get"): (lambda w, c: c.get("/api/v1/keys/"), READ_ALL),
    ("apikey-list", "post"): (
        lambda w, c: c.post("/api/v1/keys/", {"tenant": "alpha", "name": "matrix"}),
        expect(viewer=403, member=201, tenant_admin=201, platform_admin=201),
    ),
    ("apikey-detail", "get"): (lambda w, c: c.get(f"/api/v1/keys/{fresh_key(w).pk}/"), ALPHA_READ),
    ("apikey-revoke", "post"): (lambda w, c: c.post(f"/api/v1/keys/{fresh_key(w).pk}/revoke/"), MEMBER_WRITE),
    # Shared models (issue 34): alpha's side acts on its publications and the subscriptions to them
    # (tenant admins), beta's on its own subscriptions; members and viewers read (sharing.permissions).
    ("publication-list", "get"): (lambda w, c: c.get("/api/v1/publications/"), READ_ALL),
    ("publication-list", "post"): (
        lambda w, c: c.post(
            "/api/v1/publications/", {"deployment": fresh_dep(w, "approved").pk, "tenants": ["beta"]}, format="json"
        ),
        expect(viewer=403, member=403, other_member=400),
    ),
    ("publication-detail", "get"): (
        lambda w, c: c.get(f"/api/v1/publications/{fresh_publication(w).pk}/"),
        READ_ALL,  # offered to beta: its member reads it
    ),
    ("publication-unpublish", "post"): (
        lambda w, c: c.post(f"/api/v1/publications/{fresh_publication(w).pk}/unpublish/"),
        expect(viewer=403, member=403, other_member=403),
    ),
    ("subscription-list", "get"): (lambda w, c: c.get("/api/v1/subscriptions/"), READ_ALL),
    ("subscription-list", "post"): (
        lambda w, c: c.post(
            "/api/v1/subscriptions/", {"tenant": "alpha", "deployment": fresh_beta_offer(w)}, format="json"
        ),
        expect(viewer=403, member=403, tenant_admin=201, platform_admin=201, other_member=400),
    ),
    ("subscription-detail", "get"): (
        lambda w, c: c.get(f"/api/v1/subscriptions/{fresh_subscription(w).pk}/"),
        READ_ALL,
    ),
    **{
        ("subscription-" + verb, "post"): (
            lambda w, c, verb=verb: c.post(f"/api/v1/subscriptions/{fresh_subscription(w).pk}/{verb}/"),
            expect(viewer=403, member=403, other_member=403),
        )
        for verb in ("approve", "refuse", "limits")
    },
    # Ending needs an active subscription; cancelling is the consumer's (beta's admin), not alpha's.
    ("subscription-end", "post"): (
        lambda w, c: c.post(f"/api/v1/subscriptions/{_active(w).pk}/end/"),
        expect(viewer=403, member=403, other_member=403),
    ),
    ("subscription-cancel", "post"): (
        lambda w, c: c.post(f"/api/v1/subscriptions/{fresh_subscription(w).pk}/cancel/"),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    # The model catalog (issue 33): every signed-in user reads the active rows; platform admins write.
    ("catalog-model-list", "get"): (lambda w, c: c.get(CAT), READ_ALL),
    ("catalog-model-list", "post"): (
        lambda w, c: c.post(
            CAT, {"name": f"m{next(names)}", "display_name": "M", "source": "org/m", "revision": "main"}
        ),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=403),
    ),
    ("catalog-model-detail", "get"): (lambda w, c: c.get(f"{CAT}{fresh_catalog_model().name}/"), READ_ALL),
    ("catalog-model-detail", "patch"): (
        lambda w, c: c.patch(f"{CAT}{fresh_catalog_model().name}/", {"licence": "mit"}),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    ("catalog-model-deactivate", "post"): (
        lambda w, c: c.post(f"{CAT}{fresh_catalog_model().name}/deactivate/"),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    # A hub model's facts come from a local copy only: an admin without a path gets the 400 saying so.
    ("catalog-model-import-facts", "post"): (
        lambda w, c: c.post(f"{CAT}{fresh_catalog_model().name}/import-facts/"),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=400, other_member=403),
    ),
}


def api_endpoints() -> set[tuple[str, str]]:
    """(route name, HTTP method) of every API endpoint, read from the URL patterns themselves."""
    from portal import api_urls

    found: set[tuple[str, str]] = set()

    def walk(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
                continue
            if pattern.name == "api-root" or "format" in pattern.pattern.regex.groupindex:
                continue  # the browsable root and `.json` suffix twins of the same views
            cls = getattr(pattern.callback, "cls", None)
            allowed = {m.lower() for m in getattr(cls, "http_method_names", ())}
            actions = getattr(pattern.callback, "actions", None)
            # HEAD mirrors GET (DRF even adds it to `actions` after the first request): not listed.
            verbs = {"get", "post", "put", "patch", "delete"}
            methods = set(actions) & verbs if actions else {m for m in verbs if hasattr(cls, m)}
            found.update((pattern.name, m) for m in methods & allowed)

    walk(api_urls.urlpatterns)
    return found


class TestPermissionMatrix:
    def test_every_endpoint_has_a_row(self):
        endpoints = api_endpoints()
        assert len(endpoints) >= 40
        assert endpoints - set(MATRIX) == set(), "new endpoint(s) without a permission-matrix row"
        assert set(MATRIX) - endpoints == set(), "matrix rows for endpoints that no longer exist"

    @pytest.mark.parametrize("endpoint", sorted(MATRIX), ids=lambda e: f"{e[1].upper()} {e[0]}")
    def test_roles(self, world, endpoint):
        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(nominal_gpus=1000)
        call, expected = MATRIX[endpoint]
        assert set(expected) == set(ROLES)
        check_matrix(world, lambda client: call(world, client), expected)


class TestTenantIsolation:
    def test_lists_never_show_another_tenants_objects(self, world):
        fresh_dep(world)
        fresh_quota_request(world)
        other = world.client("other_member")
        for path in (
            "/api/v1/deployments/",
            "/api/v1/quotas/",
            "/api/v1/quota-requests/",
            "/api/v1/tenants/",
            "/api/v1/audit/",
        ):
            body = other.get(path).json()
            rows = body["results"] if isinstance(body, dict) else body
            assert all(row.get("tenant") in (None, "beta") and row.get("slug") in (None, "beta") for row in rows), path
        assert other.get("/api/v1/deployments/", {"tenant": "alpha"}).json()["count"] == 0
