"""Security: a permission matrix over every API endpoint (listed from the router, so a new one
cannot be forgotten), tenant isolation, throttling of writes, lockout after failed sign-ins (API
tokens, the browser form, the admin's form; django-axes), the client address behind proxies, CSRF
on browser forms, `check --deploy`, tokens hashed at rest and never logged, and audit entries for
every decision."""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLResolver
from knox.crypto import hash_token
from knox.settings import CONSTANTS
from rest_framework.settings import api_settings
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from core.models import AuditEvent
from deployments import services as deployment_services
from deployments.models import ModelDeployment
from portal.api import ApiToken, token_create
from portal.login import LOCKED_OUT
from quotas import services as quota_services
from quotas.choices import QuotaChangeStatus
from quotas.models import GpuFlavor, Membership, QuotaChangeRequest, TenantQuota
from tests.support.factories import draft as model_draft
from tests.support.shared import PROJECT_ROOT
from tests.support.world import PASSWORD, ROLES, check_matrix

_names = itertools.count()


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()  # throttle histories and axes' failed sign-in counts live in the cache
    yield
    cache.clear()


# --- objects made fresh for every call (a call may change or delete what it touches) ------------


def _dep(world, state: str = "pending") -> ModelDeployment:
    dep = deployment_services.deployment_create(
        tenant=world.alpha, user=world.users["member"], data=model_draft(world, name=f"m{next(_names)}", max_replicas=1)
    )
    if state in ("approved", "stopped"):
        deployment_services.deployment_approve(
            deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
        )
    if state == "stopped":
        deployment_services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
    return dep


def _quota_request(world) -> QuotaChangeRequest:
    QuotaChangeRequest.objects.filter(status=QuotaChangeStatus.PENDING).update(status=QuotaChangeStatus.REJECTED)
    return quota_services.quota_change_request_create(
        tenant=world.alpha, flavor=world.a100, user=world.users["tenant_admin"], nominal_gpus=6, justification="more"
    )


def _flavor_body(name: str) -> dict:
    return {
        "name": name,
        "gpu_model": "L4",
        "accelerator_type": "L4",
        "gpu_memory_gib": 24,
        "gpus_per_node": 4,
        "cpu_per_gpu": 8,
        "memory_gib_per_gpu": 32,
        "node_labels": {},
        "tolerations": [],
        "price_per_gpu_hour": "0.80",
        "active": True,
    }


def _flavor() -> GpuFlavor:
    return GpuFlavor.objects.create(
        name=f"l4-{next(_names)}", gpu_model="L4", accelerator_type="L4", gpu_memory_gib=24, gpus_per_node=4
    )


def _person(tenant=None) -> User:
    """A new account (a member of `tenant` when given), so repeated calls never collide."""
    user = User.objects.create_user(f"person-{next(_names)}")
    if tenant is not None:
        Membership.objects.create(user=user, tenant=tenant, role="member")
    return user


def _alpha_quota(world) -> TenantQuota:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)


def _alpha_audit(world) -> AuditEvent:
    return (
        AuditEvent.objects.filter(tenant=world.alpha).first()
        or _dep(world)
        and AuditEvent.objects.filter(tenant=world.alpha).first()
    )


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
NO_SUCH_ORPHAN = {"backend": "kuberay", "namespace": "alpha", "name": "x"}

