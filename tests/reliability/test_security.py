"""Security: throttling of writes, lockout after failed sign-ins (API tokens, the browser form, the
admin's form; django-axes), the client address behind proxies, CSRF on browser forms, `check
--deploy`, tokens hashed at rest and never logged, and audit entries for every decision. The
permission matrix over every API endpoint and tenant isolation are in test_matrix.py."""

from __future__ import annotations

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
from knox.crypto import hash_token
from knox.settings import CONSTANTS
from rest_framework.settings import api_settings
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from core.models import AuditEvent
from portal.api import ApiToken, token_create
from portal.login import LOCKED_OUT
from tests.reliability.objects import alpha_quota, fresh_dep, fresh_quota_request
from tests.support.factories import draft as model_draft
from tests.support.shared import PROJECT_ROOT
from tests.support.world import PASSWORD

D = "/api/v1/deployments"


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()  # throttle histories and axes' failed sign-in counts live in the cache
    yield
    cache.clear()


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
        dep = fresh_dep(world)
        admin = Client(enforce_csrf_checks=True)
        admin.force_login(world.users["platform_admin"])
        assert admin.post(f"/deployments/{dep.pk}/approve/", {"reason": "csrf", "revision": 1}).status_code == 403
        member = Client(enforce_csrf_checks=True)
        member.force_login(world.users["member"])
        assert member.post("/deployments/new/", {"name": "x"}).status_code == 403
        session_api = APIClient(enforce_csrf_checks=True)
        session_api.force_login(world.users["platform_admin"])
        assert session_api.post(f"/api/v1/deployments/{dep.pk}/approve/", {"revision": 1}).status_code == 403
        assert session_api.post(f"/api/v1/deployments/{dep.pk}/revisions/1/approve/").status_code == 403
        dep.refresh_from_db()
        assert dep.state == "pending_approval"
        # Tokens are not ambient credentials a foreign page could ride on: no CSRF token needed.
        token_api = _token_client(world.users["platform_admin"])
        assert token_api.post(f"/api/v1/deployments/{dep.pk}/approve/", {"revision": 1}).status_code == 200


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
        approved, rejected, change = fresh_dep(world), fresh_dep(world), fresh_dep(world, "changed")
        assert admin.post(f"{D}/{approved.pk}/approve/", {"reason": "capacity ok", "revision": 1}).status_code == 200
        assert admin.post(f"{D}/{rejected.pk}/reject/", {"reason": "too big", "revision": 1}).status_code == 200
        assert admin.post(f"{D}/{change.pk}/revisions/2/reject/", {"reason": "not now"}).status_code == 200
        qa = fresh_quota_request(world)
        assert admin.post(f"/api/v1/quota-requests/{qa.pk}/approve/", {"comment": "budget ok"}).status_code == 200
        qr = fresh_quota_request(world)
        assert admin.post(f"/api/v1/quota-requests/{qr.pk}/reject/", {"comment": "no budget"}).status_code == 200
        quota = alpha_quota(world)
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
            ("deployment.reject", change.pk, admin_user, "not now"),
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