D = "/api/v1/deployments"
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
        lambda w, c: c.post("/api/v1/tenants/", {"slug": f"t{next(_names)}", "display_name": "T"}),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=403),
    ),
    ("tenant-detail", "patch"): (
        lambda w, c: c.patch("/api/v1/tenants/alpha/", {"display_name": "Alpha"}),
        expect(viewer=403, member=403, tenant_admin=403),
    ),
    ("tenant-policy", "get"): (lambda w, c: c.get("/api/v1/tenants/alpha/policy/"), ALPHA_READ),
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
        lambda w, c: c.post("/api/v1/tenants/alpha/members/", {"user": _person().username, "role": "viewer"}),
        expect(viewer=403, member=403, tenant_admin=201, platform_admin=201),
    ),
    ("tenant-member", "patch"): (
        lambda w, c: c.patch("/api/v1/tenants/alpha/members/alpha-viewer/", {"role": "viewer"}),
        expect(viewer=403, member=403),
    ),
    ("tenant-member", "delete"): (
        lambda w, c: c.delete(f"/api/v1/tenants/alpha/members/{_person(w.alpha).username}/"),
        expect(viewer=403, member=403, tenant_admin=204, platform_admin=204),
    ),
    ("audit-list", "get"): (lambda w, c: c.get("/api/v1/audit/"), READ_ALL),
    # Tenant admins read their tenant's audit log; viewers and members do not.
    ("audit-detail", "get"): (
        lambda w, c: c.get(f"/api/v1/audit/{_alpha_audit(w).pk}/"),
        expect(viewer=404, member=404),
    ),
    ("flavor-list", "get"): (lambda w, c: c.get("/api/v1/flavors/"), READ_ALL),
    ("flavor-list", "post"): (
        lambda w, c: c.post("/api/v1/flavors/", _flavor_body(f"new-{next(_names)}")),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=403),
    ),
    ("flavor-detail", "get"): (lambda w, c: c.get("/api/v1/flavors/a100-pcie/"), READ_ALL),
    ("flavor-detail", "put"): (
        lambda w, c: (f := _flavor()) and c.put(f"/api/v1/flavors/{f.name}/", _flavor_body(f.name)),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    ("flavor-detail", "patch"): (
        lambda w, c: c.patch(f"/api/v1/flavors/{_flavor().name}/", {"price_per_gpu_hour": "0.90"}),
        expect(viewer=403, member=403, tenant_admin=403, other_member=403),
    ),
    ("flavor-detail", "delete"): (
        lambda w, c: c.delete(f"/api/v1/flavors/{_flavor().name}/"),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=204, other_member=403),
    ),
    ("quota-list", "get"): (lambda w, c: c.get("/api/v1/quotas/"), READ_ALL),
    ("quota-detail", "get"): (lambda w, c: c.get(f"/api/v1/quotas/{_alpha_quota(w).pk}/"), ALPHA_READ),
    # Another tenant's slug is "does not exist" (400), like an unknown one.
    ("quota-list", "post"): (
        lambda w, c: c.post("/api/v1/quotas/", {"tenant": "alpha", "flavor": "a100-pcie", "nominal_gpus": 6}),
        expect(viewer=403, member=403, tenant_admin=403, platform_admin=201, other_member=400),
    ),
    ("quota-set-values", "post"): (
        lambda w, c: c.post(
            f"/api/v1/quotas/{_alpha_quota(w).pk}/set/",
            {"nominal_gpus": 1000, "borrowing_limit_gpus": 4, "reason": "matrix"},
        ),
        ADMIN_ONLY,
    ),
    ("quota-request-list", "get"): (lambda w, c: c.get("/api/v1/quota-requests/"), READ_ALL),
    # Another tenant's slug is "does not exist" (400), like an unknown one.
    ("quota-request-list", "post"): (
        lambda w, c: (
            _quota_request(w)
            and QuotaChangeRequest.objects.update(status="rejected") >= 0
            and c.post(
                "/api/v1/quota-requests/",
                {"tenant": "alpha", "flavor": "a100-pcie", "nominal_gpus": 6, "justification": "matrix"},
            )
        ),
        expect(viewer=403, member=403, tenant_admin=201, platform_admin=201, other_member=400),
    ),
    ("quota-request-detail", "get"): (
        lambda w, c: c.get(f"/api/v1/quota-requests/{_quota_request(w).pk}/"),
        ALPHA_READ,
    ),
    ("quota-request-approve", "post"): (
        lambda w, c: c.post(f"/api/v1/quota-requests/{_quota_request(w).pk}/approve/", {"comment": "ok"}),
        ADMIN_ONLY,
    ),
    ("quota-request-reject", "post"): (
        lambda w, c: c.post(f"/api/v1/quota-requests/{_quota_request(w).pk}/reject/", {"comment": "no"}),
        ADMIN_ONLY,
    ),
    ("deployment-list", "get"): (lambda w, c: c.get(f"{D}/"), READ_ALL),
    ("deployment-list", "post"): (
        lambda w, c: c.post(
            f"{D}/",
            {**model_draft(w, name=f"n{next(_names)}", max_replicas=1), "flavor": "h100-sxm5", "tenant": "alpha"},
        ),
        expect(viewer=403, member=201, tenant_admin=201, platform_admin=201, other_member=400),
    ),
    ("deployment-preview", "post"): (
        lambda w, c: c.post(
            f"{D}/preview/", {**model_draft(w, max_replicas=1), "flavor": "h100-sxm5", "tenant": "alpha"}
        ),
        expect(other_member=400),
    ),
    ("deployment-detail", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/"), ALPHA_READ),
    ("deployment-detail", "patch"): (lambda w, c: c.patch(f"{D}/{_dep(w).pk}/", {"max_model_len": 4096}), MEMBER_WRITE),
    ("deployment-detail", "delete"): (
        lambda w, c: c.delete(f"{D}/{_dep(w).pk}/"),
        expect(viewer=403, member=202, tenant_admin=202, platform_admin=202),
    ),
    ("deployment-advice", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/advice/"), ALPHA_READ),
    ("deployment-events", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/events/"), ALPHA_READ),
    ("deployment-timeline", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/timeline/?refresh=true"), ALPHA_READ),
    ("deployment-phases", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/phases/"), ALPHA_READ),
    # Engine logs: tenant members only (Action.LOGS), not viewers nor platform admins.
    ("deployment-logs", "get"): (
        lambda w, c: c.get(f"{D}/{_dep(w).pk}/logs/"),
        expect(viewer=403, platform_admin=403),
    ),
    ("deployment-rendered-manifest", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/manifest/"), ALPHA_READ),
    # Anyone who sees the deployment may try it (as on the page); this one has no endpoint yet: 409.
    ("deployment-try-prompt", "post"): (
        lambda w, c: c.post(f"{D}/{_dep(w).pk}/try/", {"prompt": "hi"}),
        expect(viewer=409, member=409, tenant_admin=409, platform_admin=409),
    ),
    ("deployment-metrics", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/metrics/"), ALPHA_READ),
    ("deployment-summary", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/summary/"), ALPHA_READ),
    ("deployment-objectives", "get"): (lambda w, c: c.get(f"{D}/{_dep(w).pk}/objectives/"), ALPHA_READ),
    ("deployment-objectives", "put"): (
        lambda w, c: c.put(
            f"{D}/{_dep(w).pk}/objectives/",
            {"ttft_p95_objective_s": 1.0, "waiting_floor": 2, "kv_cache_floor_pct": 90, "breach_share_pct": 10},
        ),
        MEMBER_WRITE,
    ),
    ("deployment-objectives", "patch"): (
        lambda w, c: c.patch(f"{D}/{_dep(w).pk}/objectives/", {"ttft_p95_objective_s": 0.5}),
        MEMBER_WRITE,
    ),
    ("deployment-approve", "post"): (lambda w, c: c.post(f"{D}/{_dep(w).pk}/approve/", {"generation": 1}), ADMIN_ONLY),
    ("deployment-reject", "post"): (lambda w, c: c.post(f"{D}/{_dep(w).pk}/reject/", {"reason": "no"}), ADMIN_ONLY),
    ("deployment-cancel", "post"): (lambda w, c: c.post(f"{D}/{_dep(w).pk}/cancel/"), MEMBER_WRITE),
    ("deployment-stop", "post"): (lambda w, c: c.post(f"{D}/{_dep(w, 'approved').pk}/stop/"), MEMBER_WRITE),
    ("deployment-start", "post"): (lambda w, c: c.post(f"{D}/{_dep(w, 'stopped').pk}/start/"), MEMBER_WRITE),
    ("deployment-scale", "post"): (
        lambda w, c: c.post(f"{D}/{_dep(w).pk}/scale/", {"min_replicas": 1, "max_replicas": 2}),
        MEMBER_WRITE,
    ),
    # API keys (access): viewers list names and dates; members mint for their tenant and revoke
    # their own (a member's key here); tenant admins any of the tenant's.
    ("apikey-list", "get"): (lambda w, c: c.get("/api/v1/keys/"), READ_ALL),
    ("apikey-list", "post"): (
        lambda w, c: c.post("/api/v1/keys/", {"tenant": "alpha", "name": "matrix"}),
        expect(viewer=403, member=201, tenant_admin=201, platform_admin=201),
    ),
    ("apikey-detail", "get"): (lambda w, c: c.get(f"/api/v1/keys/{_key(w).pk}/"), ALPHA_READ),
    ("apikey-revoke", "post"): (lambda w, c: c.post(f"/api/v1/keys/{_key(w).pk}/revoke/"), MEMBER_WRITE),
}


def _key(world):
    from access.services import key_mint

    return key_mint(user=world.users["member"], tenant=world.alpha, name=f"k{next(_names)}")[0]


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
        _dep(world)
        _quota_request(world)
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


# --- throttling ---------------------------------------------------------------------------------


def _rate(monkeypatch, scope: str, rate: str) -> None:
    # DRF copies DEFAULT_THROTTLE_RATES into a class attribute at import time, so
    # override_settings cannot change a rate: set it where the throttles read it.
    monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, scope, rate)


def _token_client(user, remote_addr="10.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=remote_addr)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user, name='t')[1]}")
    return client


class TestThrottling:
    def test_throttles_are_configured(self):
        classes = api_settings.DEFAULT_THROTTLE_CLASSES
        names = {c.__name__ if isinstance(c, type) else c.rsplit(".", 1)[-1] for c in classes}
        assert {"UserRateThrottle", "AnonRateThrottle"} <= names
        assert {"user", "anon", "writes"} <= set(api_settings.DEFAULT_THROTTLE_RATES)

    def test_writes_beyond_the_rate_get_429_while_reads_go_on(self, world, monkeypatch):
        _rate(monkeypatch, "writes", "3/min")
        member = _token_client(world.users["member"])
        body = {**model_draft(world, max_replicas=1), "flavor": "h100-sxm5", "tenant": "alpha"}
        codes = [member.post("/api/v1/deployments/preview/", body).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        refused = member.post("/api/v1/deployments/preview/", body)
        assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
        assert member.get("/api/v1/deployments/").status_code == 200  # GETs are not writes
        assert (
            _token_client(world.users["tenant_admin"]).post("/api/v1/deployments/preview/", body).status_code == 200
        )  # per user

    def test_failed_tokens_lock_the_address_out_with_a_json_429(self, world, settings):
        settings.AXES_FAILURE_LIMIT = 3
        guesser = APIClient(REMOTE_ADDR="10.0.0.66")
        guesser.credentials(HTTP_AUTHORIZATION=f"Token llmp_{secrets.token_hex(32)}")
        responses = [guesser.get("/api/v1/me/") for _ in range(5)]
        assert [r.status_code for r in responses] == [401, 401, 429, 429, 429]  # the 3rd failure locks
        assert responses[-1].json() == {"detail": LOCKED_OUT}
        assert responses[-1]["Retry-After"] == str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
        # Another address is not slowed down by this one's failures.
        elsewhere = APIClient(REMOTE_ADDR="10.0.0.7")
        elsewhere.credentials(HTTP_AUTHORIZATION=f"Token llmp_{secrets.token_hex(32)}")
        assert elsewhere.get("/api/v1/me/").status_code == 401

    def test_a_flood_of_bad_tokens_never_locks_out_a_valid_token_from_that_address(self, world, settings):
        settings.AXES_FAILURE_LIMIT = 3
        shared = APIClient(REMOTE_ADDR="10.0.0.66")  # e.g. one NAT address for a whole office
        shared.credentials(HTTP_AUTHORIZATION=f"Bearer llmp_{secrets.token_hex(32)}")
        assert [shared.get("/api/v1/me/").status_code for _ in range(10)] == [401, 401] + [429] * 8
        good = token_create(user=world.users["member"], name="t")[1]
        for scheme in ("Token", "Bearer"):
            shared.credentials(HTTP_AUTHORIZATION=f"{scheme} {good}")
            me = shared.get("/api/v1/me/")
            assert (me.status_code, me.json()["username"]) == (200, "alpha-member"), scheme
        # The valid token neither reset the count nor lifted the lockout for the guesses.
        shared.credentials(HTTP_AUTHORIZATION=f"Token llmp_{secrets.token_hex(32)}")
        assert shared.get("/api/v1/me/").status_code == 429


def _staff(username: str = "ops") -> User:
    return User.objects.create_user(username, password=PASSWORD, is_staff=True)


WRONG = {"username": "alpha-member", "password": "wrong"}
RIGHT = {"username": "alpha-member", "password": PASSWORD}


class TestBrowserLogin:
    def test_failed_sign_ins_lock_the_address_out_even_for_the_right_password(self, world, settings):
        settings.AXES_FAILURE_LIMIT = 3
        browser = Client(REMOTE_ADDR="10.0.0.66")
        assert [browser.post("/accounts/login/", WRONG).status_code for _ in range(3)] == [200, 200, 429]
        blocked = browser.post("/accounts/login/", RIGHT)
        assert blocked.status_code == 429 and "_auth_user_id" not in browser.session
        assert blocked["Content-Type"] == "text/plain; charset=utf-8" and blocked.content.decode() == LOCKED_OUT
        assert blocked["Retry-After"] == str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
        assert Client(REMOTE_ADDR="10.0.0.7").post("/accounts/login/", RIGHT).status_code == 302

    def test_the_admin_login_locks_out_too_and_shares_the_count(self, world, settings):
        settings.AXES_FAILURE_LIMIT = 3
        _staff()
        admin = Client(REMOTE_ADDR="10.0.0.66")
        wrong = {"username": "ops", "password": "wrong", "next": "/admin/"}
        assert [admin.post("/admin/login/", wrong).status_code for _ in range(3)] == [200, 200, 429]
        right = {"username": "ops", "password": PASSWORD, "next": "/admin/"}
        assert admin.post("/admin/login/", right).status_code == 429 and "_auth_user_id" not in admin.session
        assert Client(REMOTE_ADDR="10.0.0.7").post("/admin/login/", right).status_code == 302
        # One count per address: failures at the portal's form lock the admin's form, and back.
        portal_form = Client(REMOTE_ADDR="10.0.0.67")
        assert [portal_form.post("/accounts/login/", WRONG).status_code for _ in range(3)] == [200, 200, 429]
        assert portal_form.post("/admin/login/", right).status_code == 429

    def test_successful_sign_ins_are_not_counted(self, world, settings):
        settings.AXES_FAILURE_LIMIT = 2
        assert [Client(REMOTE_ADDR="10.0.0.8").post("/accounts/login/", RIGHT).status_code for _ in range(4)] == [
            302
        ] * 4


class TestClientAddress:
    def test_a_client_sent_x_forwarded_for_is_ignored_by_default(self, world, settings):
        settings.AXES_FAILURE_LIMIT = 3
        browser = Client(REMOTE_ADDR="10.0.0.66")
        # A new forged address on every guess does not spread the failures over many counts…
        codes = [
            browser.post("/accounts/login/", WRONG, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code for n in range(3)
        ]
        assert codes == [200, 200, 429]
        # …and a locked client cannot walk out under another one.
        assert browser.post("/accounts/login/", RIGHT, HTTP_X_FORWARDED_FOR="198.51.100.1").status_code == 429
        token = APIClient(REMOTE_ADDR="10.0.0.66", HTTP_X_FORWARDED_FOR="198.51.100.1")
        token.credentials(HTTP_AUTHORIZATION=f"Token llmp_{secrets.token_hex(32)}")
        assert token.get("/api/v1/me/").status_code == 429

    def test_behind_one_trusted_proxy_its_x_forwarded_for_entry_is_the_client(self, world, settings):
        settings.AXES_FAILURE_LIMIT = 3
        settings.TRUSTED_PROXY_COUNT = 1
        proxy = Client(REMOTE_ADDR="10.0.0.1")  # the ingress: every client arrives from its address
        codes = [
            proxy.post("/accounts/login/", WRONG, HTTP_X_FORWARDED_FOR="198.51.100.7").status_code for _ in range(3)
        ]
        assert codes == [200, 200, 429]
        # Another client behind the same proxy is not locked out…
        assert proxy.post("/accounts/login/", RIGHT, HTTP_X_FORWARDED_FOR="198.51.100.8").status_code == 302
        # …and the locked one cannot escape by writing its own entry before the proxy's.
        forged = "198.51.100.9, 198.51.100.7"
        assert (
            Client(REMOTE_ADDR="10.0.0.1").post("/accounts/login/", RIGHT, HTTP_X_FORWARDED_FOR=forged).status_code
            == 429
        )


class TestCsrf:
    def test_login_form_needs_the_csrf_token(self, world):
        browser = Client(enforce_csrf_checks=True)
        right = {"username": "alpha-member", "password": "correct-horse-battery"}
        assert browser.post("/accounts/login/", right).status_code == 403
        browser.get("/accounts/login/")
        token = browser.cookies["csrftoken"].value
        assert browser.post("/accounts/login/", {**right, "csrfmiddlewaretoken": token}).status_code == 302

    def test_browser_forms_and_session_api_calls_without_the_token_are_refused(self, world):
        dep = _dep(world)
        admin = Client(enforce_csrf_checks=True)
        admin.force_login(world.users["platform_admin"])
        assert admin.post(f"/deployments/{dep.pk}/approve/", {"reason": "csrf", "generation": 1}).status_code == 403
        member = Client(enforce_csrf_checks=True)
        member.force_login(world.users["member"])
        assert member.post("/deployments/new/", {"name": "x"}).status_code == 403
        session_api = APIClient(enforce_csrf_checks=True)
        session_api.force_login(world.users["platform_admin"])
        assert session_api.post(f"/api/v1/deployments/{dep.pk}/approve/", {"generation": 1}).status_code == 403
        dep.refresh_from_db()
        assert dep.state == "pending_approval"
        # Tokens are not ambient credentials a foreign page could ride on: no CSRF token needed.
        token_api = _token_client(world.users["platform_admin"])
        assert token_api.post(f"/api/v1/deployments/{dep.pk}/approve/", {"generation": 1}).status_code == 200


# Production as the k8s overlay sets it, with the shared Redis cache (check --deploy connects to nothing).
PRODUCTION = {
    "DEBUG": "false",
    "HTTPS": "true",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "ALLOWED_HOSTS": "portal.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://portal.example.com",
    "CACHE_URL": "redis://127.0.0.1:6379/11",
}


def _check_deploy(**overrides: str) -> str:
    """`manage.py check --deploy --fail-level WARNING` with production settings; its exit code and output."""
    # DJANGO_ALLOW_ASYNC_UNSAFE is the browser tests' (session-wide, for Playwright's loop);
    # a production environment never has it and check --deploy rightly warns about it.
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=PROJECT_ROOT,
        env={**inherited, **PRODUCTION, **overrides},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


class TestDeployCheck:
    def test_check_deploy_with_production_settings_prints_no_warnings(self):
        output = _check_deploy()
        assert output.startswith("exit 0\n"), output
        assert "System check identified no issues" in output and "WARNING" not in output, output

    def test_failed_sign_ins_counted_in_a_per_process_cache_are_a_warning(self):
        output = _check_deploy(CACHE_URL="locmem://")
        assert output.startswith("exit 1\n"), output
        assert "(portal.W001) Failed sign-ins are counted in the 'default' cache, a LocMemCache" in output, output
        assert "System check identified 1 issue" in output, output


# --- tokens and the audit log -------------------------------------------------------------------


class TestTokens:
    def test_only_the_digest_is_stored_and_the_secret_is_never_logged(self, world, caplog):
        caplog.set_level(logging.DEBUG)
        member = world.client("member")
        with CaptureQueriesContext(connection) as queries:  # also logs SQL to django.db.backends
            created = member.post("/api/v1/tokens/", {"name": "ci pipeline"})
            secret = created.json()["token"]
            user_client = APIClient()
            user_client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
            assert user_client.get("/api/v1/me/").json()["username"] == "alpha-member"
            user_client.credentials(HTTP_AUTHORIZATION=f"Token {secret[:-4]}beef")
            assert user_client.get("/api/v1/me/").status_code == 401
            key = created.json()["id"]
            assert member.delete(f"/api/v1/tokens/{key}/").status_code == 204
        assert created.status_code == 201 and secret.startswith("llmp_")
        secret_part = secret[CONSTANTS.TOKEN_KEY_LENGTH :]  # what the public prefix does not reveal
        for record in caplog.records:
            assert secret_part not in record.getMessage(), record.name
        assert all(secret_part not in q["sql"] for q in queries.captured_queries)
        assert secret_part not in str(list(AuditEvent.objects.values()))

    def test_the_row_holds_the_digest_not_the_secret(self, world):
        token, secret = token_create(user=world.users["member"], name="x")
        row = ApiToken.objects.filter(pk=token.pk).values().get()
        assert row["digest"] == hash_token(secret) and row["token_key"] == secret[: CONSTANTS.TOKEN_KEY_LENGTH]
        assert not any(secret in str(value) for value in row.values())
        with connection.cursor() as cursor:  # and nothing in the table, read raw
            cursor.execute(f"SELECT * FROM {ApiToken._meta.db_table}")
            assert secret not in str(cursor.fetchall())


class TestAuditLog:
    def test_decisions_quota_changes_and_tokens_are_audited_with_actor_and_reason(self, world):
        admin, admin_user = world.client("platform_admin"), world.users["platform_admin"]
        approved, rejected = _dep(world), _dep(world)
        assert admin.post(f"{D}/{approved.pk}/approve/", {"reason": "capacity ok", "generation": 1}).status_code == 200
        assert admin.post(f"{D}/{rejected.pk}/reject/", {"reason": "too big"}).status_code == 200
        qa = _quota_request(world)
        assert admin.post(f"/api/v1/quota-requests/{qa.pk}/approve/", {"comment": "budget ok"}).status_code == 200
        qr = _quota_request(world)
        assert admin.post(f"/api/v1/quota-requests/{qr.pk}/reject/", {"comment": "no budget"}).status_code == 200
        quota = _alpha_quota(world)
        assert (
            admin.post(f"/api/v1/quotas/{quota.pk}/set/", {"nominal_gpus": 10, "reason": "new nodes"}).status_code
            == 200
        )
        created = world.client("member").post("/api/v1/tokens/", {"name": "ci"}).json()
        assert world.client("member").delete(f"/api/v1/tokens/{created['id']}/").status_code == 204

        def entry(action, object_id):
            return AuditEvent.objects.get(action=action, object_id=str(object_id))

        for action, obj_id, actor, reason in [
            ("deployment.approve", approved.pk, admin_user, "capacity ok"),
            ("deployment.reject", rejected.pk, admin_user, "too big"),
            ("quota_change.approve", qa.pk, admin_user, "budget ok"),
            ("quota_change.reject", qr.pk, admin_user, "no budget"),
            ("quota.set", quota.pk, admin_user, "new nodes"),
            ("quota_change.request", qa.pk, world.users["tenant_admin"], "more"),
        ]:
            event = entry(action, obj_id)
            assert (event.actor, event.reason, event.tenant) == (actor, reason, world.alpha), action
        assert entry("quota_change.approve", qa.pk).changes["to"]["nominal_gpus"] == 6
        for action in ("token.create", "token.revoke"):
            event = entry(action, created["id"])
            assert event.actor == world.users["member"] and event.changes["name"] == "ci"
